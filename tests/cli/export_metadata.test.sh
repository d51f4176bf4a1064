#!/usr/bin/env bash
# An export carries its own model kind's fields only, and a GPT's its characters (issue 37): an
# MLP export has no GPT fields, a GPT export no MLP fields and "model.vocabulary", the corpus's
# distinct characters in token order (tab read as space, other bytes outside printable ASCII as
# '?'). A GPT checkpoint resumed on another corpus with as many distinct characters, where each
# token id would silently stand for another character, is refused naming both, and the
# checkpoint is left as it was.
# Usage: export_metadata.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
meta() {  # meta FILE: the safetensors header's metadata as JSON
  python3 -c 'import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
print(json.dumps(json.loads(f.read(n))["__metadata__"], sort_keys=True))' "$1"
}
printf 'abc\tdef\n\xc3\xa9 abc def\n%.0s' {1..200} >"$dir/a.txt"   # tab, newline, two non-ASCII bytes
gpt=(train --model gpt --blocks 1 --channels 16 --heads 2 --context 8 --batch-size 8 --eval-batches 1 --no-progress)
check "a GPT trains and saves" 0 "done: 2 steps" -- "$troupe" "${gpt[@]}" --max-steps 2 --corpus "$dir/a.txt" --checkpoint-dir "$dir/ck" --out "$dir/r"
check "troupe export of the GPT" 0 "" -- "$troupe" export "$dir/ck" "$dir/gpt.safetensors"
m=$(meta "$dir/gpt.safetensors")
python3 - "$m" <<'PY' || fail=1
import json, sys
m = json.loads(sys.argv[1])
want = "\n ?abcdef"  # sorted distinct characters after the mapping
bad = [k for k in ("model.inputs", "model.hidden", "model.classes") if k in m]
if m.get("model.vocabulary") != want or m.get("model.vocab") != str(len(want)) or bad:
    print("FAIL GPT metadata:", m); sys.exit(1)
print("ok   the GPT export has its 8 characters in token order and no MLP field")
PY
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && {
  check "an MLP trains and saves" 0 "done: 1 steps" -- "$troupe" train --hidden 16 --max-steps 1 --eval-batches 1 \
    --no-progress --checkpoint-dir "$dir/mlp" --out "$dir/m"
  check "troupe export of the MLP" 0 "" -- "$troupe" export "$dir/mlp" "$dir/mlp.safetensors"
  python3 - "$(meta "$dir/mlp.safetensors")" <<'PY' || fail=1
import json, sys
m = json.loads(sys.argv[1])
bad = [k for k in ("model.vocab", "model.vocabulary", "model.context", "model.channels", "model.heads", "model.blocks") if k in m]
if bad or m.get("model.hidden") != "16" or m.get("model.classes") != "10":
    print("FAIL MLP metadata:", m); sys.exit(1)
print("ok   the MLP export has no GPT field")
PY
}
# Another corpus, as many distinct characters ("ghijkl" for "abcdef"): refused, named.
printf 'ghi\tjkl\n\xc3\xa9 ghi jkl\n%.0s' {1..200} >"$dir/b.txt"
before=$(cd "$dir/ck" && find . -type f -exec md5sum {} + | sort)
check "a GPT checkpoint resumed on another corpus is refused naming both character sets" 1 \
  'saved with the characters "\\n \?abcdef" and this corpus has "\\n \?ghijkl"' -- \
  "$troupe" "${gpt[@]}" --max-steps 4 --corpus "$dir/b.txt" --checkpoint-dir "$dir/ck" --resume latest --out "$dir/r2"
[ "$before" = "$(cd "$dir/ck" && find . -type f -exec md5sum {} + | sort)" ] || { echo "FAIL the refused resume changed the checkpoint"; fail=1; }
check "the same corpus resumes" 0 "resumed at step 2" -- \
  "$troupe" "${gpt[@]}" --max-steps 4 --corpus "$dir/a.txt" --checkpoint-dir "$dir/ck" --resume latest --out "$dir/r3"
exit $fail
