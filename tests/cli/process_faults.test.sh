#!/usr/bin/env bash
# Fault injection of whole processes under --nodes (issue 13): --pause-process and --kill-process,
# sent by the job's own launcher at a time into training.
# - A pause shorter than the peer timeout is survived: the job ends well with the unpaused job's
#   losses, and its training took at least the pause longer than zero (a data-parallel step cannot
#   end while a member is stopped), with SIGSTOP and SIGCONT logged before the end.
# - A pause for good is named once the process is silent for the peer timeout (and the hub's 1 s
#   check), exit 1; the stopped worker is let go on so that it exits, and no process is left.
# - A kill is named as a lost rank within a second, exit 1, no process left.
# - Bad faults are refused before anything runs (exit 2), naming the flag's text.
# Usage: process_faults.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
job=(train --nodes 2 --dp 2 --hidden 32 --batch-size 64 --epochs 2 --eval-batches 1 --no-progress --peer-timeout 4)
losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l])' "$1"; }
workers_of() { grep -o "started ranks 1..1 on this machine (pids [0-9]*)" "$1" | sed 's/.*pids //; s/)//'; }
left() {  # the worker of log $1 is still running
  local pid; pid=$(workers_of "$1")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

"$troupe" "${job[@]}" --out "$dir/plain" >"$dir/plain.log" 2>&1 || { tail "$dir/plain.log"; echo "FAIL: the plain job failed"; exit 1; }

# 1. A pause of 1 s at 0.5 s into training, under a 4 s peer timeout.
"$troupe" "${job[@]}" --pause-process 1:0.5:1 --out "$dir/pause" >"$dir/pause.log" 2>&1; rc=$?
if [ "$rc" -ne 0 ]; then echo "FAIL short pause: exit $rc"; tail "$dir/pause.log"; fail=1
elif ! grep -q "SIGSTOP sent to process 1" "$dir/pause.log" || ! grep -q "SIGCONT sent to process 1" "$dir/pause.log"; then
  echo "FAIL short pause: the log does not show SIGSTOP then SIGCONT"; grep -i fault "$dir/pause.log"; fail=1
elif [ "$(losses "$dir/pause/metrics.jsonl")" != "$(losses "$dir/plain/metrics.jsonl")" ]; then
  echo "FAIL short pause: the losses differ from the unpaused job's"; fail=1
else
  took=$(grep -o "done: .* [0-9.]* s training" "$dir/pause.log" | grep -o "[0-9.]* s training" | grep -o "^[0-9.]*")
  if python3 -c "import sys; sys.exit(0 if float('$took') >= 1.0 else 1)"; then
    echo "ok   a 1 s pause is survived with the unpaused losses (training took $took s)"
  else echo "FAIL short pause: training took $took s, less than the pause"; fail=1; fi
fi

# 2. A pause for good.
"$troupe" "${job[@]}" --pause-process 1:0.5 --out "$dir/stop" >"$dir/stop.log" 2>&1; rc=$?
if [ "$rc" -ne 1 ]; then echo "FAIL pause for good: exit $rc, want 1"; tail "$dir/stop.log"; fail=1
elif ! grep -qE "rank 1 stopped answering \(silent for ([0-4]\.[0-9]|5\.0) s, peer timeout 4\.0 s\)" "$dir/stop.log"; then
  echo "FAIL pause for good: not named within the peer timeout and a second:"; grep -i "error" "$dir/stop.log" | head -3; fail=1
elif left "$dir/stop.log"; then echo "FAIL pause for good: the stopped worker is still there"; fail=1
else echo "ok   a pause for good is named: $(grep -o "rank 1 stopped answering ([^)]*)" "$dir/stop.log" | head -1)"; fi

# 3. A kill.
"$troupe" "${job[@]}" --kill-process 1:0.5 --out "$dir/kill" >"$dir/kill.log" 2>&1; rc=$?
if [ "$rc" -ne 1 ]; then echo "FAIL kill: exit $rc, want 1"; tail "$dir/kill.log"; fail=1
elif ! grep -q "job stopped during step [0-9]*: rank 1 lost" "$dir/kill.log"; then
  echo "FAIL kill: the lost rank is not named"; grep -i "error" "$dir/kill.log" | head -3; fail=1
else echo "ok   a kill is named: $(grep -o "rank 1 lost: [^(]*" "$dir/kill.log" | head -1)"; fi

# 4. Refused before anything runs.
check "a fault in a one-process job is refused" 2 "this job runs in one process \(add --nodes N\)" -- \
  "$troupe" train --pause-process 1:1 --max-steps 1 --out "$dir/bad1"
check "a fault of a process the job does not have is refused" 2 "kill of process 2 but the job has processes 0..1" -- \
  "$troupe" train --nodes 2 --dp 2 --kill-process 2:1 --max-steps 1 --out "$dir/bad2"
check "process 0 (the launcher) cannot be paused" 2 "process 0 is the launcher" -- \
  "$troupe" train --nodes 2 --dp 2 --pause-process 0:1 --max-steps 1 --out "$dir/bad3"
check "a kill takes no duration" 2 "not 2 fields" -- \
  "$troupe" train --nodes 2 --dp 2 --kill-process 1:1:2 --max-steps 1 --out "$dir/bad4"
exit "$fail"
