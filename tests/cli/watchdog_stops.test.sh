#!/usr/bin/env bash
# The watchdog stops a job whose stage is wedged inside a long computation (a 10-minute injected
# straggler delay), in one process and across processes: the report comes at --watchdog-seconds,
# and the process then ends with exit code 1, saying it ended a computation that did not return,
# instead of waiting for it. A stage wedged inside a tensor-parallel group's collective is shown by
# the group's ledger (which call waits, for how long, who has not arrived). Skipped (77) without
# Fashion-MNIST.
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
# Wedged inside a tensor-parallel group: rank 1's first compute action is held for up to a minute
# (--jitter), so rank 0 waits inside the group's all-reduce, where neither stage can answer. The
# report shows the group's ledger: rank 0's call waiting, and rank 1 not yet in it.
# In one process and over two (where rank 1's ledger comes from the other process).
for nodes in 1 2; do
  out=$(timeout 60 "$troupe" train --nodes "$nodes" --peer-timeout 5 --tp 2 --hidden 32 --batch-size 64 --max-steps 4 \
    --eval-batches 1 --no-progress --watchdog-seconds 1 --jitter 1:60000 --out "$tmp/tp$nodes" 2>&1)
  if grep -qE "tp group 0 \(ranks 0,1\) member 0/2 seq 0 all-reduce of [0-9]+: inside the group, waiting for its peers.*waiting [0-9.]+ ms so far" <<<"$out" &&
     grep -q "tp group 0 (ranks 0,1) member 1/2: no collective called yet" <<<"$out"; then
    echo "ok   a stage wedged inside a tp group ($nodes process(es)): the report shows both members' ledgers"
  else
    echo "FAIL the report of a stage wedged inside a tp group ($nodes process(es)) lacks the group's ledger:"
    grep -A8 "watchdog:" <<<"$out" | head -12
    fail=1
  fi
done
timed "data parallel, two processes" 15 "$troupe" train --nodes 2 --peer-timeout 5 "${job[@]}" --out "$tmp/mp"
exit $fail
