#!/usr/bin/env bash
# --backend mpi: a job started by mpirun reduces its gradients through MPI (one communicator per
# data-parallel group) and gives the losses of the same mesh in one process, for dp 4 over 4
# processes, dp 2 x pp 2 over 4 and over 2, and dp 2 with ZeRO-3 over 2 (its parameter gathers on a
# communicator of their own); meshes MPI cannot carry are refused before anything
# runs (exit 2, naming why). As a user on a cluster types it, mpirun alone starts the job (process
# 0's address and the secret cross over MPI). A rank killed mid-training is named, and mpirun then
# ends the job with no process left. Skipped (77) where troupe was built without MPI or mpirun is
# missing.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
"$troupe" info | grep -q "collective back ends: .*mpi" || { echo "built without MPI: skipped"; exit 77; }
command -v mpirun > /dev/null || { echo "no mpirun: skipped"; exit 77; }
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
job=(--hidden 32,32 --batch-size 64 --max-steps 8 --eval-batches 1 --no-progress --peer-timeout 10)
run_mpi() {  # run_mpi NAME NP OUT flags...
  local name=$1 np=$2 out=$3; shift 3
  local port; port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  check "$name" 0 "done: 8 steps" -- timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" \
    -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x TROUPE_SECRET=mpi-test-0123456789 "$troupe" train --backend mpi \
    "${job[@]}" --out "$out" "$@"
}
"$troupe" train "${job[@]}" --dp 4 --out "$tmp/dp4" > /dev/null 2>&1 || { echo "FAIL in-process dp 4"; fail=1; }
"$troupe" train "${job[@]}" --dp 2 --pp 2 --micro-batches 2 --out "$tmp/mesh" > /dev/null 2>&1 || { echo "FAIL in-process mesh"; fail=1; }
run_mpi "dp 4 over 4 MPI processes" 4 "$tmp/mpi_dp4" --dp 4
same_losses "$tmp/dp4" "$tmp/mpi_dp4" || fail=1
run_mpi "dp 2 x pp 2 over 4 MPI processes" 4 "$tmp/mpi_mesh4" --dp 2 --pp 2 --micro-batches 2
same_losses "$tmp/mesh" "$tmp/mpi_mesh4" || fail=1
run_mpi "dp 2 x pp 2 over 2 MPI processes" 2 "$tmp/mpi_mesh2" --dp 2 --pp 2 --micro-batches 2
same_losses "$tmp/mesh" "$tmp/mpi_mesh2" || fail=1
"$troupe" train "${job[@]}" --dp 2 --zero 3 --out "$tmp/zero3" > /dev/null 2>&1 || { echo "FAIL in-process zero 3"; fail=1; }
run_mpi "dp 2 with zero 3 over 2 MPI processes" 2 "$tmp/mpi_zero3" --dp 2 --zero 3
same_losses "$tmp/zero3" "$tmp/mpi_zero3" || fail=1
# No MASTER_ADDR, no TROUPE_SECRET: process 0 tells the others over MPI.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
check "mpirun alone: the control plane over MPI" 0 "done: 8 steps" -- env -u MASTER_ADDR -u MASTER_PORT -u TROUPE_SECRET \
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "$troupe" train --backend mpi --dp 2 --pp 2 \
  --micro-batches 2 "${job[@]}" --master-port "$port" --out "$tmp/bare"
same_losses "$tmp/mesh" "$tmp/bare" || fail=1
# A rank killed mid-training (SIGKILL of process 2, a child of mpirun).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 90 mpirun --allow-run-as-root --oversubscribe -np 4 "$troupe" train --backend mpi --dp 4 --hidden 64 \
  --max-steps 100000 --eval-batches 1 --no-progress --peer-timeout 3 --master-port "$port" --out "$tmp/kill" \
  > "$tmp/kill.log" 2>&1 &
launcher=$!
for _ in $(seq 300); do [ -s "$tmp/kill/metrics.jsonl" ] && [ "$(wc -l < "$tmp/kill/metrics.jsonl")" -ge 5 ] && break; sleep 0.1; done
mp=$(pgrep -P "$launcher" -x mpirun)
victim=$(pgrep -P "$mp" -f "$troupe" | sort -n | sed -n 3p)
kill -9 "$victim"
wait "$launcher"
rc=$?
if [ "$rc" = 0 ] || [ "$rc" = 124 ] || ! grep -qE "rank 2 lost|process rank 2 .*exited on signal 9" "$tmp/kill.log"; then
  echo "FAIL a killed rank under MPI: rc=$rc"; tail -5 "$tmp/kill.log"; fail=1
else
  echo "ok   a killed rank under MPI is named ($(grep -oE "rank 2 lost[^(]*|process rank 2 [^(]*" "$tmp/kill.log" | head -1)) and mpirun ends the job (rc $rc)"
fi
pgrep -f "$tmp/kill" > /dev/null && { echo "FAIL a process of the killed job is left"; pkill -9 -f "$tmp/kill"; fail=1; }
check "one process is refused" 2 "backend mpi reduces between processes" -- "$troupe" train --backend mpi "${job[@]}"
check "two ranks of one group in a process are refused" 2 "holds 2 ranks of a data-parallel group of rank 0" -- \
  env TROUPE_SECRET=x-0123456789abcdef "$troupe" train --backend mpi --world-size 2 --rank 0 --master-addr 127.0.0.1 --dp 4 "${job[@]}"
exit $fail
