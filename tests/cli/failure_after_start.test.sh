#!/usr/bin/env bash
# Failures raised once the actor system is up (issue 35): each ends the process within a bounded
# time, non-zero, saying why (run_job's one failure path), where each used to hang in
# ~actor_system or crash.
# - A busy control port: process 0 of a job under a launcher, and --nodes with --master-port.
# - An offload folder no file can be created in (/proc: even root cannot), found when the
#   offload store opens its file.
# - A MASTER_ADDR that is not this machine's: named (it ended in "std::future_error: Broken promise").
# - A worker with another configuration: refused naming the difference, and the job ends at once.
# - Process 0 paused past the peer timeout (SIGSTOP, as Slurm suspends a job): the worker gives up
#   on it and exits 1; process 0, continued, names the worker that left and exits 1 (it crashed
#   reading the worker hub's normal exit reason).
# Usage: failure_after_start.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
dir=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
small=(--hidden 32 --eval-batches 1 --no-progress)

# A port held by another listener for the test's length.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -c "import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $port)); s.listen(); time.sleep(120)" &
holder=$!
sleep 0.5
check "a busy MASTER_PORT ends process 0 within 30 s naming the port" 1 "$port.*(in use|cannot bind|bind)" -- \
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TROUPE_SECRET=s-0123456789abcdef timeout 30 \
  "$troupe" train --dp 2 "${small[@]}" --max-steps 2 --out "$dir/busy1"
check "a busy --master-port under --nodes ends the job within 30 s naming the port" 1 "$port.*(in use|cannot bind|bind)" -- \
  timeout 30 "$troupe" train --nodes 2 --dp 2 --master-port "$port" "${small[@]}" --max-steps 2 --out "$dir/busy2"
kill "$holder" 2>/dev/null; holder=

check "an offload folder where no file can be created ends the job within 30 s naming the folder" 1 "/proc/troupe-" -- \
  timeout 30 "$troupe" train --dp 2 --zero 3 --offload optimizer --offload-to nvme --offload-dir /proc "${small[@]}" \
  --max-steps 2 --out "$dir/offload"

# A MASTER_ADDR that is no address of this machine (TEST-NET-1): named, not "Broken promise".
check "a MASTER_ADDR of another machine ends process 0 naming the address" 1 "cannot listen on 192\.0\.2\.1" -- \
  env RANK=0 WORLD_SIZE=2 MASTER_ADDR=192.0.2.1 MASTER_PORT=29500 TROUPE_SECRET=s-0123456789abcdef timeout 30 \
  "$troupe" train --dp 2 "${small[@]}" --max-steps 2 --out "$dir/addr"

# A worker with another configuration is refused naming only what differs, and process 0 ends
# the job at once (it waited for the join timeout before, having printed both whole texts).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TROUPE_SECRET=s-0123456789abcdef timeout 30 \
  "$troupe" train --dp 2 "${small[@]}" --batch-size 64 --max-steps 2 --out "$dir/c0" >"$dir/c0.log" 2>&1 &
p0=$!
for _ in $(seq 300); do grep -q "control gate on" "$dir/c0.log" && break; sleep 0.1; done
env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TROUPE_SECRET=s-0123456789abcdef timeout 30 \
  "$troupe" train --dp 2 "${small[@]}" --batch-size 32 --max-steps 2 --out "$dir/c1" >"$dir/c1.log" 2>&1
rc1=$?
wait "$p0"; rc0=$?
want='runs another configuration: "batch 32 seed [0-9]+ steps 2" where rank 0 has "batch 64 seed [0-9]+ steps 2"$'
if [ "$rc0" -ne 1 ] || [ "$rc1" -ne 1 ]; then
  echo "FAIL another configuration: exits $rc0 and $rc1, want 1 and 1 (124: no deadline)"; tail -2 "$dir/c0.log"; fail=1
elif ! grep -qE "$want" "$dir/c0.log" || grep -q "runs another configuration.*mlp 784" "$dir/c0.log"; then
  echo "FAIL another configuration: not named by its difference alone:"; grep "another configuration" "$dir/c0.log" | head -2
  fail=1
else echo "ok   another configuration: $(grep -oE 'runs another configuration: .*' "$dir/c0.log" | head -1)"; fi

# Process 0 paused past the worker's peer timeout, then continued.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(train --dp 2 "${small[@]}" --epochs 20 --peer-timeout 2)
env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TROUPE_SECRET=s-0123456789abcdef \
  "$troupe" "${job[@]}" --out "$dir/r0" >"$dir/r0.log" 2>&1 &
p0=$!
env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TROUPE_SECRET=s-0123456789abcdef \
  "$troupe" "${job[@]}" --out "$dir/r1" >"$dir/r1.log" 2>&1 &
p1=$!
for _ in $(seq 600); do grep -q "training starts" "$dir/r0.log" && break; sleep 0.1; done
sleep 0.5
kill -STOP "$p0"
for _ in $(seq 300); do kill -0 "$p1" 2>/dev/null || break; sleep 0.1; done  # the worker gives up (a busy machine: up to 30 s)
kill -CONT "$p0"
wait "$p1"; rc1=$?
( sleep 30; kill -9 "$p0" 2>/dev/null ) &
killer=$!
wait "$p0"; rc0=$?
kill "$killer" 2>/dev/null
# Continued, process 0 sees either its own overdue tick or the worker's hub gone, whichever it
# handles first; both name the pause, neither blames a silent worker.
stall="process 0 did not run for [0-9.]+ s|rank 1 left: it stopped waiting for process 0"
if [ "$rc1" -ne 1 ] || ! grep -q "rank 0 stopped answering" "$dir/r1.log"; then
  echo "FAIL paused process 0: the worker exited $rc1 (want 1) without naming rank 0"; tail -3 "$dir/r1.log"; fail=1
elif [ "$rc0" -ne 1 ] || ! grep -qE "$stall" "$dir/r0.log"; then
  echo "FAIL paused process 0: process 0 exited $rc0 (want 1; 139 is a crash) without naming its stall"; tail -3 "$dir/r0.log"
  fail=1
else
  echo "ok   paused process 0: the worker named it, and process 0 its stall: $(grep -oE "$stall" "$dir/r0.log" | head -1)"
fi
exit "$fail"
