#!/usr/bin/env python3
"""Writes every ```cpp block of README.md and docs/ to OUT/<page>_<n>.cpp.

Each block is a whole translation unit: docs/ promise that a snippet builds as shown.

  tests/docs/extract_snippets.py ROOT OUT
"""
import pathlib
import re
import sys


def main():
    root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.cpp"):
        old.unlink()
    count = 0
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        block, n, start = None, 0, 0
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            fence = line.strip()
            if block is None and re.fullmatch(r"```(cpp|c\+\+)", fence):
                block, start = [], i
            elif block is not None and fence == "```":
                n += 1
                name = re.sub(r"[^A-Za-z0-9]+", "_", str(page.relative_to(root).with_suffix(""))) + f"_{n}"
                origin = f"// {page.relative_to(root)}, line {start}\n#line {start + 1} \"{page.relative_to(root)}\"\n"
                (out / f"{name}.cpp").write_text(origin + "\n".join(block) + "\n", encoding="utf-8")
                block, count = None, count + 1
            elif block is not None:
                block.append(line)
    print(f"{count} C++ snippets written to {out}")


if __name__ == "__main__":
    main()
