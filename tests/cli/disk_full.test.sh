#!/usr/bin/env bash
# A job whose output folder fills up fails: it exits 1 (before the 60 s kill), names
# metrics.jsonl and the system's reason, and leaves only whole JSON lines in metrics.jsonl.
# With "within SECONDS" it checks only that the failure came that soon: a wall-clock check,
# registered apart with the perf label so the value checks never depend on a quiet machine.
# Usage: disk_full.test.sh TROUPE single|dp|pp|nodes [within SECONDS]
# The full disk is a 64 KiB tmpfs, 56 KiB taken by a filler, mounted in a private mount namespace
# (needs root and unshare; CI has both). Where no tmpfs can be mounted, the same write error
# comes from RLIMIT_FSIZE (8 KiB per file, SIGXFSZ ignored), whose reason reads "File too large".
set -u
troupe=$1 mode=$2 within=
if [ $# -ge 4 ] && [ "$3" = within ]; then within=$4; fi
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL disk full ($mode): $*"; tail -15 "$dir/log"; exit 1; }
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
case $mode in
  single) extra=() ;;
  dp) extra=(--dp 2) ;;
  pp) extra=(--pp 2 --micro-batches 2) ;;
  nodes) extra=(--nodes 2 --peer-timeout 30) ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
job=("$troupe" train --max-steps 200 --hidden 32,32 --batch-size 64 --eval-batches 1 --no-progress "${extra[@]}")
mkdir "$dir/disk"
start=$(date +%s)
if unshare -m sh -c 'mount -t tmpfs -o size=4k tmpfs "$0" && umount "$0"' "$dir/disk" 2>/dev/null; then
  # A real ENOSPC: the filler leaves two pages, about 100 step lines.
  unshare -m sh -c 'mount -t tmpfs -o size=64k tmpfs "$0/disk" || exit 1
    dd if=/dev/zero of="$0/disk/filler" bs=4096 count=14 2>/dev/null
    timeout -s KILL 60 "$@" --out "$0/disk/run"; rc=$?
    cp "$0/disk/run/metrics.jsonl" "$0/metrics.jsonl"; exit $rc' "$dir" "${job[@]}" >"$dir/log" 2>&1
  rc=$?
  reason="No space left on device"
else
  timeout -s KILL 60 python3 -c 'import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
os.execv(sys.argv[1], sys.argv[1:])' "${job[@]}" --out "$dir/disk/run" >"$dir/log" 2>&1
  rc=$?
  cp "$dir/disk/run/metrics.jsonl" "$dir/metrics.jsonl"
  reason="File too large"
fi
elapsed=$(( $(date +%s) - start ))
[ "$rc" = 137 ] && fail "the job hung (killed after 60 s)"
[ "$rc" = 1 ] || fail "exit code $rc, want 1"
if [ -n "$within" ]; then
  [ "$elapsed" -le "$within" ] || fail "took $elapsed s to fail, want at most $within s"
  echo "ok: exit 1 after $elapsed s (at most $within s)"
  exit 0
fi
grep -q "metrics.jsonl.*$reason" "$dir/log" || fail "the log does not name metrics.jsonl and \"$reason\""
grep -q "done:" "$dir/log" && fail "the log claims the job is done"
[ -s "$dir/metrics.jsonl" ] || fail "no metrics were written before the disk filled"
python3 -c 'import json, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
if lines[-1]:
    sys.exit("metrics.jsonl ends mid-line: %r" % lines[-1][-60:])
steps = [r["step"] for r in map(json.loads, lines[:-1]) if "loss" in r]
if steps != list(range(len(steps))):
    sys.exit("step lines are not 0..n-1: %s" % steps)
print("%d whole step lines" % len(steps))' "$dir/metrics.jsonl" || fail "metrics.jsonl has a broken line"
echo "ok: exit 1 after $elapsed s: $(grep -m1 -o "[^ ]*metrics.jsonl.*" "$dir/log")"
