#!/usr/bin/env bash
# A job told to stop (SIGTERM, as Slurm's preemption sends; SIGINT, as Ctrl-C) says so in its
# log naming the signal, exits 128 + the signal's number, leaves no NVMe offload file behind, and
# passes the signal on to the worker processes --nodes started, which say so too and are gone.
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
long=(--hidden 32 --max-steps 1000000 --epochs 1000 --no-progress)
launch=(env)

# Starts the job in the background ($! its pid) and waits until it has trained a step.
started() {  # started OUT LOG ARGS...
  local out=$1 log=$2; shift 2
  "${launch[@]}" "$troupe" train "${long[@]}" --out "$out" "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q '"loss"' "$out/metrics.jsonl" 2>/dev/null && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "FAIL the job did not start training:"; tail -5 "$log"; fail=1; return 1
}

# Waits up to 30 s for pid to end; its exit code in $rc (124: still running).
ended() {
  rc=124
  for _ in $(seq 300); do
    if ! kill -0 "$1" 2>/dev/null; then wait "$1"; rc=$?; return; fi
    sleep 0.1
  done
}

mkdir "$tmp/nvme"
if started "$tmp/a" "$tmp/a.log" --dp 2 --zero 2 --offload optimizer --offload-to nvme --offload-dir "$tmp/nvme"; then
  files=$(ls "$tmp/nvme" | wc -l)
  kill -TERM $pid; ended $pid
  if [ $rc -eq 143 ] && grep -q "stopped by SIGTERM" "$tmp/a.log"; then echo "ok   SIGTERM: exit 143, the log says why"
  else echo "FAIL SIGTERM: rc=$rc (want 143):"; tail -5 "$tmp/a.log"; fail=1; fi
  if [ -z "$(ls -A "$tmp/nvme")" ]; then echo "ok   no offload file left in --offload-dir ($files while training)"
  else echo "FAIL offload files left behind: $(ls "$tmp/nvme")"; fail=1; fi
fi

# A shell starts a background job with SIGINT ignored, which troupe respects: env gives it back.
launch=(env --default-signal=INT)
if started "$tmp/b" "$tmp/b.log"; then
  kill -INT $pid; ended $pid
  if [ $rc -eq 130 ] && grep -q "stopped by SIGINT" "$tmp/b.log"; then echo "ok   SIGINT: exit 130, the log says why"
  else echo "FAIL SIGINT: rc=$rc (want 130):"; tail -5 "$tmp/b.log"; fail=1; fi
fi

launch=(env)
if started "$tmp/c" "$tmp/c.log" --nodes 2 --dp 2; then
  workers=$(pgrep -P $pid -d ' ')
  kill -TERM $pid; ended $pid
  said=$(grep -c "stopped by SIGTERM" "$tmp/c.log")
  if [ $rc -eq 143 ] && [ "$said" -eq 2 ]; then echo "ok   --nodes 2: process 0 and its worker each say they were stopped"
  else echo "FAIL --nodes 2: rc=$rc (want 143), $said lines saying SIGTERM (want 2):"; tail -8 "$tmp/c.log"; fail=1; fi
  sleep 0.5
  for w in $workers; do
    if kill -0 "$w" 2>/dev/null && ! grep -q zombie "/proc/$w/status" 2>/dev/null; then echo "FAIL worker $w still runs"; fail=1; fi
  done
fi
exit $fail
