#!/usr/bin/env bash
# Elastic ZeRO 2 (issue 57, item 6): a lost replica's optimizer state had no other copy, so it
# comes from the newest checkpoint of this job's in the folder. Newer checkpoints that cannot give
# it are passed over by name, and the job goes on with the same losses as the one whose folder
# held only its own: another model's checkpoint (its moments are not these parameters'), one whose
# shard files were cut short, and one whose manifest is a FIFO (which used to hang the regroup).
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf 'after step 6: lose replica 1\n' >"$tmp/events"
job=(train --hidden 16 --dp 2 --zero 2 --elastic --membership-events "$tmp/events" --max-steps 10 --checkpoint-every 4
     --eval-batches 1 --no-progress)
loss_lines() { grep '"loss"' "$1/metrics.jsonl" | sed 's/, "samples_per_s".*//'; }

timeout 120 "$troupe" "${job[@]}" --checkpoint-dir "$tmp/own" --out "$tmp/r-own" >"$tmp/own.log" 2>&1
if grep -q "taken from the checkpoint $tmp/own/step-00000004" "$tmp/own.log"; then echo "ok   the reference run takes the lost state from its step-00000004"
else echo "FAIL the reference run:"; tail -5 "$tmp/own.log"; exit 1; fi

# Another model's checkpoint, newer than the job's own (step-00000005).
timeout 120 "$troupe" train --hidden 8 --dp 2 --zero 2 --max-steps 2 --no-progress --checkpoint-dir "$tmp/other-model" \
  --out "$tmp/r-x" >/dev/null 2>&1
mkdir -p "$tmp/foreign"; cp -r "$tmp/other-model/step-00000002" "$tmp/foreign/step-00000005"
# This job's own checkpoint, copied newer, its shard files cut short (a disk that filled, a copy
# that stopped).
mkdir -p "$tmp/damaged"; cp -r "$tmp/own/step-00000004" "$tmp/damaged/step-00000005"
find "$tmp/damaged/step-00000005" -type f ! -name 'manifest.capnp' -exec truncate -s -4096 {} \;
# A FIFO planted as a newer checkpoint's manifest.
mkdir -p "$tmp/fifo/step-00000005"; mkfifo "$tmp/fifo/step-00000005/manifest.capnp"

for case in foreign damaged fifo; do
  timeout 120 "$troupe" "${job[@]}" --checkpoint-dir "$tmp/$case" --out "$tmp/r-$case" >"$tmp/$case.log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "the checkpoint $tmp/$case/step-00000005 cannot give the lost shards' optimizer state" "$tmp/$case.log" &&
     grep -q "taken from the checkpoint $tmp/$case/step-00000004" "$tmp/$case.log" &&
     diff <(loss_lines "$tmp/r-own") <(loss_lines "$tmp/r-$case") >/dev/null; then
    echo "ok   $case: step-00000005 passed over by name ($(grep -o "step-00000005 cannot give.*" "$tmp/$case.log" | cut -c1-110)), the reference's losses"
  else
    echo "FAIL $case: rc=$rc (124: hung):"; grep -iE "checkpoint|error" "$tmp/$case.log" | tail -5; fail=1
  fi
done
exit $fail
