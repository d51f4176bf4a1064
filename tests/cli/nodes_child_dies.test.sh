#!/usr/bin/env bash
# A --nodes worker that dies before it joins is named by process 0 with its signal or exit status
# within a tick of the job hub (7.5 s at the default peer timeout), not reported as "did not join"
# after the 120 s join timeout. The worker is stopped as soon as it starts (it loads a corpus
# before joining) and then killed.
set -uo pipefail
troupe=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c "
import random
random.seed(1)
w = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta']
open('$tmp/corpus.txt', 'w').write(' '.join(random.choice(w) for _ in range(3000000)))"
start=$(date +%s)
timeout 60 "$troupe" train --nodes 2 --dp 2 --model gpt --corpus "$tmp/corpus.txt" --max-steps 2 --out "$tmp/out" \
  >"$tmp/log" 2>&1 &
p=$!
child=""  # timeout's child is process 0; process 0's child is the worker
for _ in $(seq 1000); do
  zero=$(pgrep -P "$p" | head -1)
  [ -n "$zero" ] && child=$(pgrep -P "$zero" | head -1)
  [ -n "$child" ] && break
  sleep 0.005
done
if [ -z "$child" ]; then echo "FAIL no worker process appeared"; cat "$tmp/log"; exit 1; fi
kill -STOP "$child"
sleep 0.2
kill -9 "$child"
wait "$p"; rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -ne 1 ]; then
  echo "FAIL process 0 exited $rc (want 1; 124: still waiting after 60 s)"; tail -3 "$tmp/log"; exit 1
fi
if ! grep -qE "process 1 \(pid $child\) was killed by signal 9 \(Killed\) before it joined" "$tmp/log"; then
  echo "FAIL the dead worker is not named with its signal:"; grep -E "error" "$tmp/log" | head -3; exit 1
fi
echo "ok   process 1 killed before it joined: named with its signal, process 0 exited 1 after $took s"
