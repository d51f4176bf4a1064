#!/usr/bin/env bash
# A checkpoint that no longer fits its disk stops the job (exit 1) naming the checkpoint, the
# file and the system's reason, and the checkpoint committed before it is intact: it exports,
# and a job resumes from it. The disk is an 800 KiB tmpfs in a private mount namespace (root and
# unshare, as CI has); a checkpoint of this MLP takes about 315 KiB (its 312 KiB shard file and a
# page or two of manifest), so two fit and the third fills the disk. One checkpoint is written at a
# time (the next waits for the previous commit: before that, overlapping writes under load once
# filled the disk before the first commit). What the disk held after the job is logged so that a
# failing run says what filled it.
# Usage: checkpoint_disk_full.test.sh TROUPE
set -u
troupe=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
unshare -m sh -c 'mount -t tmpfs -o size=4k tmpfs "$0" && umount "$0"' "$dir" 2>/dev/null \
  || { echo "skip: cannot mount a tmpfs in a private namespace"; exit 77; }
mkdir "$dir/disk"
unshare -m sh -c '
  troupe=$1 dir=$2
  mount -t tmpfs -o size=800k tmpfs "$dir/disk" || exit 3
  job="train --max-steps 20 --hidden 32,32 --batch-size 64 --eval-batches 1 --no-progress"
  timeout -s KILL 120 "$troupe" $job --checkpoint-dir "$dir/disk/ckpt" --checkpoint-every 5 --out "$dir/run" >"$dir/log" 2>&1
  echo "rc=$?" >>"$dir/log"
  { df -k "$dir/disk"; ls -laR "$dir/disk"; } >"$dir/disk_after_job" 2>&1
  "$troupe" export "$dir/disk/ckpt" "$dir/model.safetensors" >>"$dir/log" 2>&1 || echo "export failed" >>"$dir/log"
  timeout -s KILL 120 "$troupe" $job --resume "$dir/disk/ckpt" --out "$dir/resumed" >>"$dir/log" 2>&1 \
    || echo "resume failed" >>"$dir/log"
' sh "$troupe" "$dir"
fail() { echo "FAIL: $*"; tail -15 "$dir/log"; echo "the disk after the job:"; cat "$dir/disk_after_job"; exit 1; }
grep -q "^rc=1$" "$dir/log" || fail "the job did not exit 1 on the full disk"
why=$(grep -o "checkpoint after step [0-9]* not [a-z]*: [^ ]*" "$dir/log" | head -1)
[ -n "$why" ] || fail "the failure does not say which checkpoint"
echo "$why" | grep -q "$dir/disk/ckpt/step-" || echo "$why" | grep -q "$dir/disk/ckpt/latest" \
  || fail "the failure does not name a file of the checkpoint: $why"
grep -q "No space left on device" "$dir/log" || fail "the failure does not give the system's reason"
grep -q "export failed\|resume failed" "$dir/log" && fail "the checkpoint before the full disk is not usable"
grep -q "exported .*ckpt/step-" "$dir/log" || fail "the export did not read an earlier checkpoint"
grep -q '"step": 19' "$dir/resumed/metrics.jsonl" || fail "the resumed job did not reach step 19"
echo "ok: $why; the checkpoint before it exported and resumed"
# One checkpoint in progress at a time: with --keep 1 and a checkpoint after every step, a disk
# that holds two (the kept one and the one being written, 700 KiB) is enough for 12 steps; writes
# that overlapped would need a third.
mkdir "$dir/disk2"
unshare -m sh -c '
  troupe=$1 dir=$2
  mount -t tmpfs -o size=700k tmpfs "$dir/disk2" || exit 3
  timeout -s KILL 120 "$troupe" train --max-steps 12 --hidden 32,32 --batch-size 64 --eval-batches 1 --no-progress \
    --checkpoint-dir "$dir/disk2/ckpt" --checkpoint-every 1 --keep 1 --out "$dir/run2" >"$dir/log2" 2>&1
  echo "rc=$?" >>"$dir/log2"
' sh "$troupe" "$dir"
grep -q "^rc=0$" "$dir/log2" || { echo "FAIL: checkpoints after every step with --keep 1 did not fit two on the disk:"; tail -8 "$dir/log2"; exit 1; }
n=$(grep -c "checkpoint after step [0-9]*: " "$dir/log2")
[ "$n" = 12 ] || { echo "FAIL: $n checkpoints committed, not 12"; tail -8 "$dir/log2"; exit 1; }
echo "ok: 12 checkpoints, one after every step, on a disk that holds two (waited for a commit $(grep -c "waits for the one before it" "$dir/log2") times)"
