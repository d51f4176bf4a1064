# Sourced by the tests/cli/*.test.sh scripts: `check NAME EXPECTED_RC PATTERN -- command...` runs
# the command and records a failure in $fail unless it exits EXPECTED_RC and prints PATTERN;
# `same_losses A B` compares two runs' losses.
fail=0
check() {
  local name=$1 want_rc=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want_rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $want_rc), output:"; echo "$out" | tail -5; fail=1
  else
    echo "ok   $name"
  fi
}
# `same_losses A B [STEPS]`: the runs in folders A and B logged STEPS (default 8) per-step losses,
# equal to float rounding (metrics.jsonl prints 6 digits); returns 1 otherwise.
same_losses() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "${3:-8}" <<'PY'
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l]
a, b, steps = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3])
ok = len(a) == len(b) == steps and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b))
print("losses", "equal" if ok else "differ", a, b)
sys.exit(0 if ok else 1)
PY
}
# `need_fashion_mnist`: exits 77 (skipped) where Debian's dataset-fashion-mnist is not installed.
need_fashion_mnist() {
  [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
}
# `listening_ports PID...`: the TCP ports the processes listen on, one per line; `listening_inodes
# PID`: the socket inodes of those listening sockets (a socket two processes share has one inode).
# From /proc, so they need neither ss's process column nor lsof.
listening_ports() { listening_sockets ports "$@"; }
listening_inodes() { listening_sockets inodes "$@"; }
listening_sockets() {
  python3 - "$@" <<'PY'
import os, sys
what, pids = sys.argv[1], sys.argv[2:]
inodes = set()
for pid in pids:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
found = set()
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).readlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:
            found.add(int(f[1].rsplit(":", 1)[1], 16) if what == "ports" else int(f[9]))
print("\n".join(str(x) for x in sorted(found)))
PY
}
