#!/usr/bin/env bash
# ZeRO-3 under --device-memory (issue 37): with the default 25 MiB buckets a small model is one
# unit, gathered whole, and the job does not fit a cap it fits with smaller units; the refusal
# names the largest --bucket-mb that fits, and that value, given, trains under the same cap. A cap
# no bucket size fits names none.
# Usage: zero3_bucket_hint.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
job=(train --hidden 1024,1024 --max-steps 2 --dp 2 --zero 3 --eval-batches 1 --no-progress --out "$dir/run")
"$troupe" "${job[@]}" --device-memory 30MiB >"$dir/refused.log" 2>&1
rc=$?
mb=$(grep -oE "with --bucket-mb [0-9.]+ \(buckets and units of at most that\) it fits" "$dir/refused.log" | grep -oE "[0-9.]+" | head -1)
if [ "$rc" != 2 ] || [ -z "$mb" ]; then cat "$dir/refused.log"; echo "FAIL the 30 MiB cap: exit $rc (want 2) naming a --bucket-mb"; fail=1
else echo "ok   refused under 30 MiB with 25 MiB buckets, naming --bucket-mb $mb"; fi
check "the named --bucket-mb $mb trains under the same cap" 0 "done: 2 steps" -- \
  "$troupe" "${job[@]}" --device-memory 30MiB --bucket-mb "${mb:-1}"
"$troupe" "${job[@]}" --device-memory 20MiB >"$dir/none.log" 2>&1
if [ $? != 2 ] || grep -q "bucket-mb" "$dir/none.log" || ! grep -q "does not fit --device-memory 20.00 MiB" "$dir/none.log"; then
  cat "$dir/none.log"; echo "FAIL a cap no bucket size fits must be refused without a --bucket-mb"; fail=1
else echo "ok   a cap no bucket size fits is refused naming none"; fi
exit $fail
