#!/usr/bin/env bash
# What a job refuses so that it is not guessed into or written over (issue 57, item 13): a secret
# shorter than 16 bytes (the gate answers a wrong guess at once, so a 1-character one fell in 21
# guesses), from TROUPE_SECRET or --secret-file; and a second job in a checkpoint folder another
# job holds (one job's --keep pruned the other's checkpoints), refused by name, naming the holder,
# while the first trains on; once the first has ended, the folder is free again.
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
small=(--hidden 8 --max-steps 2 --no-progress)

check "a 1-byte TROUPE_SECRET" 2 "TROUPE_SECRET: the secret has 1 byte, fewer than the 16" -- \
  env TROUPE_SECRET=x timeout 20 "$troupe" worker --rank 1 --world-size 2 --master-addr 127.0.0.1 "${small[@]}"
printf 'fifteen-bytes!!\n' >"$tmp/short"
check "a 15-byte --secret-file" 2 "--secret-file $tmp/short: the secret has 15 bytes, fewer than the 16" -- \
  timeout 20 "$troupe" worker --rank 1 --world-size 2 --master-addr 127.0.0.1 --secret-file "$tmp/short" "${small[@]}"
printf 'sixteen-bytes!!!\n' >"$tmp/ok"
out=$(timeout 5 "$troupe" worker --rank 1 --world-size 2 --master-addr 127.0.0.1 --master-port 1 --secret-file "$tmp/ok" \
  "${small[@]}" 2>&1); rc=$?
if [ $rc -ne 2 ] && ! grep -q "secret" <<<"$out"; then echo "ok   a 16-byte secret is taken (the worker goes on to look for rank 0)"
else echo "FAIL a 16-byte secret: rc=$rc:"; echo "$out" | tail -3; fail=1; fi

"$troupe" train --hidden 8 --max-steps 1000000 --epochs 1000 --no-progress --checkpoint-dir "$tmp/ck" --checkpoint-every 1000 \
  --out "$tmp/a" >"$tmp/a.log" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q '"loss"' "$tmp/a/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
check "a second job in a held checkpoint folder" 2 "--checkpoint-dir $tmp/ck: in use by another job \(pid $first on this host\)" -- \
  timeout 60 "$troupe" train "${small[@]}" --checkpoint-dir "$tmp/ck" --out "$tmp/b"
if kill -0 $first 2>/dev/null; then echo "ok   the first job trains on"; else echo "FAIL the first job ended:"; tail -3 "$tmp/a.log"; fail=1; fi
kill -9 $first; wait $first 2>/dev/null
check "the folder is free once its job has ended, even by SIGKILL" 0 "done: 2 steps" -- \
  timeout 120 "$troupe" train "${small[@]}" --checkpoint-dir "$tmp/ck" --out "$tmp/c"
exit $fail
