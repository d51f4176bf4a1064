#!/bin/bash
# The control gate listens for the whole of an elastic job (issue 57, item 1): another program
# that tries to take the gate's port all through a `--nodes 3 --dp 3 --elastic` job with two
# membership changes (a replica admitted, then one lost) never binds it, and the job finishes
# every step with exit 0. (Before, the gate was closed and bound again at each change, and a
# program that bound the port in the gap ended the job with "Address already in use".)
# Usage: elastic_gate_port.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d)
squatter=
trap '[ -n "$squatter" ] && kill "$squatter" 2>/dev/null; rm -rf "$tmp"' EXIT
export TROUPE_SECRET=elastic-gate-port-test TROUPE_JOB_ID=elastic-gate-port-test  # a newcomer presents the job's id too
p=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
flags=(--hidden 64,64 --batch-size 96 --max-steps 60 --epochs 1 --eval-batches 1 --no-progress --peer-timeout 10
       --straggler 0:20 --seed 7 --elastic --master-addr 127.0.0.1 --master-port "$p")
printf 'after step 15: admit a replica\nafter step 30: lose replica 1\n' >"$tmp/events"
timeout 300 "$troupe" train --nodes 3 --dp 3 "${flags[@]}" --membership-events "$tmp/events" --out "$tmp/job" \
  >"$tmp/job.log" 2>&1 &
job=$!
# Once the gate listens (the port is the job's from then on):
for _ in $(seq 1500); do grep -q "control gate on" "$tmp/job.log" && break; sleep 0.02; done
# Binds the port whenever it can (SO_REUSEADDR, as a program restarted on a port would), and
# holds it 5 s each time. A bind before the job's last step (the loss lines in metrics.jsonl say
# how far it is) is written to $tmp/bound; once every step is done the port may close.
python3 - "$p" "$tmp/bound" "$tmp/job/metrics.jsonl" 60 <<'PY' &
import socket, sys, time
port, out, metrics, steps = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
def done():
    try: return sum('"loss"' in l for l in open(metrics))
    except OSError: return 0
while True:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port)); s.listen(1)
        n = done()
        if n >= steps: sys.exit(0)
        open(out, "a").write("bound port %d with %d steps done\n" % (port, n))
        time.sleep(5)
    except OSError:
        pass
    s.close()
    time.sleep(0.002)
PY
squatter=$!
# The newcomer of the admission: process 3 of the job one replica larger, held until step 15.
RANK=3 WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 300 "$troupe" worker "${flags[@]}" --dp 4 \
  --membership-events "$tmp/events" --out "$tmp/new" >"$tmp/new.log" 2>&1 &
newcomer=$!
wait $job; rc=$?
wait $newcomer; new_rc=$?
kill "$squatter" 2>/dev/null; wait "$squatter" 2>/dev/null; squatter=
if [ -s "$tmp/bound" ]; then
  echo "FAIL another program bound the gate's port during the job: $(head -1 "$tmp/bound")"; fail=1
else
  echo "ok   the gate's port was never free for another program to bind"
fi
if [ $rc -ne 0 ] || [ $new_rc -ne 0 ]; then
  tail -n 12 "$tmp/job.log" "$tmp/new.log"; echo "FAIL job rc=$rc, newcomer rc=$new_rc"; exit 1
fi
n=$(grep -c '"membership"' "$tmp/job/metrics.jsonl")
[ "$n" -eq 2 ] && echo "ok   both membership changes made (an admission, a loss); exit 0" ||
  { tail -n 12 "$tmp/job.log"; echo "FAIL $n membership changes in metrics.jsonl, not 2"; fail=1; }
n=$(grep -c '"loss"' "$tmp/job/metrics.jsonl")
[ "$n" -eq 60 ] && echo "ok   every one of the 60 steps logged its loss once" || { echo "FAIL $n loss lines, not 60"; fail=1; }
exit $fail
