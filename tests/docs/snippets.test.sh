#!/usr/bin/env bash
# Every C++ snippet in README.md and docs/ builds against the installed library: this build is
# installed into a fresh prefix, each ```cpp block becomes a file of a project of its own that
# finds troupe there (find_package), and the project is built. A snippet that lost an include
# or calls a function that no longer exists fails here, naming the page and line.
# usage: snippets.test.sh CMAKE BUILD_DIR SOURCE_DIR GENERATOR CXX
set -u
cmake=$1 build=$2 source=$3 generator=$4 cxx=$5
work=$build/doc_snippets_test
rm -rf "$work/prefix" "$work/snippets"; mkdir -p "$work"
"$cmake" --install "$build" --prefix "$work/prefix" >"$work/install.log" 2>&1 || { echo "FAIL install:"; tail "$work/install.log"; exit 1; }
python3 "$source/tests/docs/extract_snippets.py" "$source" "$work/snippets" || exit 1
ls "$work/snippets"/*.cpp >/dev/null 2>&1 || { echo "FAIL: no C++ snippet found in README.md or docs/"; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if ! "$cmake" -S "$source/tests/docs/snippet_project" -B "$work/app" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$work/prefix" -DSNIPPETS="$work/snippets" "${launcher[@]}" \
     >"$work/configure.log" 2>&1; then
  echo "FAIL configure:"; grep -v '^--' "$work/configure.log" | head -20; exit 1
fi
if ! "$cmake" --build "$work/app" -- -k 0 >"$work/build.log" 2>&1; then
  echo "FAIL: snippets that do not build (file and line are the page's):"
  grep -E "error|undefined reference" "$work/build.log" | head -40
  exit 1
fi
echo "ok: $(ls "$work/snippets" | wc -l) snippets build: $(ls "$work/snippets" | tr '\n' ' ')"
rm -rf "$work/prefix"
