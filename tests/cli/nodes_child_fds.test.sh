#!/usr/bin/env bash
# A --nodes worker holds nothing of process 0's but the standard streams: no listening socket of
# process 0's (its control gate, a ring's or Gloo's listener) and no file it had open
# (/proc/self/cmdline while it read its arguments). Checked on a running dp 2 job with ss and
# /proc/PID/fd.
set -uo pipefail
troupe=$1
command -v ss >/dev/null || { echo "ss (iproute2) is missing: skipped"; exit 77; }
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
shared=$(python3 - "$zero" "$child" <<'PY'
import os, sys
def sockets(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out
listening = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        f = line.split()
        if f[3] == "0A":
            listening.add(f[9])
zero = sockets(sys.argv[1]) & listening
if not zero:
    print("process 0 holds no listening socket: nothing was checked")
    sys.exit(1)
both = zero & sockets(sys.argv[2])
print(" ".join(sorted(both)))
PY
) || { echo "FAIL $shared"; exit 1; }
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
