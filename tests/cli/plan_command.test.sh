#!/usr/bin/env bash
# `troupe plan`: a report with every memory kind, JSON, a search table, and bad input exiting 2
# with a line naming what is wrong (missing file, unknown key, a mesh that does not divide).
set -u
troupe="$1"; dir="$2"
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
out=$("$troupe" plan "$dir/gpt3-175b.toml" "$dir/dgx-a100-1024.toml" --tp 8 --pp 8 2>&1) || fail "plan exited $?: $out"
for kind in parameters gradients optimizer_state activations buffers "TFLOP/s per GPU" MFU "step time"; do
  grep -q "$kind" <<<"$out" || fail "report lacks $kind: $out"
done
json=$("$troupe" plan "$dir/gpt3-175b.toml" "$dir/dgx-a100-1024.toml" --tp 8 --pp 8 --json) || fail "--json exited $?"
python3 -c 'import json,sys; j=json.loads(sys.argv[1]); assert j["dp"]==16 and j["tflops_per_gpu"]>0, j' "$json" || fail "bad JSON: $json"
expect_2() {  # expect_2 WHAT-IN-MESSAGE ARGS...
  local what="$1"; shift
  msg=$("$troupe" plan "$@" 2>&1); rc=$?
  [ $rc -eq 2 ] || fail "exit $rc (want 2) for $*: $msg"
  grep -q -- "$what" <<<"$msg" || fail "message lacks '$what': $msg"
}
expect_2 "nope.toml: cannot read" "$dir/nope.toml" "$dir/dgx-a100-1024.toml"
printf '[model]\nname = "x"\nlayers = 2\nhidden = 64\nheads = 4\nsequence = 128\nvocab = 1000\nwidth = 3\n' >"$tmp/m.toml"
expect_2 "model.width: unknown key" "$tmp/m.toml" "$dir/dgx-a100-1024.toml"
expect_2 "does not divide the 1024 GPUs" "$dir/gpt3-175b.toml" "$dir/dgx-a100-1024.toml" --tp 8 --pp 3
expect_2 "has 1000 ranks but cluster dgx-a100 has 1024 GPUs" "$dir/gpt3-175b.toml" "$dir/dgx-a100-1024.toml" --tp 8 --pp 5 --dp 25
table=$("$troupe" plan "$dir/megatron-1.7b.toml" "$dir/dgx-a100-1024.toml" --nodes 4 --search --top 3) || fail "search exited $?"
[ "$(grep -c '^[0-9] .*dp.*pp.*tp' <<<"$table")" -eq 3 ] || fail "search table: $table"
# Beside the search, the configuration the model file's paper ran, and why plan 1 beats it.
grep -q "against the published configuration (Narayanan et al. 2021, Table 1: t 1, p 1" <<<"$table" || fail "no reference: $table"
grep -q "x the reference's throughput" <<<"$table" || fail "no explanation: $table"
echo OK
