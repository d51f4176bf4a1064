#!/usr/bin/env bash
# Every file troupe writes goes through storage/output_file.hpp: a character device or a FIFO at
# the path is written in place and stays what it was (as root, a rename over /dev/null once made
# the host's /dev/null a regular file); a folder there is refused by name before training; a file
# flag whose folder is missing is refused, and no folder is made for it. The device here is a
# private null device made with mknod, never the host's /dev/null.
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d)
trap 'kill %1 2>/dev/null; rm -rf "$tmp"' EXIT
small=(--hidden 8 --max-steps 2 --no-progress)

check "a job that saves a checkpoint" 0 "done: 2 steps" -- \
  timeout 120 "$troupe" train "${small[@]}" --checkpoint-dir "$tmp/ck" --checkpoint-every 2 --out "$tmp/r0"
check "--metrics-prom in a missing folder is refused, the folder not made" 2 \
  "--metrics-prom $tmp/missing/x.prom: its folder $tmp/missing does not exist" -- \
  timeout 60 "$troupe" train "${small[@]}" --metrics-prom "$tmp/missing/x.prom" --out "$tmp/r1"
if [ -e "$tmp/missing" ]; then echo "FAIL --metrics-prom made the folder $tmp/missing"; fail=1; else echo "ok   no folder made for --metrics-prom"; fi
mkdir "$tmp/folder"
out=$(timeout 60 "$troupe" train "${small[@]}" --metrics-prom "$tmp/folder" --out "$tmp/r2" 2>&1); rc=$?
if [ $rc -ne 2 ] || ! grep -q -- "--metrics-prom $tmp/folder: not a regular file (a folder)" <<<"$out" || grep -q "step 1" <<<"$out"; then
  echo "FAIL a folder as --metrics-prom: rc=$rc (want 2, refused before step 1):"; echo "$out" | tail -3; fail=1
else
  echo "ok   a folder as --metrics-prom is refused before training"
fi
check "troupe export into a folder is refused by name" 2 "export $tmp/folder: not a regular file \(a folder\)" -- \
  timeout 60 "$troupe" export "$tmp/ck" "$tmp/folder"
check "troupe export into a missing folder is refused, the folder not made" 2 "its folder $tmp/missing does not exist" -- \
  timeout 60 "$troupe" export "$tmp/ck" "$tmp/missing/model.safetensors"
if [ -e "$tmp/missing" ]; then echo "FAIL export made the folder $tmp/missing"; fail=1; fi

# A FIFO with a reader gets the export's bytes in place and stays a FIFO. The reader holds the FIFO
# open (read-write, so its open returns at once) before the export starts, and reads as many bytes
# as the export wrote into a plain file.
check "troupe export into a file" 0 "exported" -- timeout 60 "$troupe" export "$tmp/ck" "$tmp/model.safetensors"
mkfifo "$tmp/fifo"
timeout 60 python3 - "$tmp/fifo" "$tmp/from_fifo" "$(stat -c %s "$tmp/model.safetensors")" <<'PY' &
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
open(sys.argv[2] + ".ready", "w").close()
want, got = int(sys.argv[3]), b""
while len(got) < want:
    chunk = os.read(fd, want - len(got))
    if not chunk: break
    got += chunk
open(sys.argv[2], "wb").write(got)
PY
for _ in $(seq 100); do [ -e "$tmp/from_fifo.ready" ] && break; sleep 0.1; done
check "troupe export into a FIFO with a reader" 0 "exported" -- timeout 60 "$troupe" export "$tmp/ck" "$tmp/fifo"
wait %1 2>/dev/null
if [ -p "$tmp/fifo" ] && cmp -s "$tmp/from_fifo" "$tmp/model.safetensors"; then
  echo "ok   the FIFO is still a FIFO and carried the whole export"
else
  echo "FAIL the FIFO was replaced or carried other bytes"; fail=1
fi
check "troupe export into a FIFO no one reads is refused, not a hang" 1 "$tmp/fifo: cannot write \(a FIFO that no process reads\)" -- \
  timeout 20 "$troupe" export "$tmp/ck" "$tmp/fifo"

if mknod "$tmp/null" c 1 3 2>/dev/null; then
  check "--metrics-prom on a character device" 0 "done: 2 steps" -- \
    timeout 120 "$troupe" train "${small[@]}" --metrics-prom "$tmp/null" --out "$tmp/r3"
  check "troupe export onto a character device" 0 "exported" -- timeout 60 "$troupe" export "$tmp/ck" "$tmp/null"
  if [ -c "$tmp/null" ]; then echo "ok   the device is still a character device"; else echo "FAIL the device was replaced by a file"; fail=1; fi
else
  echo "skip the character device cases: mknod needs root"
fi
exit $fail
