#!/usr/bin/env bash
# Kills rank 0 of a 4-process job mid-training, RUNS times, and reports how long each worker took
# to be gone after the kill, against the peer timeout. A worker must end because every actor
# stopped: a run fails if any process outlives peer timeout + 1 s, or exits 0, or prints the
# teardown-limit warning. Not part of CI (it takes a few minutes); run it and cite its summary.
#   scripts/stress_kill_rank0.sh [BUILD_DIR] [RUNS] [PEER_TIMEOUT_S]
set -u
build=${1:-build} runs=${2:-50} timeout=${3:-3}
troupe=$build/troupe
tmp=$(mktemp -d); trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
keep=${STRESS_KEEP_LOGS:-/tmp/troupe-stress-failures}  # the workers' logs of every failed run
mkdir -p "$keep"
limit=$(python3 -c "print($timeout + 1.0)")
worst=0 bad=0
for run in $(seq "$runs"); do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  job=(--world-size 4 --master-addr 127.0.0.1 --master-port "$port" --peer-timeout "$timeout" --max-steps 100000
       --eval-batches 1 --no-progress --hidden 64)
  export TROUPE_SECRET=stress-0123456789-$run
  "$troupe" train --rank 0 "${job[@]}" --out "$tmp/r$run" > "$tmp/rank0.log" 2>&1 &
  r0=$!
  pids=()
  for r in 1 2 3; do SPDLOG_LEVEL=debug "$troupe" worker --rank "$r" "${job[@]}" --out "$tmp/w$run" > "$tmp/w$r.log" 2>&1 & pids+=($!); done
  for _ in $(seq 300); do [ -s "$tmp/r$run/metrics.jsonl" ] && [ "$(wc -l < "$tmp/r$run/metrics.jsonl")" -ge 5 ] && break; sleep 0.05; done
  t0=$(date +%s.%N)
  kill -9 "$r0"
  status=ok
  for i in 0 1 2; do
    p=${pids[$i]}
    while kill -0 "$p" 2>/dev/null; do
      now=$(date +%s.%N)
      if python3 -c "import sys; sys.exit(0 if $now - $t0 > $limit + 5 else 1)"; then kill -9 "$p"; break; fi
      sleep 0.01
    done
    wait "$p"; rc=$?
    [ "$rc" -ne 0 ] || status="rank $((i + 1)) exited 0"
  done
  took=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
  { wait "$r0"; } 2>/dev/null
  if grep -q "did not shut down" "$tmp"/w*.log; then status="teardown limit fired"; fi
  if python3 -c "import sys; sys.exit(0 if $took > $limit else 1)"; then status="slow: $took s"; fi
  worst=$(python3 -c "print(max($worst, $took))")
  if [ "$status" != ok ]; then
    bad=$((bad + 1))
    mkdir -p "$keep/run$run" && cp "$tmp"/w*.log "$keep/run$run/"
    for f in "$tmp"/w*.log; do echo "--- $f"; tail -n 4 "$f"; done
  fi
  echo "run $run: every worker gone $took s after rank 0 was killed ($status)"
done
echo "summary: $runs runs, $bad failed, slowest $worst s, peer timeout $timeout s, limit $limit s"
[ "$bad" = 0 ]
