#!/bin/sh
# `troupe train --nodes 2` on one machine (rank 0 starts rank 1 as `troupe worker`), the
# [process] config table, and `troupe worker` refusing rank 0. Asserts exit codes, the metrics
# rank 0 writes (and that rank 1 writes none), and that no worker outlives the job.
set -u
troupe="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$troupe" train --nodes 2 --hidden 32 --batch-size 64 --max-steps 3 --eval-batches 1 --no-progress \
  --peer-timeout 5 --out "$dir/a" >"$dir/a.log" 2>&1 || { cat "$dir/a.log"; fail "train --nodes 2"; }
[ "$(grep -c '"loss"' "$dir/a/metrics.jsonl")" = 3 ] || fail "expected 3 step lines in metrics.jsonl"
[ "$(ls "$dir/a" | tr "\n" " ")" = "curves.svg metrics.jsonl timeline.svg trace.json " ] || fail "expected only process 0's curves, metrics, trace and timeline: $(ls "$dir/a")"
grep -q "process 1: done" "$dir/a.log" || fail "process 1 did not finish"
pgrep -f "exe worker.*$dir/a" >/dev/null && fail "a worker outlived the job"
cat >"$dir/p.toml" <<TOML
[train]
max_steps = 2
batch_size = 64
[model]
hidden = [32]
[process]
nodes = 2
peer_timeout = 5
TOML
"$troupe" train --config "$dir/p.toml" --eval-batches 1 --no-progress --out "$dir/b" >"$dir/b.log" 2>&1 \
  || { cat "$dir/b.log"; fail "train with [process] nodes = 2"; }
[ "$(grep -c '"loss"' "$dir/b/metrics.jsonl")" = 2 ] || fail "expected 2 step lines from the TOML job"
TROUPE_SECRET=x-0123456789abcdef "$troupe" worker --rank 0 --world-size 2 --master-addr 127.0.0.1 >"$dir/c.log" 2>&1
[ $? = 2 ] || fail "worker --rank 0 must exit 2"
grep -q "rank 0 is" "$dir/c.log" || fail "worker --rank 0: no explanation"
env -u TROUPE_SECRET "$troupe" train --rank 1 --world-size 2 --master-addr 127.0.0.1 --master-port 1 >"$dir/d.log" 2>&1
[ $? = 2 ] || fail "a 2-process job without a secret must exit 2"
grep -q "secret" "$dir/d.log" || fail "no word about the secret"
echo "ok"
