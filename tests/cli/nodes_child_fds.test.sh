#!/usr/bin/env bash
# A --nodes worker holds nothing of process 0's but the standard streams: no listening socket of
# process 0's (its control gate, a ring's or Gloo's listener) and no file it had open
# (/proc/self/cmdline while it read its arguments). Checked on a running dp 2 job through /proc
# (listening sockets by inode, open files by /proc/PID/fd).
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d)
trap 'kill "$p" 2>/dev/null; rm -rf "$tmp"' EXIT
timeout 120 "$troupe" train --nodes 2 --dp 2 --hidden 8 --epochs 50 --out "$tmp/out" --no-progress >"$tmp/log" 2>&1 &
p=$!
zero="" child=""
for _ in $(seq 600); do
  zero=$(pgrep -P "$p" | head -1)
  [ -n "$zero" ] && child=$(pgrep -P "$zero" | head -1)
  [ -n "$child" ] && grep -q "training starts" "$tmp/log" && break
  sleep 0.1
done
if [ -z "$child" ] || ! grep -q "training starts" "$tmp/log"; then echo "FAIL the job did not start"; tail -5 "$tmp/log"; exit 1; fi
fail=0
# Listening sockets both processes hold, by socket inode (/proc: no need for ss's process column).
zero_listens=$(listening_inodes "$zero")
[ -n "$zero_listens" ] || { echo "FAIL process 0 holds no listening socket: nothing was checked"; exit 1; }
shared=$(comm -12 <(echo "$zero_listens" | sort) <(listening_inodes "$child" | sort) | tr '\n' ' ')
if [ -n "$shared" ]; then
  echo "FAIL the worker holds listening sockets of process 0:"; echo "$shared"; fail=1
else
  echo "ok   the worker holds no listening socket of process 0's"
fi
leaked=$(ls -l "/proc/$child/fd" 2>/dev/null | grep -E "cmdline|/proc/[0-9]+/" )
if [ -n "$leaked" ]; then
  echo "FAIL the worker holds process 0's files:"; echo "$leaked"; fail=1
else
  echo "ok   the worker holds no file of process 0's"
fi
exit $fail
