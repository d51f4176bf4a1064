#!/bin/bash
# --elastic over processes (issue 42): a `--nodes 3 --dp 3 --elastic` job whose process 2 is
# SIGKILLed mid-run finishes every step with exit 0, without a restart or a checkpoint (it has no
# checkpoint folder): its coordinator drops replica 2 at the step boundary, the step in flight is
# done again by the other two from the state in memory, the global batch kept. Its losses are
# bitwise those of the same job told the change as an event file (--membership-events). A loss
# that leaves fewer than --min-replicas (the first, or a second one), and a kill during the
# regroup itself, end the job naming why, with every process gone.
# Under ZeRO 2 the lost shards' optimizer state had no other copy: it starts again from zero, the
# same in both runs.
# Over the TCP ring, or Gloo (skipped where troupe was built without it).
# Usage: elastic.test.sh TROUPE mlp|gpt ZERO [tcp|gloo]
set -u
troupe=$1 model=$2 zero=$3 backend=${4:-tcp}
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ "$backend" = gloo ] && ! "$troupe" info | grep -q "collective back ends: .*gloo"; then echo "skip: no Gloo"; exit 77; fi
if [ "$model" = mlp ]; then
  need_fashion_mnist
  args=(--hidden 64,64 --batch-size 96)
else
  args=(--model gpt --batch-size 24 --lr 1e-3)
fi
# 20 ms on replica 0 before each step: 80 steps last long enough to be killed in the middle.
job=(train "${args[@]}" --zero "$zero" --backend "$backend" --nodes 3 --dp 3 --elastic --max-steps 80 --epochs 1 --eval-batches 1 --no-progress
     --peer-timeout 5 --straggler 0:20 --seed 7)
loss_lines() { grep '"loss"' "$1/metrics.jsonl" | sed 's/, "samples_per_s".*//'; }

timeout 300 "$troupe" "${job[@]}" --kill-process 2:1.0 --out "$tmp/killed" >"$tmp/killed.log" 2>&1; rc=$?
if [ $rc -ne 0 ]; then tail -20 "$tmp/killed.log"; echo "FAIL the killed job exited $rc"; exit 1; fi
grep -q "SIGKILL sent to process 2" "$tmp/killed.log" || { tail -20 "$tmp/killed.log"; echo "FAIL process 2 was not killed"; exit 1; }
event=$(grep -o '"step": [0-9]*, "membership": "lose replica 2", "dp": 2' "$tmp/killed/metrics.jsonl")
step=$(grep -o '^"step": [0-9]*' <<<"$event" | grep -o '[0-9]*$')
if [ -z "$step" ]; then tail -20 "$tmp/killed.log"; echo "FAIL no membership change in metrics.jsonl"; exit 1; fi
echo "ok   process 2 killed; replica 2 dropped after step $step, the job finished with exit 0"
n=$(loss_lines "$tmp/killed" | wc -l)
[ "$n" -eq 80 ] && echo "ok   every one of the 80 steps logged its loss once" || { echo "FAIL $n loss lines, not 80"; fail=1; }
if grep -qiE "restart|resumed from" "$tmp/killed.log"; then echo "FAIL it restarted or read a checkpoint"; fail=1
else echo "ok   no restart, no checkpoint read"; fi

printf '# the change the kill made\nafter step %s: lose replica 2\n' "$step" >"$tmp/events"
timeout 300 "$troupe" "${job[@]}" --membership-events "$tmp/events" --out "$tmp/told" >"$tmp/told.log" 2>&1; rc=$?
if [ $rc -ne 0 ]; then tail -20 "$tmp/told.log"; echo "FAIL the event-file job exited $rc"; exit 1; fi
if diff <(loss_lines "$tmp/killed") <(loss_lines "$tmp/told") >/dev/null; then
  echo "ok   losses bitwise those of the job told 'after step $step: lose replica 2'"
else
  diff <(loss_lines "$tmp/killed") <(loss_lines "$tmp/told") | head -6; echo "FAIL losses differ from the event-file run"; fail=1
fi

if [ "$model" = mlp ] && [ "$zero" = 0 ] && [ "$backend" = tcp ]; then
  # Below --min-replicas: the job ends, naming why, and leaves no process.
  timeout 300 "$troupe" "${job[@]}" --kill-process 2:1.0 --min-replicas 3 --out "$tmp/below" >"$tmp/below.log" 2>&1; rc=$?
  if [ $rc -ne 0 ] && grep -q "the elastic job cannot go on: 2 replicas would be left, fewer than --min-replicas 3" "$tmp/below.log"; then
    echo "ok   below --min-replicas: exit $rc, named"
  else
    tail -8 "$tmp/below.log"; echo "FAIL below --min-replicas: rc=$rc"; fail=1
  fi
  # A second failure that leaves fewer than --min-replicas: the first loss is survived, the second
  # ends the job naming it.
  timeout 300 "$troupe" "${job[@]}" --kill-process 2:1.0 --kill-process 1:2.0 --min-replicas 2 --out "$tmp/second" \
    >"$tmp/second.log" 2>&1; rc=$?
  if [ $rc -ne 0 ] && grep -q "membership change after step" "$tmp/second.log" &&
     grep -q "the elastic job cannot go on: 1 replica would be left, fewer than --min-replicas 2" "$tmp/second.log"; then
    echo "ok   a second loss below --min-replicas: the first survived, then exit $rc, named"
  else
    tail -8 "$tmp/second.log"; echo "FAIL a second loss below --min-replicas: rc=$rc"; fail=1
  fi
  # A process killed during the regroup itself: the next membership cannot form; named.
  timeout 300 "$troupe" "${job[@]}" --kill-process 2:1.0 --kill-in-regroup 1 --out "$tmp/during" >"$tmp/during.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q "process 1 kills itself as it regroups" "$tmp/during.log" &&
     grep -qE "process 1 \(pid [0-9]+\) was killed by signal 9 .*before it joined" "$tmp/during.log"; then
    echo "ok   a kill during the regroup: exit $rc, named"
  else
    tail -8 "$tmp/during.log"; echo "FAIL a kill during the regroup: rc=$rc"; fail=1
  fi
fi
sleep 0.5
if pgrep -f -- "--out $tmp/" >/dev/null; then echo "FAIL processes left: $(pgrep -af -- "--out $tmp/")"; fail=1
else echo "ok   no process of the jobs is left"; fi
exit $fail
