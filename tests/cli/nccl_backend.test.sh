#!/usr/bin/env bash
# --backend nccl is asked for, and refused with the reason where it cannot be: on ranks without a
# GPU, with ZeRO-3 or offloading (their shards and groups live on the host), in one process, and
# in a build without NCCL. (Its groups across processes on the devices are proved by
# tests/actors/process_job.test.cpp with Gloo standing for NCCL; on GPUs by bench/gpu/run.sh.)
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
job=(--model gpt --corpus "$(dirname "$0")/../../README.md" --batch-size 8 --max-steps 2 --eval-batches 1 --no-progress)
if ! "$troupe" info | grep -q "collective back ends: .*nccl"; then
  check "a build without NCCL: refused" 2 "backend nccl: this troupe was built without it" -- \
    "$troupe" train --backend nccl --nodes 2 --dp 2 "${job[@]}"
  exit "$fail"
fi
check "ranks on the CPU: refused" 2 "backend nccl reduces on GPUs: give every rank one" -- \
  "$troupe" train --backend nccl --nodes 2 --dp 2 "${job[@]}"
check "ZeRO-3: refused" 2 "backend nccl: ZeRO-3 keeps the shard on the host" -- \
  "$troupe" train --backend nccl --nodes 2 --dp 2 --zero 3 --device cuda:0,cuda:1 "${job[@]}"
check "one process: refused" 2 "backend nccl reduces between processes" -- \
  "$troupe" train --backend nccl --dp 2 --device cuda:0,cuda:1 "${job[@]}"
exit "$fail"
