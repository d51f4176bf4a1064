#!/usr/bin/env bash
# troupe stress compares ready-first with fixed-order dispatch (issue 40): examples/stress/dispatch.toml
# runs sync DP as written and with `ready:4` on a 4-stage GPT, without faults and under jitter on
# every rank. Every run finishes, every run's losses are those of sync DP as written (ready dispatch
# keeps every bit), the ready runs are measured against that baseline (vs_sync), and the jitter
# shows in the log. No assertion on the throughput itself: that is bench/ready_dispatch.py's.
# Usage: stress_dispatch.test.sh TROUPE EXAMPLES_DIR
set -u
troupe=$1 examples=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$troupe" stress "$examples/stress/dispatch.toml" --out "$dir/report" >"$dir/log" 2>&1 || { tail -20 "$dir/log"; echo "FAIL troupe stress"; exit 1; }
grep -q "run 4/4: sync ready+4 under jitter-10ms (jitter rank 0: up to 10 ms per compute action" "$dir/log" \
  || { grep "run " "$dir/log"; echo "FAIL no jittered ready run in the log"; exit 1; }
python3 - "$dir/report/report.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
fail = []
if [(r["mode"], r["scenario"]) for r in runs] != [("sync", "none"), ("sync ready+4", "none"), ("sync", "jitter-10ms"), ("sync ready+4", "jitter-10ms")]:
    fail.append("runs: %s" % [(r["mode"], r["scenario"]) for r in runs])
if any(r["status"] != "ok" for r in runs): fail.append("a run failed")
if len({(r["final_loss"], r["test_loss"]) for r in runs}) != 1: fail.append("losses differ: %s" % [(r["final_loss"], r["test_loss"]) for r in runs])
if not all(r["vs_sync"] == 1 for r in runs if r["mode"] == "sync"): fail.append("sync is not its own baseline")
if not all(r["vs_sync"] > 0 for r in runs): fail.append("a run without a ratio to sync")
print("\n".join("FAIL " + f for f in fail) or "ok   4 runs, one loss, ready measured against sync: " +
      ", ".join("%s/%s %.2fx" % (r["mode"], r["scenario"], r["vs_sync"]) for r in runs))
sys.exit(1 if fail else 0)
PY
