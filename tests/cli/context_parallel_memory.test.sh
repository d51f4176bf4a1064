#!/bin/bash
# A sequence longer than one rank can hold under --device-memory trains with context parallelism:
# a GPT of context 512 needs 65 MiB of activations on one rank, so at cp 1 its first forward is
# refused naming the shortfall (exit 1, nothing trained); at cp 2 each rank holds two quarters of
# each sequence, one from each end, and under half the activations (18 of 65 MiB), so the same
# cap fits, and its losses equal those of the uncapped cp 1 run.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

job=(train --model gpt --context 512 --batch-size 2 --lr 1e-3 --max-steps 8 --eval-batches 1 --no-progress)
check "cp 1 over the cap is refused at its first forward, naming the shortfall" 1 \
  "exhausted: [0-9.]+ MiB more of activations would make [0-9.]+ MiB, over the cap of 64.00 MiB \(--device-memory\)" -- \
  "$troupe" "${job[@]}" --device-memory 64MiB --out "$tmp/refused"
check "cp 2 under the same cap trains" 0 "mesh dp1\.pp1\.tp1\.cp2 .*" -- \
  "$troupe" "${job[@]}" --device-memory 64MiB --cp 2 --out "$tmp/cp2"
check "cp 1 without the cap trains" 0 "done: 8 steps" -- "$troupe" "${job[@]}" --out "$tmp/cp1"
same_losses "$tmp/cp1" "$tmp/cp2" 8 || { echo "FAIL cp 2 under the cap did not train to the one-rank losses"; fail=1; }
exit $fail
