#!/usr/bin/env bash
# Mutual TLS on the control plane of a multi-process job: with certificates signed by the job's
# CA, `troupe train --nodes 2 --tls-*` trains over TLS, and so does a dp x pp mesh over 4 processes; a worker whose certificate another CA
# signed is refused (it exits non-zero) and never joins. A missing or invalid certificate, key or
# CA file is refused before the job starts, on rank 0 and on a worker, with the flag and the file
# named (exit code 2). Skipped (77) without the openssl tool.
set -u
troupe=$1
command -v openssl > /dev/null || { echo "openssl not installed: skipped"; exit 77; }
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

cert() {  # cert NAME CA_NAME: a key and a certificate for 127.0.0.1 signed by CA_NAME
  openssl req -newkey rsa:2048 -nodes -keyout "$tmp/$1.key" -out "$tmp/$1.csr" -subj "/CN=127.0.0.1" 2> /dev/null
  openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/$2.pem" -CAkey "$tmp/$2.key" -CAcreateserial -out "$tmp/$1.pem" \
    -days 1 2> /dev/null
}
for ca in ca rogue_ca; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/$ca.key" -out "$tmp/$ca.pem" -days 1 -subj "/CN=$ca" 2> /dev/null
done
cert node ca
cert rogue rogue_ca
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/stranger.key" -out "$tmp/stranger.pem" -days 1 \
  -subj "/CN=stranger" 2> /dev/null
tls=(--tls-cert "$tmp/node.pem" --tls-key "$tmp/node.key" --tls-ca "$tmp/ca.pem")
short=(--max-steps 3 --eval-batches 1 --no-progress)

check "two ranks over mutual TLS" 0 "done: 3 steps" -- "$troupe" train --nodes 2 "${short[@]}" --out "$tmp/ok" "${tls[@]}"
grep -q '"step": 2' "$tmp/ok/metrics.jsonl" || { echo "FAIL no metrics from the TLS job"; fail=1; }
# A dp x pp mesh over four processes: TLS carries the control plane, the rings and the pipeline
# links keep their own authenticated connections.
check "dp x pp over four processes, mutual TLS" 0 "done: 3 steps" -- "$troupe" train --nodes 4 --dp 2 --pp 2 \
  --micro-batches 2 "${short[@]}" --out "$tmp/mesh" "${tls[@]}"

# Rank 0 with the job's certificates; a worker with a certificate from another CA.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(--world-size 2 --master-addr 127.0.0.1 --master-port "$port" "${short[@]}")
TROUPE_SECRET=s3cret-0123456789abc timeout 60 "$troupe" train --rank 0 "${job[@]}" --out "$tmp/r0" "${tls[@]}" > "$tmp/r0.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q "control gate on" "$tmp/r0.log" && break; sleep 0.2; done
check "a worker with a foreign CA's certificate is refused" 1 "rank 1: cannot reach rank 0" -- env TROUPE_SECRET=s3cret-0123456789abc timeout 30 \
  "$troupe" worker --rank 1 "${job[@]}" --out "$tmp/r1" --tls-cert "$tmp/rogue.pem" --tls-key "$tmp/rogue.key" \
  --tls-ca "$tmp/rogue_ca.pem"
if grep -q '"step": 0' "$tmp/r0/metrics.jsonl" 2> /dev/null; then echo "FAIL rank 0 trained with a foreign worker"; fail=1; fi

