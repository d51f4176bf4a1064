#!/usr/bin/env bash
# Under TLS, connections that prove the job's secret at the gate and then stay silent (they never
# start the TLS handshake) do not hold up a real worker (issue 57, item 5): rank 0 of a 2-process
# TLS job gets 20 of them, then the real worker joins within 30 s and the job ends with exit 0.
# (Before, the gate ran the handshakes one at a time on its own thread, each waiting out its
# 5 s deadline: the worker waited 100 s; it is given 60 s here.) Skipped (77) without openssl.
# Usage: tls_silent_handshakes.test.sh TROUPE
set -u
troupe=$1
command -v openssl > /dev/null || { echo "openssl not installed: skipped"; exit 77; }
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/ca.key" -out "$tmp/ca.pem" -days 1 -subj "/CN=ca" 2> /dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$tmp/node.key" -out "$tmp/node.csr" -subj "/CN=127.0.0.1" 2> /dev/null
openssl x509 -req -in "$tmp/node.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial -out "$tmp/node.pem" \
  -days 1 2> /dev/null
tls=(--tls-cert "$tmp/node.pem" --tls-key "$tmp/node.key" --tls-ca "$tmp/ca.pem")
export TROUPE_SECRET=tls-silent-handshakes-test
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(--world-size 2 --master-addr 127.0.0.1 --master-port "$port" --dp 2 --hidden 32 --max-steps 3 --eval-batches 1
     --no-progress --peer-timeout 20 "${tls[@]}")
timeout 90 "$troupe" train --rank 0 "${job[@]}" --out "$tmp/r0" > "$tmp/r0.log" 2>&1 &
rank0=$!
pids+=($rank0)
for _ in $(seq 300); do grep -q "control gate on" "$tmp/r0.log" && break; sleep 0.1; done
# 20 connections that answer the gate's challenge with the secret (tcp_auth.hpp), read its proof,
# and then say nothing more for 60 s.
python3 - "$port" "$TROUPE_SECRET" "$tmp/silent.ok" <<'PY' &
import hashlib, hmac, os, socket, struct, sys, time
port, secret, ok = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3]
def read(s, n):
    b = b""
    while len(b) < n:
        got = s.recv(n - len(b))
        if not got: raise OSError("closed")
        b += got
    return b
held = []
for _ in range(20):
    s = socket.create_connection(("127.0.0.1", port))
    challenge, mine, claim = read(s, 32), os.urandom(32), struct.pack("<I", 1)
    mac = hmac.new(secret, b"troupe-auth-v1" + b"C" + challenge + mine + claim, hashlib.sha256).digest()
    s.sendall(mine + claim + mac)
    proof = read(s, 32)
    if proof == hmac.new(secret, b"troupe-auth-v1" + b"A" + mine + challenge + claim, hashlib.sha256).digest():
        held.append(s)
open(ok, "w").write("%d\n" % len(held))
time.sleep(60)
PY
pids+=($!)
for _ in $(seq 300); do [ -s "$tmp/silent.ok" ] && break; sleep 0.1; done
[ "$(cat "$tmp/silent.ok" 2>/dev/null)" = 20 ] || { echo "FAIL the 20 silent connections did not all pass the gate's secret"; exit 1; }
t0=$(date +%s.%N)
timeout 60 "$troupe" worker --rank 1 "${job[@]}" --out "$tmp/r1" > "$tmp/r1.log" 2>&1
worker_rc=$?
t1=$(date +%s.%N)
wait "$rank0"
rank0_rc=$?
took=$(python3 -c "print('%.1f' % ($t1 - $t0))")
if [ "$worker_rc" -ne 0 ] || [ "$rank0_rc" -ne 0 ]; then
  tail -n 4 "$tmp/r0.log" "$tmp/r1.log"
  echo "FAIL behind 20 silent TLS connections: worker exit $worker_rc (124: still waiting after 60 s), rank 0 exit $rank0_rc"
  exit 1
fi
if python3 -c "import sys; sys.exit(0 if $took < 30 else 1)"; then
  echo "ok   behind 20 connections silent after the secret, the TLS worker joined and the job ended in $took s (exit 0)"
else
  echo "FAIL the TLS worker took $took s behind 20 silent connections"; exit 1
fi
