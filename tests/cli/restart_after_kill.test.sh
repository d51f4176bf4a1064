#!/usr/bin/env bash
# SIGKILL of a worker process (its stages and optimizer shards with it) in a 4-process dp 2 x
# pp 2 job with --max-restarts 1: the job restarts from its latest checkpoint and finishes, and
# its final checkpoint (every shard's parameters and optimizer state) is byte for byte the
# uninterrupted run's, as is its last test loss. Killed: process $2 (1, 2 or 3).
# Usage: restart_after_kill.test.sh TROUPE RANK
set -u
troupe=$1 victim=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
# 30 ms on replica 0 before each step: 60 steps last long enough to be killed in the middle.
job=(train --nodes 4 --dp 2 --pp 2 --micro-batches 2 --hidden 64,64 --batch-size 64 --max-steps 60 --epochs 1
     --eval-batches 1 --no-progress --checkpoint-every 10 --peer-timeout 5 --straggler 0:30)
"$troupe" "${job[@]}" --checkpoint-dir "$dir/whole" --out "$dir/whole-run" >"$dir/whole.log" 2>&1 \
  || { cat "$dir/whole.log"; echo "FAIL: the uninterrupted run failed"; exit 1; }

"$troupe" "${job[@]}" --checkpoint-dir "$dir/killed" --out "$dir/killed-run" --max-restarts 1 >"$dir/killed.log" 2>&1 &
job_pid=$!
for _ in $(seq 600); do [ -e "$dir/killed/latest" ] && break; sleep 0.02; done
pids=$(grep -o "started ranks 1..3 on this machine (pids [0-9, ]*)" "$dir/killed.log" | head -1 | sed 's/.*pids //; s/)//; s/,//g')
pid=$(echo "$pids" | cut -d' ' -f"$victim")
[ -n "$pid" ] || { cat "$dir/killed.log"; echo "FAIL: no pid for process $victim"; exit 1; }
at=$(cat "$dir/killed/latest")
kill -KILL "$pid" || { echo "FAIL: process $victim (pid $pid) was not running"; exit 1; }
wait "$job_pid"; rc=$?
grep -E "restart 1 of 1|lost" "$dir/killed.log" | head -3
[ "$rc" -eq 0 ] || { tail -20 "$dir/killed.log"; echo "FAIL: the job with --max-restarts 1 exited $rc"; exit 1; }
grep -q "restart 1 of 1" "$dir/killed.log" || { tail -20 "$dir/killed.log"; echo "FAIL: no restart (killed at $at)"; exit 1; }
fail=0
for f in "$dir"/whole/step-00000060/rank-*.bin; do
  cmp -s "$f" "$dir/killed/step-00000060/$(basename "$f")" || { echo "FAIL: $(basename "$f") differs"; fail=1; }
done
a=$(grep -o '"test_loss": [0-9.]*' "$dir/whole-run/metrics.jsonl" | tail -1)
b=$(grep -o '"test_loss": [0-9.]*' "$dir/killed-run/metrics.jsonl" | tail -1)
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: last test loss $a uninterrupted, $b restarted"; fail=1; }
[ "$fail" -eq 0 ] && echo "ok: process $victim killed after checkpoint $at; restarted; final state byte-identical, $a"
exit "$fail"
