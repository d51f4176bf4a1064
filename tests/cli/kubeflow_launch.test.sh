#!/usr/bin/env bash
# troupe as the command of a Kubeflow Trainer TrainJob: two "nodes" on this machine, each given
# only the variables Kubeflow injects into a pod (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
# PET_MASTER_ADDR, PET_MASTER_PORT) and the job's secret; each node's first process starts its
# second itself, as torchrun would. The four processes train data-parallel with the losses of
# --dp 4 in one process, and no process outlives the job.
# Usage: kubeflow_launch.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
dir=$(mktemp -d)
trap 'pkill -KILL -f "troupe.*$dir" 2>/dev/null; rm -rf "$dir"' EXIT
job=(train --hidden 32 --batch-size 64 --max-steps 8 --eval-batches 1 --no-progress --peer-timeout 20)
"$troupe" "${job[@]}" --dp 4 --out "$dir/one" >"$dir/one.log" 2>&1 || { cat "$dir/one.log"; echo "FAIL: --dp 4"; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pod() {  # pod NODE_RANK: one Kubeflow pod's environment and nothing else of the launchers'
  env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID \
    PET_NNODES=2 PET_NPROC_PER_NODE=2 PET_NODE_RANK="$1" PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT="$port" \
    TROUPE_SECRET=kubeflow-test-0123 timeout 120 "$troupe" "${job[@]}" --out "$dir/pod$1"
}
pod 1 >"$dir/pod1.log" 2>&1 &
node1=$!
pod 0 >"$dir/pod0.log" 2>&1
rc0=$?
wait "$node1"
rc1=$?
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || { tail -20 "$dir/pod0.log" "$dir/pod1.log"; echo "FAIL: pods exited $rc0 and $rc1"; exit 1; }
grep -q "started ranks 1..1 on this machine" "$dir/pod0.log" || { cat "$dir/pod0.log"; echo "FAIL: node 0 did not start rank 1"; exit 1; }
grep -q "started ranks 3..3 on this machine" "$dir/pod1.log" || { cat "$dir/pod1.log"; echo "FAIL: node 1 did not start rank 3"; exit 1; }
grep -q "process 3: done" "$dir/pod1.log" || { cat "$dir/pod1.log"; echo "FAIL: rank 3 did not finish"; exit 1; }
grep -q "4 data-parallel\|dp=4\|dp 4" "$dir/pod0.log" || echo "note: the log does not name the mesh as dp 4"
same_losses "$dir/one" "$dir/pod0" 8 || { echo "FAIL: the Kubeflow job's losses differ from --dp 4 in one process"; exit 1; }
pgrep -f "troupe.*$dir" >/dev/null && { echo "FAIL: a process outlived the job"; exit 1; }
echo "ok"