# Bad TLS files: refused at start with the flag and file named, on rank 0 and on a worker.
echo "not a pem" > "$tmp/garbage.pem"
bad_tls() {  # bad_tls NAME PATTERN CERT KEY CA
  check "rank 0: $1" 2 "$2" -- timeout 20 "$troupe" train --nodes 2 "${short[@]}" --out "$tmp/bad" \
    --tls-cert "$3" --tls-key "$4" --tls-ca "$5"
  check "worker: $1" 2 "$2" -- env TROUPE_SECRET=s3cret-0123456789abc timeout 20 "$troupe" worker --rank 1 "${job[@]}" \
    --out "$tmp/bad" --tls-cert "$3" --tls-key "$4" --tls-ca "$5"
}
bad_tls "missing certificate" "--tls-cert $tmp/none.pem: cannot open \(No such file" "$tmp/none.pem" "$tmp/node.key" "$tmp/ca.pem"
bad_tls "certificate that is no PEM" "--tls-cert $tmp/garbage.pem: no certificate" "$tmp/garbage.pem" "$tmp/node.key" "$tmp/ca.pem"
bad_tls "key that is no PEM" "--tls-key $tmp/garbage.pem: no private key" "$tmp/node.pem" "$tmp/garbage.pem" "$tmp/ca.pem"
bad_tls "key of another certificate" "--tls-key $tmp/rogue.key: does not match" "$tmp/node.pem" "$tmp/rogue.key" "$tmp/ca.pem"
bad_tls "missing CA" "--tls-ca $tmp/none.pem: cannot open \(No such file" "$tmp/node.pem" "$tmp/node.key" "$tmp/none.pem"
bad_tls "CA that is no PEM" "--tls-ca $tmp/garbage.pem: no CA" "$tmp/node.pem" "$tmp/node.key" "$tmp/garbage.pem"
bad_tls "certificate another CA signed" "--tls-cert $tmp/node.pem: not accepted by the CA" "$tmp/node.pem" "$tmp/node.key" "$tmp/rogue_ca.pem"
# While processes join: every port rank 0 of a TLS job listens on speaks the job's challenge (a
# 32-byte nonce) before anything else, so none is a TLS or CAF endpoint a stranger can reach
# without the secret (rank 0's middleman used to listen on a loopback TLS port until every process
# had joined). Hostile connections to each of them then leave the job unharmed.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
job=(--world-size 2 --master-addr 127.0.0.1 --master-port "$port" "${short[@]}")
TROUPE_SECRET=s3cret-0123456789abc timeout 90 "$troupe" train --rank 0 "${job[@]}" --out "$tmp/w0" "${tls[@]}" > "$tmp/w0.log" 2>&1 &
rank0=$!
pids+=($rank0)
for _ in $(seq 100); do grep -q "control gate on" "$tmp/w0.log" && break; sleep 0.1; done
sleep 0.5
ports=$(listening_ports $(pgrep -P "$rank0"))
silent=$(for p in $ports; do
  python3 - "$p" <<'PY'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(0.2)
got, deadline = b"", time.time() + 3
while len(got) < 32 and time.time() < deadline:
    try:
        b = s.recv(64)
    except socket.timeout:
        continue
    if not b:
        break
    got += b
if len(got) != 32:
    print(sys.argv[1])
PY
done)
for port in $ports; do
  python3 -c "import socket; s = socket.create_connection(('127.0.0.1', $port)); s.sendall(b'garbage' * 100)" 2> /dev/null
  (python3 -c "import socket, time; s = socket.create_connection(('127.0.0.1', $port)); time.sleep(2)" 2> /dev/null &)
  timeout 3 openssl s_client -connect "127.0.0.1:$port" -cert "$tmp/stranger.pem" -key "$tmp/stranger.key" \
    < /dev/null > /dev/null 2>&1
done
TROUPE_SECRET=s3cret-0123456789abc timeout 60 "$troupe" worker --rank 1 "${job[@]}" --out "$tmp/w1" "${tls[@]}" > "$tmp/w1.log" 2>&1
worker_rc=$?
wait "$rank0"
rank0_rc=$?
if [ -z "$ports" ]; then
  echo "FAIL no listening port of rank 0 was found while it waited for its worker"; fail=1
elif [ -n "$silent" ]; then
  echo "FAIL while processes join, rank 0 listens on ports that do not open with the job's challenge: $(echo $silent)"
  fail=1
elif [ "$worker_rc" -ne 0 ] || [ "$rank0_rc" -ne 0 ]; then
  echo "FAIL after hostile connections during the join, the job exited $rank0_rc (worker $worker_rc):"
  grep -hE "error" "$tmp/w0.log" "$tmp/w1.log" | head -3; fail=1
else
  echo "ok   while a TLS job's processes join, each of rank 0's ports $(echo $ports) opens with the job's challenge; hostile connections there leave the job to finish"
fi

# 20 hostile local connections while a TLS job trains (garbage, idle, a TLS client with a
# certificate no CA of the job signed), to every port its processes listen on: the job finishes
# with exit 0. (A middleman's loopback TLS port, which no longer exists, once let one garbage
# connection end the job.)
timeout 120 "$troupe" train --nodes 2 --hidden 8 --epochs 60 --no-progress --out "$tmp/hostile" "${tls[@]}" \
  > "$tmp/hostile.log" 2>&1 &
job=$!
pids+=($job)
for _ in $(seq 300); do grep -q "training starts" "$tmp/hostile.log" && break; sleep 0.1; done
ports=$(listening_ports $(pgrep -P "$job") $(pgrep -P "$(pgrep -P "$job" | head -1)" 2> /dev/null))
for i in $(seq 20); do
  for port in $ports; do
    case $((i % 3)) in
      0) python3 -c "import socket; s = socket.create_connection(('127.0.0.1', $port)); s.sendall(b'garbage' * 100)" 2> /dev/null ;;
      1) (python3 -c "import socket, time; s = socket.create_connection(('127.0.0.1', $port)); time.sleep(2)" 2> /dev/null &) ;;
      2) timeout 3 openssl s_client -connect "127.0.0.1:$port" -cert "$tmp/stranger.pem" -key "$tmp/stranger.key" \
           < /dev/null > /dev/null 2>&1 ;;
    esac
  done
done
wait "$job"
rc=$?
if [ -z "$ports" ]; then
  echo "FAIL no listening port of the TLS job was found to attack"; fail=1
elif [ "$rc" -ne 0 ]; then
  echo "FAIL the TLS job under 20 hostile connections to ports $(echo $ports) exited $rc:"; grep -E "error" "$tmp/hostile.log" | head -3
  fail=1
else
  echo "ok   a TLS job under 20 hostile connections to each of its ports $(echo $ports) finished with exit 0"
fi
exit $fail
