#!/usr/bin/env bash
# Runs a dp x pp job over processes RUNS times in a row (every rank in its own process by default:
# data-parallel rings and pipeline links both cross processes) and checks each run: exit 0, the
# same final loss every time (the job is deterministic), and no process of the run left once it
# returned. Not part of CI (a few minutes); run it and cite its summary.
#   scripts/stress_mesh_runs.sh [BUILD_DIR] [RUNS] [PROCESSES]
set -u
build=${1:-build} runs=${2:-50} processes=${3:-4}
troupe=$build/troupe
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
job=(--nodes "$processes" --dp 2 --pp 2 --micro-batches 2 --hidden 32,32 --batch-size 64 --max-steps 10
     --eval-batches 1 --no-progress --peer-timeout 5)
bad=0 first="" slowest=0
for run in $(seq "$runs"); do
  t0=$(date +%s.%N)
  timeout 120 "$troupe" train "${job[@]}" --out "$tmp/r$run" > "$tmp/log" 2>&1
  rc=$?
  took=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')")
  slowest=$(python3 -c "print(max($slowest, $took))")
  loss=$(grep -o 'final loss [0-9.]*' "$tmp/log" | head -1)
  left=$(pgrep -f "exe worker.*$tmp/r$run" | wc -l)
  status=ok
  [ "$rc" = 0 ] || status="exit $rc"
  [ -n "$first" ] || first=$loss
  [ "$loss" = "$first" ] || status="$status; $loss, first run had $first"
  [ "$left" = 0 ] || status="$status; $left process(es) left"
  if [ "$status" != ok ]; then
    bad=$((bad + 1))
    echo "run $run: $status"; tail -5 "$tmp/log"
    pkill -9 -f "exe worker.*$tmp/r$run" 2>/dev/null
  fi
  rm -rf "$tmp/r$run"
done
echo "$((runs - bad))/$runs runs of mesh dp2.pp2 over $processes processes ended well ($first every time), every process gone; slowest run $slowest s"
[ "$bad" = 0 ]
