#!/usr/bin/env bash
# --backend gloo: a job over several processes reduces its gradients through Gloo (one context per
# process-spanning group, its rendezvous through the group's authenticated kv store) and gives the
# losses of the same mesh in one process: dp 4 over 4 processes, dp 2 x pp 2 over 4 and over 2,
# dp 4 over 2 (two members of one group in each process, which MPI refuses), tp 2 over 2, and
# dp 2 with ZeRO-3 over 2 (its parameter gathers on a Gloo context of their own).
# A worker process killed mid-training is named, the job exits 1 within the peer timeout's reach,
# and no process of it is left. Skipped (77) where troupe was built without Gloo.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
"$troupe" info | grep -q "collective back ends: .*gloo" || { echo "built without Gloo: skipped"; exit 77; }
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
job=(--hidden 32,32 --batch-size 64 --max-steps 8 --eval-batches 1 --no-progress --peer-timeout 10)
run_gloo() {  # run_gloo NAME OUT flags...
  local name=$1 out=$2; shift 2
  check "$name" 0 "done: 8 steps" -- timeout 120 "$troupe" train --backend gloo "${job[@]}" --out "$out" "$@"
}
"$troupe" train "${job[@]}" --dp 4 --out "$tmp/dp4" > /dev/null 2>&1 || { echo "FAIL in-process dp 4"; fail=1; }
"$troupe" train "${job[@]}" --dp 2 --pp 2 --micro-batches 2 --out "$tmp/mesh" > /dev/null 2>&1 || { echo "FAIL in-process mesh"; fail=1; }
"$troupe" train "${job[@]}" --tp 2 --out "$tmp/tp2" > /dev/null 2>&1 || { echo "FAIL in-process tp 2"; fail=1; }
run_gloo "dp 4 over 4 processes" "$tmp/g_dp4" --nodes 4 --dp 4
same_losses "$tmp/dp4" "$tmp/g_dp4" || fail=1
run_gloo "dp 2 x pp 2 over 4 processes" "$tmp/g_mesh4" --nodes 4 --dp 2 --pp 2 --micro-batches 2
same_losses "$tmp/mesh" "$tmp/g_mesh4" || fail=1
run_gloo "dp 2 x pp 2 over 2 processes" "$tmp/g_mesh2" --nodes 2 --dp 2 --pp 2 --micro-batches 2
same_losses "$tmp/mesh" "$tmp/g_mesh2" || fail=1
run_gloo "dp 4 over 2 processes (two members of the group in each)" "$tmp/g_dp4_2" --nodes 2 --dp 4
same_losses "$tmp/dp4" "$tmp/g_dp4_2" || fail=1
run_gloo "tp 2 over 2 processes" "$tmp/g_tp2" --nodes 2 --tp 2
same_losses "$tmp/tp2" "$tmp/g_tp2" || fail=1
"$troupe" train "${job[@]}" --dp 2 --zero 3 --out "$tmp/zero3" > /dev/null 2>&1 || { echo "FAIL in-process zero 3"; fail=1; }
run_gloo "dp 2 with zero 3 over 2 processes (parameter gathers through Gloo too)" "$tmp/g_zero3" --nodes 2 --dp 2 --zero 3
same_losses "$tmp/zero3" "$tmp/g_zero3" || fail=1
check "one process: refused" 2 "backend gloo reduces between processes" -- "$troupe" train --backend gloo "${job[@]}" --dp 2 --out "$tmp/one"
# A worker killed mid-training (SIGKILL of process 2).
"$troupe" train --backend gloo --nodes 4 --dp 4 --hidden 64 --max-steps 100000 --eval-batches 1 --no-progress \
  --peer-timeout 3 --out "$tmp/kill" > "$tmp/kill.log" 2>&1 &
job_pid=$!
for _ in $(seq 500); do
  grep -q "started ranks 1..3" "$tmp/kill.log" 2>/dev/null && [ -s "$tmp/kill/metrics.jsonl" ] && [ "$(wc -l < "$tmp/kill/metrics.jsonl")" -ge 5 ] && break
  sleep 0.05
done
pids=$(grep -o "started ranks 1..3 on this machine (pids [0-9, ]*)" "$tmp/kill.log" | head -1 | sed 's/.*pids //; s/)//; s/,//g')
victim=$(echo "$pids" | awk '{print $2}')
if [ -z "$victim" ]; then
  echo "FAIL kill: no worker pids"; tail "$tmp/kill.log"; fail=1; kill -9 "$job_pid"
else
  start=$(date +%s%N)
  kill -9 "$victim"
  timeout 60 tail --pid="$job_pid" -f /dev/null
  wait "$job_pid"; rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  left=$(for p in $pids; do kill -0 "$p" 2>/dev/null && echo "$p"; done)
  if [ "$rc" -ne 1 ] || ! grep -q "rank 2 lost" "$tmp/kill.log"; then
    echo "FAIL kill: exit $rc (want 1), the log:"; grep -E "error|lost" "$tmp/kill.log" | head -5; fail=1
  elif [ -n "$left" ]; then
    echo "FAIL kill: processes left: $left"; fail=1
  else
    echo "ok   kill: \"$(grep -o "rank 2 lost[^(]*" "$tmp/kill.log" | head -1)\", exit 1 after $took ms, no process left"
  fi
fi
exit "$fail"
