#!/usr/bin/env bash
# The watchdog stops a job whose stage is wedged inside a long computation (a 10-minute injected
# straggler delay), in one process and across processes: the report comes at --watchdog-seconds,
# and the process then ends with exit code 1, saying it ended a computation that did not return,
# instead of waiting for it. Skipped (77) without Fashion-MNIST.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
job=(--hidden 32 --batch-size 64 --max-steps 4 --eval-batches 1 --no-progress --watchdog-seconds 1
     --straggler 1:600000)
timed() {  # timed NAME MAX_SECONDS command...: the command must end within MAX_SECONDS
  local name=$1 max=$2; shift 2
  local t0; t0=$(date +%s)
  check "$name" 1 "watchdog: no progress.*|ending the process" -- timeout 60 "$@"
  local took=$(( $(date +%s) - t0 ))
  echo "     $name ended after $took s"
  [ "$took" -le "$max" ] || { echo "FAIL $name took $took s (at most $max)"; fail=1; }
}
timed "data parallel, one process" 10 "$troupe" train --dp 2 "${job[@]}" --out "$tmp/dp"
out=$(timeout 60 "$troupe" train --dp 2 "${job[@]}" --out "$tmp/dp2" 2>&1)
grep -q "ending the process" <<<"$out" || { echo "FAIL the log does not say the process was ended"; fail=1; }
timed "data parallel, two processes" 15 "$troupe" train --nodes 2 --peer-timeout 5 "${job[@]}" --out "$tmp/mp"
exit $fail
