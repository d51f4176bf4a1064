#!/usr/bin/env bash
# Live straggler detection (issue 43): a dp 4 job with replica 1 delayed 20 ms before every step
# names rank 1 while it runs, within its 20 steps (once, after the 10 of warm-up and a window of
# 10), in one process and over four processes; the same job without the straggler names no one.
# Usage: slow_rank.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
job=(train --hidden 64 --max-steps 20 --dp 4 --eval-batches 1 --no-progress --peer-timeout 20)
check "in one process, rank 1 is named" 0 "slow rank: rank 1 hands in its gradients last in (9|10) of the last 10 steps" -- \
  "$troupe" "${job[@]}" --straggler 1:20 --out "$dir/a"
check "over four processes, rank 1 is named" 0 "slow rank: rank 1 hands in its gradients last in (9|10) of the last 10 steps" -- \
  "$troupe" "${job[@]}" --nodes 4 --straggler 1:20 --out "$dir/b"
"$troupe" "${job[@]}" --out "$dir/c" >"$dir/c.log" 2>&1 || { cat "$dir/c.log"; echo "FAIL the job without straggler"; fail=1; }
if grep -q "slow rank" "$dir/c.log"; then grep "slow rank" "$dir/c.log"; echo "FAIL a rank named without a straggler"; fail=1
else echo "ok   without a straggler no rank is named"; fi
n=$("$troupe" "${job[@]}" --straggler 1:20 --out "$dir/d" 2>&1 | grep -c "slow rank")
[ "$n" = 1 ] && echo "ok   named once, not every step" || { echo "FAIL named $n times"; fail=1; }
exit $fail
