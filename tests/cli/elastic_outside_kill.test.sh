#!/bin/bash
# A worker killed from outside an elastic job (issue 57, item 4): `--nodes 3 --dp 3 --elastic`,
# and process 2's pid SIGKILLed by this script mid-run (not by --kill-process). The job drops its
# replica, trains every step, and ends with exit 0 and its `done:` line; the log names the lost
# process by index and pid. (Before, it exited 1, "a worker process failed", with no done: line.)
# Usage: elastic_outside_kill.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TROUPE_SECRET=elastic-outside-kill-test
timeout 300 "$troupe" train --nodes 3 --dp 3 --elastic --hidden 64,64 --batch-size 96 --max-steps 150 --epochs 1 \
  --eval-batches 1 --no-progress --peer-timeout 10 --straggler 0:20 --seed 7 --out "$tmp/job" >"$tmp/job.log" 2>&1 &
job=$!
pid=
for _ in $(seq 3000); do
  pid=$(grep -o "started ranks 1..2 on this machine (pids [0-9]*, [0-9]*)" "$tmp/job.log" | grep -o "[0-9]*)" | tr -d ')')
  [ -n "$pid" ] && grep -q '"step": 10,' "$tmp/job/metrics.jsonl" 2>/dev/null && break
  sleep 0.02
done
if [ -z "$pid" ] || ! kill -KILL "$pid"; then tail -n 12 "$tmp/job.log"; echo "FAIL process 2 was not found running"; kill $job; exit 1; fi
wait $job; rc=$?
[ $rc -eq 0 ] && echo "ok   process 2 (pid $pid) SIGKILLed from outside; the elastic job exited 0" ||
  { tail -n 12 "$tmp/job.log"; echo "FAIL the job exited $rc after process 2 (pid $pid) was killed"; fail=1; }
grep -q '"membership": "lose replica 2"' "$tmp/job/metrics.jsonl" && echo "ok   replica 2 dropped" ||
  { echo "FAIL no 'lose replica 2' in metrics.jsonl"; fail=1; }
n=$(grep -c '"loss"' "$tmp/job/metrics.jsonl")
[ "$n" -eq 150 ] && echo "ok   every one of the 150 steps logged its loss once" || { echo "FAIL $n loss lines, not 150"; fail=1; }
grep -q "done: 150 steps" "$tmp/job.log" && echo "ok   the done: line is there" || { echo "FAIL no done: line"; fail=1; }
grep -q "process 2 (pid $pid) was killed by signal 9" "$tmp/job.log" && echo "ok   the lost process is named with its pid" ||
  { tail -n 5 "$tmp/job.log"; echo "FAIL the log does not name process 2 (pid $pid)"; fail=1; }
exit $fail
