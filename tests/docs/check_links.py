#!/usr/bin/env python3
"""Every relative link in README.md and docs/ resolves inside the repository.

A link [text](target) or [text](target#anchor) whose target is not a URL must name a file or
folder that exists, relative to the page that holds it, and stay inside the repository; an
anchor into a Markdown page must be one of that page's headings (GitHub's rule: lower case,
punctuation dropped, spaces to hyphens). Links inside code blocks and inline code are not links.
Prints each broken link as page:line and exits 1 if there is one.

  tests/docs/check_links.py [root]
"""
import pathlib
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def pages(root):
    yield root / "README.md"
    yield from sorted((root / "docs").rglob("*.md"))


def prose_lines(text):
    """(line number, line) outside fenced code blocks, inline code blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield n, re.sub(r"`[^`]*`", "", line)


def anchors(page):
    """GitHub's heading ids of a Markdown page."""
    seen, out = {}, set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    broken, count = [], 0
    for page in pages(root):
        if not page.exists():
            broken.append(f"{page}: missing")
            continue
        for n, line in prose_lines(page.read_text(encoding="utf-8")):
            for m in LINK.finditer(line):
                target = m.group(1) or m.group(2)
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                count += 1
                path, _, anchor = target.partition("#")
                where = f"{page.relative_to(root)}:{n}: {target}"
                dest = (page.parent / path).resolve() if path else page
                if root not in dest.parents and dest != root:
                    broken.append(f"{where}: points outside the repository")
                elif not dest.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    for b in broken:
        print("broken link:", b)
    print(f"{count} links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
