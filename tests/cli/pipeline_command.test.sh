#!/usr/bin/env bash
# `troupe schedule` and `troupe train --pp` as a user meets them: every builder draws (text, SVG,
# Chrome trace) with the textbook bubble, bad pipeline flags are refused with a clear message and
# exit code 2 before any data is read, and a real 2-stage run writes its measured timeline.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# (P-1)/(M+P-1) = 3/11 = 27.3% for GPipe and 1F1B at P=4, M=8; (P-1)/(vM+P-1) = 3/19 = 15.8% interleaved.
check "gpipe bubble" 0 "bubble 27.3%, peak live activations 8 8 8 8" -- "$troupe" schedule --schedule gpipe --pp 4 --micro-batches 8
check "1f1b bubble" 0 "bubble 27.3%, peak live activations 4 3 2 1" -- "$troupe" schedule --schedule 1f1b --pp 4 --micro-batches 8
check "interleaved bubble" 0 "bubble 15.8%" -- "$troupe" schedule --schedule interleaved --pp 4 --micro-batches 8 --virtual-stages 2
check "zb-h1 text table" 0 "stage 3  RA0<2  F0 +I0 +SG0>2" -- "$troupe" schedule --schedule zb-h1 --pp 4 --micro-batches 8
# Ready dispatch simulated beside fixed under the runtime's jitter draws (issue 40): seeded, so exact.
check "ready dispatch simulated beside fixed" 0 "fixed: mean step 253\.841.*ready: mean step 226\.822.*\(1\.119x the fixed order's throughput\)" -- \
  bash -c "'$troupe' schedule --schedule 1f1b --pp 4 --micro-batches 16 --forward 0.2 --backward-input 0.2 --backward-weight 0.2 --dispatch ready --ready-stash 4 --jitter-ms 10 --steps 200 | tr '\n' ' '"
check "svg and trace written" 0 "step" -- "$troupe" schedule --schedule 1f1b --pp 2 --micro-batches 4 --svg "$tmp/s.svg" --trace "$tmp/s.json"
grep -q "<svg" "$tmp/s.svg" || { echo "FAIL svg file"; fail=1; }
grep -q '"traceEvents"' "$tmp/s.json" || { echo "FAIL trace file"; fail=1; }
check "unknown schedule exits 2" 2 "--schedule: must be one of" -- "$troupe" schedule --schedule pipedream
check "interleaved M not a multiple of P" 2 "--micro-batches 6 is not a multiple of --pp 4" -- "$troupe" schedule --schedule interleaved --pp 4 --micro-batches 6

check "train: P too large for the layers" 2 "needs 8 model chunks, but the mlp has only 5 layers" -- \
  "$troupe" train --pp 4 --schedule interleaved --micro-batches 4 --hidden 64,64 --out "$tmp/a"
check "train: batch not divisible by M" 2 "--batch-size 100 is not divisible by --micro-batches 8" -- \
  "$troupe" train --pp 2 --micro-batches 8 --batch-size 100 --out "$tmp/b"
check "train: interleaved M not multiple of P" 2 "not a multiple of --pp 2" -- \
  "$troupe" train --pp 2 --schedule interleaved --micro-batches 3 --hidden 64,64,64 --out "$tmp/c"
check "train: bad cut" 2 "--cuts" -- "$troupe" train --pp 2 --micro-batches 2 --cuts 2,x --out "$tmp/d"
help=$("$troupe" train --help 2>&1)
for opt in --pp --schedule --micro-batches --virtual-stages --cuts --watchdog-seconds; do
  grep -q -- "$opt" <<<"$help" || { echo "FAIL train --help lacks $opt"; fail=1; }
done
if [ -d /usr/share/datasets/fashion-mnist ]; then
  check "train: 2-stage zb-h1 run" 0 "done: 6 steps" -- "$troupe" train --pp 2 --schedule zb-h1 --micro-batches 4 \
    --hidden 32,32 --batch-size 64 --max-steps 6 --eval-batches 1 --out "$tmp/run" --no-progress
  grep -q "<svg" "$tmp/run/timeline.svg" || { echo "FAIL measured timeline.svg"; fail=1; }
  grep -q '"traceEvents"' "$tmp/run/trace.json" || { echo "FAIL measured trace.json"; fail=1; }
fi
exit $fail
