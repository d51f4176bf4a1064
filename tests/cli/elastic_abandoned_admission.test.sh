#!/bin/bash
# An admission that never completes does not stall an elastic job (issue 57, item 3). A
# `--nodes 3 --dp 3 --elastic --peer-timeout 5` job takes in a newcomer that dies as soon as it
# is told it is admitted (--kill-in-regroup on the newcomer), and another is told by an event file
# to admit a replica that no process asks to be. In both, the new membership waits the peer
# timeout for the newcomer, names the abandoned admission, and goes on with its three processes:
# every step trains, exit 0 with its done: line. (Before, each idled out the 120 s join timeout
# and then ended with exit 1; the jobs here are given 90 s.)
# Usage: elastic_abandoned_admission.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TROUPE_SECRET=elastic-abandoned-admission-test TROUPE_JOB_ID=elastic-abandoned-admission-test  # a newcomer presents the job's id too
port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
flags=(--hidden 64,64 --batch-size 96 --max-steps 300 --epochs 1 --eval-batches 1 --no-progress --peer-timeout 5
       --straggler 0:20 --seed 7 --elastic --master-addr 127.0.0.1)
# ended NAME RC: the job in $tmp/NAME went on after the abandoned admission of process 3.
ended() {
  local name=$1 rc=$2
  if [ "$rc" -ne 0 ]; then tail -n 12 "$tmp/$name.log"; echo "FAIL $name: the job exited $rc (124: still running after 90 s)"; fail=1; return; fi
  grep -q "the admission of process 3 is abandoned" "$tmp/$name.log" && echo "ok   $name: exit 0, the abandoned admission of process 3 named" ||
    { tail -n 12 "$tmp/$name.log"; echo "FAIL $name: the abandoned admission is not named"; fail=1; }
  local n; n=$(grep -c '"loss"' "$tmp/$name/metrics.jsonl")
  [ "$n" -eq 300 ] && echo "ok   $name: every one of the 300 steps logged its loss once" || { echo "FAIL $name: $n loss lines, not 300"; fail=1; }
  grep -q "done: 300 steps" "$tmp/$name.log" && echo "ok   $name: the done: line is there" || { echo "FAIL $name: no done: line"; fail=1; }
  grep -q '"membership": "lose replica 3", "dp": 3' "$tmp/$name/metrics.jsonl" &&
    echo "ok   $name: metrics.jsonl has the newcomer's replica dropped, dp 3 again" ||
    { echo "FAIL $name: no 'lose replica 3' back to dp 3 in metrics.jsonl"; fail=1; }
}

# 1. A newcomer that asks to join during the run, and dies once told it is admitted.
p=$(port)
timeout 90 "$troupe" train --nodes 3 --dp 3 "${flags[@]}" --master-port "$p" --out "$tmp/died" >"$tmp/died.log" 2>&1 &
job=$!
for _ in $(seq 1500); do grep -q "training starts" "$tmp/died.log" && break; sleep 0.02; done
RANK=3 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 90 "$troupe" worker "${flags[@]}" --master-port "$p" \
  --dp 4 --kill-in-regroup 3 --out "$tmp/new" >"$tmp/new.log" 2>&1 &
wait $!; new_rc=$?
wait $job; rc=$?
grep -q "rank 3: admitted into the running job" "$tmp/new.log" && [ $new_rc -eq 137 ] &&
  echo "ok   died: the newcomer was admitted and then killed itself (exit $new_rc)" ||
  { tail -n 5 "$tmp/new.log"; echo "FAIL died: the newcomer exited $new_rc, not killed after its admission"; fail=1; }
ended died $rc

# 2. An event admits a replica, and no process asks to be it.
printf 'after step 20: admit a replica\n' >"$tmp/events"
p=$(port)
timeout 90 "$troupe" train --nodes 3 --dp 3 "${flags[@]}" --master-port "$p" --membership-events "$tmp/events" \
  --out "$tmp/nobody" >"$tmp/nobody.log" 2>&1
ended nobody $?
sleep 0.5
if pgrep -f -- "--out $tmp/" >/dev/null; then echo "FAIL processes left: $(pgrep -af -- "--out $tmp/")"; fail=1
else echo "ok   no process of the jobs is left"; fi
exit $fail
