#!/usr/bin/env bash
# Parameter servers under a paused worker (issue 13, must-show 4): a 2-process ASP job whose
# worker process is SIGSTOPped is stopped once it is silent for the peer timeout (3 s), exit 1,
# naming the silent rank and how long it was silent (at most the timeout and the hub's 1 s
# check); SIGKILL of the worker names it as lost. The command itself exits about 10 s later, as
# the CLI waits that long for a worker process to end; the time is printed, not asserted. Twenty
# epochs: under ASP the batches are handed out on demand, so process 0's replica goes on alone
# while the worker is paused, and one epoch (about 3 s here) could end before the pause is noticed.
# Usage: paused_worker_ps.test.sh TROUPE
set -u
troupe=$1
dir=$(mktemp -d); trap 'pkill -CONT -P $$ 2>/dev/null; rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
fail=0
for how in STOP KILL; do
  "$troupe" train --nodes 2 --dp 2 --consistency asp --hidden 32 --batch-size 64 --max-steps 100000 --epochs 20 \
    --eval-batches 1 --no-progress --peer-timeout 3 --out "$dir/$how" >"$dir/$how.log" 2>&1 &
  job=$!
  for _ in $(seq 500); do grep -q "started ranks 1..1" "$dir/$how.log" 2>/dev/null && [ -s "$dir/$how/metrics.jsonl" ] && break; sleep 0.02; done
  pid=$(grep -o "started ranks 1..1 on this machine (pids [0-9]*)" "$dir/$how.log" | sed 's/.*pids //; s/)//')
  [ -n "$pid" ] || { tail "$dir/$how.log"; echo "FAIL $how: no worker pid"; fail=1; continue; }
  sleep 0.5
  start=$(date +%s%N)
  kill -"$how" "$pid"
  wait "$job"; rc=$?
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
  want="rank 1 lost"; [ "$how" = STOP ] && want="rank 1 stopped answering"
  if [ "$rc" -ne 1 ]; then echo "FAIL $how: exit $rc, want 1"; tail "$dir/$how.log"; fail=1
  elif ! grep -q "$want" "$dir/$how.log"; then echo "FAIL $how: the log does not say \"$want\""; tail "$dir/$how.log"; fail=1
  elif [ "$how" = STOP ] && ! grep -qE "silent for ([0-3]\.[0-9]|4\.0) s, peer timeout 3\.0 s" "$dir/$how.log"; then
    echo "FAIL STOP: the pause was not noticed within the peer timeout and a second:"; grep "silent for" "$dir/$how.log"; fail=1
  else echo "ok   $how: \"$want\" $(grep -o "silent for [0-9.]* s" "$dir/$how.log" | head -1), the command exited after $took ms"; fi
done
exit "$fail"
