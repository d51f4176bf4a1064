#!/bin/bash
# A job id beside the secret (issue 57, item 13): a `--nodes 2 --dp 2 --elastic` job (its id made
# by --nodes, printed with its gate), and a newcomer of another job (TROUPE_JOB_ID=another-job)
# given this job's address and the same secret. The job refuses it by name, goes on without a
# membership change and ends with exit 0; the newcomer exits 1 saying why. A newcomer that
# presents the job's own id is admitted. (Before, the other job's newcomer was admitted.)
# Usage: job_id.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export TROUPE_SECRET=job-id-test-0123456789
unset TROUPE_JOB_ID TORCHELASTIC_RUN_ID
port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
flags=(--hidden 64,64 --batch-size 96 --max-steps 200 --epochs 1 --eval-batches 1 --no-progress --peer-timeout 10
       --straggler 0:20 --seed 7 --elastic --master-addr 127.0.0.1)
newcomer() {  # PORT NAME [ENV...]: process 2 of the job one replica larger
  local p=$1 name=$2; shift 2
  env "$@" RANK=2 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT="$p" timeout 120 "$troupe" worker "${flags[@]}" \
    --master-port "$p" --dp 3 --out "$tmp/$name" >"$tmp/$name.log" 2>&1
}
start_job() {  # NAME: the job, once it trains
  p=$(port)
  timeout 120 "$troupe" train --nodes 2 --dp 2 "${flags[@]}" --master-port "$p" --out "$tmp/$1" >"$tmp/$1.log" 2>&1 &
  job=$!
  for _ in $(seq 3000); do grep -q "training starts" "$tmp/$1.log" && break; sleep 0.02; done
}

start_job other
newcomer "$p" stranger TROUPE_JOB_ID=another-job; new_rc=$?
wait $job; rc=$?
if grep -q "refused a join: a process claiming rank 2 belongs to job \"another-job\", not this job" "$tmp/other.log" &&
   [ $new_rc -ne 0 ] && grep -q "belongs to job .*another-job.*not this job" "$tmp/stranger.log"; then
  echo "ok   another job's newcomer is refused by name (it exited $new_rc, saying why)"
else
  tail -n 5 "$tmp/other.log" "$tmp/stranger.log"; echo "FAIL another job's newcomer was not refused by name (it exited $new_rc)"; fail=1
fi
if [ $rc -eq 0 ] && ! grep -q '"membership"' "$tmp/other/metrics.jsonl"; then
  echo "ok   the job went on without a membership change, exit 0"
else
  tail -n 5 "$tmp/other.log"; echo "FAIL the job exited $rc or changed its membership"; fail=1
fi

start_job own
id=$(grep -o 'job id "[^"]*"' "$tmp/own.log" | head -1 | cut -d'"' -f2)
newcomer "$p" member TROUPE_JOB_ID="$id"; new_rc=$?
wait $job; rc=$?
if [ -n "$id" ] && [ $rc -eq 0 ] && [ $new_rc -eq 0 ] && grep -q "rank 2: admitted into the running job" "$tmp/member.log"; then
  echo "ok   a newcomer presenting the job's id \"$id\" is admitted"
else
  tail -n 5 "$tmp/own.log" "$tmp/member.log"; echo "FAIL the job's own newcomer (id \"$id\"): job rc=$rc, newcomer rc=$new_rc"; fail=1
fi
exit $fail
