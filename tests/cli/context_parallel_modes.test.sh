#!/bin/bash
# Each --cp-mode (all-gather, ring, all-to-all) on every back end that spans processes: a GPT at
# cp 2 trained in one process, then with its context pair in two processes over the TCP ring,
# Gloo and MPI (under mpirun), gives the same losses; and the three modes give the same losses as
# one another (they differ only in the order of the attention's sums). The ring's steps and the
# all-to-all's blocks cross the process boundary in each, so a step that delivered the wrong
# member's keys, or one slot off, shows here. Gloo and MPI are skipped where troupe was built
# without them (or mpirun is missing); the TCP ring always runs.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
job=(--model gpt --context 32 --batch-size 8 --lr 1e-3 --max-steps 8 --eval-batches 1 --no-progress --peer-timeout 10 --cp 2)
has_gloo=0; "$troupe" info | grep -q "collective back ends: .*gloo" && has_gloo=1
has_mpi=0; "$troupe" info | grep -q "collective back ends: .*mpi" && command -v mpirun > /dev/null && has_mpi=1
for mode in all-gather ring all-to-all; do
  check "$mode in one process" 0 "done: 8 steps" -- timeout 120 "$troupe" train "${job[@]}" --cp-mode "$mode" --out "$tmp/$mode"
  check "$mode over 2 processes (TCP ring)" 0 "done: 8 steps" -- \
    timeout 120 "$troupe" train "${job[@]}" --cp-mode "$mode" --nodes 2 --out "$tmp/$mode-tcp"
  same_losses "$tmp/$mode" "$tmp/$mode-tcp" || fail=1
  if [ "$has_gloo" = 1 ]; then
    check "$mode over 2 processes (Gloo)" 0 "done: 8 steps" -- \
      timeout 120 "$troupe" train "${job[@]}" --cp-mode "$mode" --nodes 2 --backend gloo --out "$tmp/$mode-gloo"
    same_losses "$tmp/$mode" "$tmp/$mode-gloo" || fail=1
  fi
  if [ "$has_mpi" = 1 ]; then
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    check "$mode over 2 processes (MPI)" 0 "done: 8 steps" -- timeout 120 mpirun --allow-run-as-root --oversubscribe \
      -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x TROUPE_SECRET=cp-test-0123456789 "$troupe" train --backend mpi \
      "${job[@]}" --cp-mode "$mode" --out "$tmp/$mode-mpi"
    same_losses "$tmp/$mode" "$tmp/$mode-mpi" || fail=1
  fi
done
same_losses "$tmp/all-gather" "$tmp/ring" || { echo "FAIL ring differs from all-gather"; fail=1; }
same_losses "$tmp/all-gather" "$tmp/all-to-all" || { echo "FAIL all-to-all differs from all-gather"; fail=1; }
# The all-to-all splits heads over the group: 4 heads do not split over cp 3 (refused, naming both).
check "all-to-all with heads that do not divide by cp is refused" 2 "4 heads .* do not divide by cp 3" -- \
  "$troupe" train --model gpt --context 48 --heads 4 --cp 3 --cp-mode all-to-all --max-steps 1 --out "$tmp/refused"
exit $fail
