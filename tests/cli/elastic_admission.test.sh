#!/bin/bash
# Admission into a running elastic job (issue 42, must-show 2): a `--nodes 2 --dp 2 --elastic`
# job, and a `troupe worker` started by hand during the run as process 2 (the job one replica
# larger: --dp 3, WORLD_SIZE 3). It is admitted within two steps of asking, receives the state in
# memory from process 0 (no checkpoint), the job's remaining steps run at dp 3, and the losses are
# bitwise those of the same job told "admit a replica" at that step as an event file (its
# newcomer started at once and held until then).
# Usage: elastic_admission.test.sh TROUPE ZERO
set -u
troupe=$1 zero=$2
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TROUPE_SECRET=elastic-admission-test TROUPE_JOB_ID=elastic-admission-test  # a newcomer presents the job's id too
port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
flags=(--hidden 64,64 --batch-size 96 --zero "$zero" --max-steps 300 --epochs 1 --eval-batches 1 --no-progress
       --peer-timeout 5 --straggler 0:10 --seed 7 --elastic --master-addr 127.0.0.1)
loss_lines() { grep '"loss"' "$1/metrics.jsonl" | sed 's/, "samples_per_s".*//'; }
newcomer() {  # PORT OUT [EXTRA...]: process 2 of the job one replica larger
  local p=$1 out=$2; shift 2
  RANK=2 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 300 "$troupe" worker "${flags[@]}" --master-port "$p" \
    --dp 3 "$@" --out "$out" >"$out.log" 2>&1
}

p=$(port)
timeout 300 "$troupe" train --nodes 2 --dp 2 "${flags[@]}" --master-port "$p" --out "$tmp/joined" >"$tmp/joined.log" 2>&1 &
job=$!
# Started once the job trains (its 300 steps last over 3 s), as a worker brought up mid-run would be.
for _ in $(seq 1500); do grep -q "training starts" "$tmp/joined.log" && break; sleep 0.02; done
sleep 0.5
newcomer "$p" "$tmp/new"; new_rc=$?
wait $job; rc=$?
if [ $rc -ne 0 ] || [ $new_rc -ne 0 ]; then tail -15 "$tmp/joined.log" "$tmp/new.log"; echo "FAIL job rc=$rc, newcomer rc=$new_rc"; exit 1; fi
asked=$(grep -o "a process asks to join with [0-9]* steps done" "$tmp/joined.log" | grep -o "[0-9]*")
step=$(grep -o '"step": [0-9]*, "membership": "admit a replica", "dp": 3' "$tmp/joined/metrics.jsonl" | grep -o '^"step": [0-9]*' | grep -o '[0-9]*$')
if [ -z "$asked" ] || [ -z "$step" ]; then tail -15 "$tmp/joined.log"; echo "FAIL no admission logged"; exit 1; fi
if [ $((step - asked)) -le 2 ]; then echo "ok   asked with $asked steps done, admitted after step $step (within two steps); both exit 0"
else echo "FAIL asked with $asked steps done, admitted only after step $step"; fail=1; fi
grep -q "rank 2: admitted into the running job after step $step" "$tmp/new.log" && echo "ok   the newcomer says it was admitted" ||
  { echo "FAIL the newcomer's log lacks its admission"; fail=1; }
n=$(loss_lines "$tmp/joined" | wc -l)
[ "$n" -eq 300 ] && echo "ok   every one of the 300 steps logged its loss once" || { echo "FAIL $n loss lines"; fail=1; }
if grep -qiE "restart|resumed from" "$tmp/joined.log" "$tmp/new.log"; then echo "FAIL a restart or a checkpoint read"; fail=1
else echo "ok   no restart, no checkpoint read"; fi

printf 'after step %s: admit a replica\n' "$step" >"$tmp/events"
p=$(port)
timeout 300 "$troupe" train --nodes 2 --dp 2 "${flags[@]}" --master-port "$p" --membership-events "$tmp/events" \
  --out "$tmp/told" >"$tmp/told.log" 2>&1 &
job=$!
sleep 0.3
newcomer "$p" "$tmp/told-new" --membership-events "$tmp/events"; new_rc=$?
wait $job; rc=$?
if [ $rc -ne 0 ] || [ $new_rc -ne 0 ]; then tail -15 "$tmp/told.log" "$tmp/told-new.log"; echo "FAIL event-file job rc=$rc, newcomer rc=$new_rc"; exit 1; fi
if diff <(loss_lines "$tmp/joined") <(loss_lines "$tmp/told") >/dev/null; then
  echo "ok   losses bitwise those of the job told 'after step $step: admit a replica'"
else
  diff <(loss_lines "$tmp/joined") <(loss_lines "$tmp/told") | head -6; echo "FAIL losses differ from the event-file run"; fail=1
fi
exit $fail
