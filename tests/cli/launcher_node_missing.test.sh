#!/bin/bash
# A node of a launcher-started job that never starts (issue 57, item 7): process 0 under
# torchrun's variables (RANK 0, WORLD_SIZE 2) with no process 1, and a Kubeflow node 0
# (PET_NNODES 2, PET_NPROC_PER_NODE 2: it starts its rank 1 itself) with no node 1, both with
# --peer-timeout 5. Each ends within the peer timeout of the last process that joined, with exit 1
# naming every process that did not join, and leaves no process. (Before, process 0 waited the
# 120 s join timeout, saying nothing; the jobs here are given 60 s.)
# Usage: launcher_node_missing.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
job=(train --hidden 32 --max-steps 5 --eval-batches 1 --no-progress --peer-timeout 5)
launcher_env=(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID
              -u PET_NNODES -u PET_NODE_RANK -u TORCHELASTIC_RUN_ID TROUPE_SECRET=launcher-node-missing-test)
# ended NAME RC MISSING: the job ended with exit 1 within the time given, naming MISSING.
ended() {
  local name=$1 rc=$2 missing=$3
  if [ "$rc" -eq 124 ]; then tail -n 5 "$tmp/$name.log"; echo "FAIL $name: process 0 still waited after 60 s"; fail=1; return; fi
  if [ "$rc" -eq 1 ] && grep -q "$missing did not join" "$tmp/$name.log"; then
    echo "ok   $name: exit 1 within the time given, naming $missing"
  else
    tail -n 5 "$tmp/$name.log"; echo "FAIL $name: rc=$rc, '$missing did not join' not logged"; fail=1
  fi
}

p=$(port)
"${launcher_env[@]}" RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$p" timeout 60 "$troupe" "${job[@]}" \
  --out "$tmp/torchrun" >"$tmp/torchrun.log" 2>&1
ended torchrun $? "rank 1"

p=$(port)
"${launcher_env[@]}" PET_NNODES=2 PET_NPROC_PER_NODE=2 PET_NODE_RANK=0 PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT="$p" \
  timeout 60 "$troupe" "${job[@]}" --out "$tmp/kubeflow" >"$tmp/kubeflow.log" 2>&1
ended kubeflow $? "rank 2, rank 3"
sleep 0.5
if pgrep -f -- "--out $tmp/" >/dev/null; then echo "FAIL processes left: $(pgrep -af -- "--out $tmp/")"; fail=1
else echo "ok   no process of the jobs is left"; fi
exit $fail
