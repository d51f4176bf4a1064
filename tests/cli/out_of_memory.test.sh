#!/usr/bin/env bash
# Running out of memory inside an actor (a stage's first forward needs 3.9 GB; the address space
# is capped at 3 GB with ulimit -v) stops the job with exit 1 and names the actor and the step,
# for one stage, a data-parallel rank and a pipeline stage.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
# One BLAS thread and two malloc arenas: the address space before the first step is the same on
# any machine (about 2 GB), well under the cap.
export OPENBLAS_NUM_THREADS=1 MALLOC_ARENA_MAX=2
capped() { bash -c 'ulimit -v 3000000 && exec timeout -s KILL 60 "$@"' _ "$@"; }
job=(train --hidden 32768 --batch-size 30000 --max-steps 2 --eval-batches 1 --no-progress)
check "one stage" 1 "troupe train: .*out of memory in the stage of rank 0 during step 0" -- \
  capped "$troupe" "${job[@]}" --out "$tmp/a"
# The other rank may still be inside its forward when the job fails: the teardown guard then ends
# the process, and its line names the failure instead of troupe train's.
check "data parallel" 1 "(troupe train: |the job failed \\().*out of memory in the stage of rank [01] during step 0" -- \
  capped "$troupe" "${job[@]}" --dp 2 --out "$tmp/b"
check "pipeline" 1 "troupe train: .*out of memory in the stage of rank 0 during step 0" -- \
  capped "$troupe" "${job[@]}" --pp 2 --micro-batches 1 --out "$tmp/c"
exit $fail
