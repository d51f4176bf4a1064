#!/usr/bin/env bash
# A symbolic link planted where troupe writes a file (another user of a shared folder, say) is
# replaced by the file, never followed: trace.json and timeline.svg in --out, latest.tmp and the
# step's files in the checkpoint folder, the --svg of `troupe schedule` (storage/output_file.hpp).
# Each link points at a file outside those folders that must keep its content.
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/out" "$tmp/ckpt" "$tmp/victims"
for v in trace timeline latest schedule; do echo "precious $v" >"$tmp/victims/$v"; done
ln -s "$tmp/victims/trace" "$tmp/out/trace.json"
ln -s "$tmp/victims/timeline" "$tmp/out/timeline.svg"
ln -s "$tmp/victims/latest" "$tmp/ckpt/latest.tmp"
ln -s "$tmp/victims/schedule" "$tmp/out/schedule.svg"

check "a job with planted links in --out and the checkpoint folder" 0 "" -- \
  timeout 120 "$troupe" train --hidden 8 --max-steps 4 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 2 --out "$tmp/out"
check "troupe schedule --svg over a planted link" 0 "" -- \
  timeout 60 "$troupe" schedule --stages 2 --micro-batches 4 --svg "$tmp/out/schedule.svg"
for v in trace timeline latest schedule; do
  if [ "$(cat "$tmp/victims/$v")" != "precious $v" ]; then
    echo "FAIL the link's target $v was overwritten"; fail=1
  else
    echo "ok   the link's target $v kept its content"
  fi
done
for f in out/trace.json out/timeline.svg out/schedule.svg ckpt/latest; do
  if [ -L "$tmp/$f" ] || [ ! -s "$tmp/$f" ]; then echo "FAIL $f is not a file troupe wrote"; fail=1; else echo "ok   $f is a file of its own"; fi
done
# A shard file of a checkpoint replaced by a link (to a copy of itself, so only the link is wrong)
# is refused with the manifest, before the job says it resumed from there (issue 57, item 12).
shard=$(find "$tmp"/ckpt/step-00000004 -type f ! -name 'manifest.capnp' | head -1)
cp "$shard" "$tmp/victims/shard"
ln -sf "$tmp/victims/shard" "$shard"
out=$(timeout 60 "$troupe" train --hidden 8 --max-steps 6 --checkpoint-dir "$tmp/ckpt" --resume latest --out "$tmp/out2" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "$shard: not a regular file (a symbolic link)" <<<"$out" && ! grep -q "resumed from" <<<"$out"; then
  echo "ok   a linked shard file is refused before \"resumed from\" (rc $rc)"
else
  echo "FAIL a linked shard file: rc=$rc:"; echo "$out" | tail -4; fail=1
fi
exit $fail
