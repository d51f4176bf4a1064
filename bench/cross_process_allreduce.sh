#!/usr/bin/env bash
# Cross-process all-reduce on loopback, side by side in one run: troupe's TCP ring, Gloo's ring
# (TCP transport) and Open MPI's MPI_Allreduce over TCP and over shared memory (vader), with 2 and
# 4 processes at 1, 16 and 64 MiB; then one message through CAF's middleman against a plain
# socket (why bulk bytes have their own data plane). Prints the lines bench/README.md records.
#   bench/cross_process_allreduce.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bench
mpirun_flags=(--allow-run-as-root --oversubscribe)  # root in CI containers; 4 ranks on 2 cores
echo "backend  ranks   size      time    bus bandwidth"
for world in 2 4; do
  "$bin/allreduce_cross_process" troupe "$world"
  "$bin/allreduce_cross_process" gloo "$world" || echo "gloo: not built (libgloo-dev)"
  if [ -x "$bin/allreduce_mpi" ] && command -v mpirun >/dev/null; then
    mpirun "${mpirun_flags[@]}" -np "$world" --mca btl tcp,self --mca btl_tcp_if_include lo "$bin/allreduce_mpi" mpi-tcp
    mpirun "${mpirun_flags[@]}" -np "$world" --mca btl vader,self "$bin/allreduce_mpi" mpi-shm
  else
    echo "open mpi: not built (openmpi-bin libopenmpi-dev)"
  fi
done
echo
echo "one message, process to process"
"$bin/transport_cross_process"
