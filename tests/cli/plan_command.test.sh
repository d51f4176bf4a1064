#!/usr/bin/env bash
# `troupe plan`: a report with every memory kind, JSON, a search table, bad input exiting 2 with a
# line naming what is wrong (missing file, unknown key, a mesh that does not divide), and the
# machine calibration with the forecast it feeds.
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
expect_2 "nope.toml: cannot open" "$dir/nope.toml" "$dir/dgx-a100-1024.toml"
printf '[model]\nname = "x"\nlayers = 2\nhidden = 64\nheads = 4\nsequence = 128\nvocab = 1000\nwidth = 3\n' >"$tmp/m.toml"
expect_2 "model.width: unknown key" "$tmp/m.toml" "$dir/dgx-a100-1024.toml"
expect_2 "does not divide the 1024 GPUs" "$dir/gpt3-175b.toml" "$dir/dgx-a100-1024.toml" --tp 8 --pp 3
expect_2 "has 1000 ranks but cluster dgx-a100 has 1024 GPUs" "$dir/gpt3-175b.toml" "$dir/dgx-a100-1024.toml" --tp 8 --pp 5 --dp 25
table=$("$troupe" plan "$dir/megatron-1.7b.toml" "$dir/dgx-a100-1024.toml" --nodes 4 --search --top 3) || fail "search exited $?"
[ "$(grep -c '^[0-9] .*dp.*pp.*tp' <<<"$table")" -eq 3 ] || fail "search table: $table"
# Beside the search, the configuration the model file's paper ran, and why plan 1 beats it.
grep -q "against the published configuration (Narayanan et al. 2021, Table 1: t 1, p 1" <<<"$table" || fail "no reference: $table"
grep -q "x the reference's throughput" <<<"$table" || fail "no explanation: $table"
"$troupe" plan "$dir/megatron-1.7b.toml" "$dir/dgx-a100-1024.toml" --nodes 4 --search --top 1 --svg "$tmp/best.svg" >/dev/null ||
  fail "search --svg exited $?"
grep -q "<svg" "$tmp/best.svg" || fail "search --svg wrote no timeline"
# --calibrate measures this machine on a job's model (here the default MLP) and writes the file
# that `troupe train --forecast` reads; the forecast is printed before the run and compared after.
out=$("$troupe" plan --calibrate "$tmp/cpu.toml" 2>&1) || fail "--calibrate exited $?: $out"
for key in gemm_flops_per_s attention_forward_s_per_unit elementwise_bytes_per_s all_reduce_bytes_per_s op_scale action_overhead_s; do
  grep -q "^$key = " "$tmp/cpu.toml" || fail "$tmp/cpu.toml lacks $key: $(cat "$tmp/cpu.toml")"
done
grep -q 'calibrated_with = "mlp 784-256-256-10"' "$tmp/cpu.toml" || fail "calibrated_with: $(cat "$tmp/cpu.toml")"
out=$("$troupe" train --forecast "$tmp/cpu.toml" --forecast-only --pp 2 --micro-batches 4 --out "$tmp/f" 2>&1) || fail "--forecast-only exited $?: $out"
grep -q "predicted step" <<<"$out" || fail "no predicted step: $out"
grep -q "rank 1: peak device memory" <<<"$out" || fail "no rank 1 forecast: $out"
[ ! -e "$tmp/f/metrics.jsonl" ] || fail "--forecast-only trained"
out=$("$troupe" train --forecast "$tmp/cpu.toml" --max-steps 6 --no-progress --out "$tmp/r" 2>&1) || fail "--forecast run exited $?: $out"
grep -q "forecast against the run: step .* predicted, .* measured" <<<"$out" || fail "no comparison: $out"
grep -q "forecast against the run: rank 0 peak device memory" <<<"$out" || fail "no memory comparison: $out"
printf '[machine]\nname = "x"\n' >"$tmp/short.toml"
msg=$("$troupe" train --forecast "$tmp/short.toml" --forecast-only 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "short.toml: \[machine\].calibrated_with: missing key\|machine.calibrated_with: missing key" <<<"$msg" || fail "short machine file: rc $rc: $msg"
msg=$("$troupe" train --forecast "$tmp/cpu.toml" --forecast-only --dp 2 --zero 1 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "the forecast does not model --zero 1" <<<"$msg" || fail "zero 1 forecast: rc $rc: $msg"
msg=$("$troupe" train --forecast "$tmp/cpu.toml" --forecast-only --device cuda:0 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "the forecast does not model ranks on cuda:0" <<<"$msg" || fail "gpu forecast: rc $rc: $msg"
echo OK
