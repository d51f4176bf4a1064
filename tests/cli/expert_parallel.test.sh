#!/bin/bash
# --ep: a mixture-of-experts GPT at dp 4 x ep 2 (each expert group of 2 replicas shares out the 4
# experts; each expert's gradients reduce over the 2 replicas holding it) gives the losses and the
# router's counts of the same job without expert parallelism, in one process and over 2 and 4
# processes on the TCP ring, Gloo and MPI (under mpirun), so every token's trip to its expert's
# owner and back crosses processes. A process killed mid-run is named and the job ends with
# every process. Bad combinations are refused naming the fields. Gloo and MPI
# are skipped where troupe was built without them (or mpirun is missing).
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
base=(train --model gpt --experts 4 --top-k 2 --batch-size 16 --lr 1e-3 --eval-batches 1 --no-progress --peer-timeout 10
      --dp 4)
job=("${base[@]}" --max-steps 8)
has_gloo=0; "$troupe" info | grep -q "collective back ends: .*gloo" && has_gloo=1
has_mpi=0; "$troupe" info | grep -q "collective back ends: .*mpi" && command -v mpirun > /dev/null && has_mpi=1
same_routing() {  # the router's tokens per expert, every step, as in the reference
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
def counts(p): return [json.loads(l)["expert_tokens"] for l in open(p) if '"expert_tokens"' in l]
a, b = counts(sys.argv[1]), counts(sys.argv[2])
if len(a) != 8 or a != b: sys.exit(f"FAIL routing differs: {a[:1]} vs {b[:1]}")
PY
}
check "dp 4 without expert parallelism" 0 "done: 8 steps" -- timeout 120 "$troupe" "${job[@]}" --out "$tmp/dense"
check "dp 4 x ep 2 in one process" 0 "ep 2: each 2 consecutive replicas share out the experts" -- \
  timeout 120 "$troupe" "${job[@]}" --ep 2 --out "$tmp/one"
same_losses "$tmp/dense" "$tmp/one" || fail=1
same_routing "$tmp/dense" "$tmp/one" || fail=1
for n in 2 4; do
  check "dp 4 x ep 2 over $n processes (TCP ring)" 0 "done: 8 steps" -- \
    timeout 120 "$troupe" "${job[@]}" --ep 2 --nodes "$n" --out "$tmp/tcp$n"
  same_losses "$tmp/one" "$tmp/tcp$n" || fail=1
  same_routing "$tmp/one" "$tmp/tcp$n" || fail=1
done
if [ "$has_gloo" = 1 ]; then
  check "dp 4 x ep 2 over 4 processes (Gloo)" 0 "done: 8 steps" -- \
    timeout 120 "$troupe" "${job[@]}" --ep 2 --nodes 4 --backend gloo --out "$tmp/gloo"
  same_losses "$tmp/one" "$tmp/gloo" || fail=1
fi
if [ "$has_mpi" = 1 ]; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  check "dp 4 x ep 2 over 4 processes (MPI)" 0 "done: 8 steps" -- timeout 120 mpirun --allow-run-as-root --oversubscribe \
    -np 4 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x TROUPE_SECRET=ep-test-0123456789 "$troupe" "${job[@]}" --backend mpi \
    --ep 2 --out "$tmp/mpi"
  same_losses "$tmp/one" "$tmp/mpi" || fail=1
fi
# A process killed mid-run: its expert groups' all-to-alls and reductions end, the lost rank is
# named, the job exits 1, and no process of it is left.
check "a process killed during an ep job is named" 1 "troupe train: job stopped during step [0-9]+: rank 2 lost" -- \
  timeout 120 "$troupe" "${base[@]}" --max-steps 400 --ep 2 --nodes 4 --kill-process 2:1 \
  --out "$tmp/killed"
sleep 1
if pgrep -f -- "--out $tmp/killed" > /dev/null; then echo "FAIL a process of the killed ep job is still running"; fail=1; fi
bad=(train --model gpt --max-steps 1 --no-progress --out "$tmp/refused")
check "ep without experts is refused" 2 "expert parallelism \(ep 2\) shares out a mixture of experts: the model has none" -- \
  "$troupe" "${bad[@]}" --dp 2 --ep 2
check "experts that do not split over ep are refused" 2 "model.experts 4 do not split evenly over ep 3" -- \
  "$troupe" "${bad[@]}" --experts 4 --dp 3 --ep 3
check "ep that does not divide dp x cp is refused" 2 "ep 2 must divide the 3 data-parallel replicas" -- \
  "$troupe" "${bad[@]}" --experts 4 --dp 3 --ep 2
check "ep with ZeRO-3 is refused" 2 "expert parallelism \(ep 2\) with ZeRO-3: .* use --zero 2 or less" -- \
  "$troupe" "${bad[@]}" --experts 4 --dp 2 --ep 2 --zero 3
exit $fail
