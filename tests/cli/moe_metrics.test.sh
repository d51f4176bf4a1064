#!/bin/bash
# A mixture-of-experts GPT's routing in metrics.jsonl, on the default data (the fortunes corpus):
# 1. The load-balancing loss keeps every expert used: over the last 10 of 100 steps (4 experts,
#    top-2, every block), with --aux-loss-coef 0.01 every expert of every block takes at least a
#    quarter of an even share of the assignments (measured: 0.445 at worst, 0.729 on average);
#    with the loss off the router collapses below that (measured: 0.041 at worst), so it is the
#    loss that does it.
# 2. Dropped tokens are counted exactly: at capacity factor 1.0, top-1, one micro-batch of N
#    tokens, each block drops sum over experts of max(0, routed - ceil(N / E)) every step.
# 3. Over 2 processes (--nodes 2 --dp 2) the routing reaches process 0's metrics as in one
#    process: the same counts, every step.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

job=(train --model gpt --experts 4 --top-k 2 --batch-size 16 --eval-batches 1 --no-progress)
check "100 steps with the load-balancing loss" 0 "done: 100 steps" -- "$troupe" "${job[@]}" --max-steps 100 --out "$tmp/aux"
check "100 steps without it" 0 "done: 100 steps" -- "$troupe" "${job[@]}" --max-steps 100 --aux-loss-coef 0 --out "$tmp/none"
python3 - "$tmp/aux/metrics.jsonl" "$tmp/none/metrics.jsonl" <<'PY' || fail=1
import json, sys
def worst_share(path):
    rows = [json.loads(l) for l in open(path) if '"expert_tokens"' in l]
    assert len(rows) == 100, f"{path}: {len(rows)} steps with expert_tokens"
    shares = [min(v) / sum(v) * len(v) for r in rows[-10:] for v in r["expert_tokens"].values()]
    return min(shares)
aux, none = worst_share(sys.argv[1]), worst_share(sys.argv[2])
print(f"least-used expert, share of an even load, last 10 steps: {aux:.3f} with the loss, {none:.3f} without")
if aux < 0.25: sys.exit(f"FAIL with the load-balancing loss an expert fell to {aux:.3f} of an even share")
if none >= 0.25: sys.exit(f"FAIL without the loss the least-used expert kept {none:.3f}: the bound does not show the loss's effect")
PY

check "capacity 1.0, top-1" 0 "done: 10 steps" -- "$troupe" train --model gpt --experts 4 --top-k 1 --capacity-factor 1.0 \
  --batch-size 16 --max-steps 10 --eval-batches 1 --no-progress --out "$tmp/cap"
python3 - "$tmp/cap/metrics.jsonl" <<'PY' || fail=1
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"expert_tokens"' in l]
assert len(rows) == 10
N, E = 16 * 64, 4
cap = math.ceil(1.0 * N * 1 / E)
total = 0
for r in rows:
    for layer, routed in r["expert_tokens"].items():
        assert sum(routed) == N, f"step {r['step']} block {layer}: {sum(routed)} assignments, expected {N}"
        want = sum(max(0, n - cap) for n in routed)
        got = r["tokens_dropped"][layer]
        if got != want: sys.exit(f"FAIL step {r['step']} block {layer}: {got} dropped, {want} expected from {routed}")
        total += got
print(f"dropped counts exact over 10 steps x 4 blocks ({total} assignments dropped)")
if total == 0: sys.exit("FAIL nothing was dropped: the check proves nothing")
PY
small=(train --model gpt --experts 4 --top-k 2 --capacity-factor 1.0 --batch-size 16 --max-steps 4 --eval-batches 1 --no-progress --dp 2)
check "dp 2 in one process" 0 "done: 4 steps" -- "$troupe" "${small[@]}" --out "$tmp/one"
check "dp 2 over 2 processes" 0 "done: 4 steps" -- "$troupe" "${small[@]}" --nodes 2 --out "$tmp/two"
python3 - "$tmp/one/metrics.jsonl" "$tmp/two/metrics.jsonl" <<'PY' || fail=1
import json, sys
def routing(path):
    return [(r["expert_tokens"], r["tokens_dropped"]) for r in map(json.loads, open(path)) if "expert_tokens" in r]
one, two = routing(sys.argv[1]), routing(sys.argv[2])
if len(one) != 4 or one != two: sys.exit(f"FAIL the routing over 2 processes differs from one process: {one} vs {two}")
print("routing over 2 processes equals one process's, 4 steps")
PY
exit $fail
