#!/usr/bin/env bash
# A run killed mid-epoch (SIGKILL, SIGTERM, SIGINT) leaves metrics.jsonl with whole JSON lines
# only, steps 0..n-1 in order, and every step the log had already reported among them.
# Usage: metrics_after_kill.test.sh TROUPE
set -u
troupe=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
fail=0
for sig in KILL TERM INT; do
  out="$dir/$sig"
  # Through python3 so that SIGINT has its default action: a background job of a script
  # would otherwise start with it ignored. stderr is a file, so the log has a line per quarter
  # epoch (937 steps of 64 samples: "step 234/937", ...), written after the step's metrics line.
  python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$troupe" train --hidden 32 --batch-size 64 --epochs 5 --out "$out" \
    >"$out.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    grep -q "step 468/937" "$out.log" 2>/dev/null && break
    sleep 0.05
  done
  # steps done by the last log line: "epoch E/5 step D/937" is (E-1)*937 + D
  logged=$(grep -o "epoch [0-9]*/5 step [0-9]*/937" "$out.log" | tail -1 | tr '/' ' ' | awk '{print ($2-1)*937+$5}')
  kill -s "$sig" "$pid" || { echo "FAIL $sig: the job was not running"; fail=1; continue; }
  wait "$pid"; rc=$?
  [ "$rc" -gt 128 ] || { echo "FAIL $sig: exit code $rc, want death by the signal"; fail=1; continue; }
  if python3 -c 'import json, sys
data = open(sys.argv[1], "rb").read()
if not data.endswith(b"\n"):
    sys.exit("metrics.jsonl ends mid-line: %r" % data[-60:])
steps = [r["step"] for r in map(json.loads, data.split(b"\n")[:-1]) if "loss" in r]
if steps != list(range(len(steps))):
    sys.exit("step lines are not 0..n-1")
if len(steps) < int(sys.argv[2]):
    sys.exit("%d step lines, but the log had reported step %s" % (len(steps), sys.argv[2]))
print("%d whole step lines, log at step %s" % (len(steps), sys.argv[2]))' "$out/metrics.jsonl" "${logged:-999999}"
  then
    echo "ok   $sig"
  else
    echo "FAIL $sig"; tail -3 "$out.log"; fail=1
  fi
done
exit $fail
