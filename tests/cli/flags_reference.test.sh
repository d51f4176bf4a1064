#!/bin/sh
# docs/reference/flags.md is what `troupe info --flags-reference` prints now: a tunable added,
# removed or re-documented without regenerating the page fails here, with the command that fixes it.
# Usage: flags_reference.test.sh TROUPE SOURCE_DIR
set -u
troupe=$1
page=$2/docs/reference/flags.md
[ -f "$page" ] || { echo "FAIL: $page is missing: troupe info --flags-reference > docs/reference/flags.md"; exit 1; }
if ! "$troupe" info --flags-reference | diff -u "$page" -; then
  echo "FAIL: $page is stale (diff above: - the page, + the table); regenerate it:"
  echo "  troupe info --flags-reference > docs/reference/flags.md"
  exit 1
fi
grep -q '^| `--zero` | `stage` |' "$page" || { echo "FAIL: no --zero row under [zero]"; exit 1; }
echo "ok: $page is current"
