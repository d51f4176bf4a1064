#!/usr/bin/env bash
# --slow-link (fault injection): rank 1 of a dp 2 job over 2 processes sends its ring traffic at a
# cap. The losses are the unshaped run's, step for step, and the run cannot beat the cap: each step
# rank 1 sends its whole gradient once around a two-rank ring (4 bytes x 269,322 parameters of the
# default MLP), so 20 steps at 20 MB/s take at least 20 x 1.077 MB / 20 MB/s = 1.08 s. Added
# latency alone likewise: at least 20 x 30 ms. While it runs, the capped link is named as the link
# from rank 1 to rank 0 (its first hops arrive at the cap), and no rank is named slow; the
# unshaped run names nothing. In one process (dp 4) the in-process ring is shaped and named alike,
# and troupe stress reports the naming. Bad input exits 2 naming it.
# Usage: slow_link.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() {  # NAME FLAGS...: trains 20 steps, prints its training seconds
  local name=$1; shift
  "$troupe" train --nodes 2 --dp 2 --max-steps 20 --epochs 1 --no-progress --out "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { echo "FAIL $name exited $?:"; tail -5 "$tmp/$name.log"; exit 1; }
  sed -n 's/.*done: 20 steps, .* samples\/s, \([0-9.]*\) s training.*/\1/p' "$tmp/$name.log"
}
losses() { grep -o '"loss": [0-9.e-]*' "$1/metrics.jsonl"; }
# A window of 8 steps after the 10 of warm-up: the slow link is named by step 18 of 20.
plain=$(run plain --slow-rank-window 8)
capped=$(run capped --slow-link 1:20 --slow-rank-window 8 --metrics-prom "$tmp/capped.prom")
late=$(run late --slow-link 1:0:30)
for name in capped late; do
  if [ "$(losses "$tmp/plain")" = "$(losses "$tmp/$name")" ]; then echo "ok   $name: the unshaped run's 20 losses"
  else echo "FAIL $name: losses differ from the unshaped run"; fail=1; fi
done
awk -v t="$capped" 'BEGIN { exit !(t >= 1.0) }' && echo "ok   capped at 20 MB/s: ${capped} s for 20 steps (>= 1.08 s; unshaped ${plain} s)" ||
  { echo "FAIL capped at 20 MB/s took ${capped} s, under the cap's 1.08 s"; fail=1; }
awk -v t="$late" 'BEGIN { exit !(t >= 0.55) }' && echo "ok   30 ms late: ${late} s for 20 steps (>= 0.6 s)" ||
  { echo "FAIL 30 ms of latency took ${late} s, under 20 x 30 ms"; fail=1; }
# Live detection (issue 43): rank 1's sends reach rank 0 at the cap, so the link 1 -> 0 is named,
# as a link and not as a slow rank; the unshaped run names neither.
if grep -q "slow link: rank 1's ring sends to rank 0 arrive at 1[0-9.]* MB/s\|slow link: rank 1's ring sends to rank 0 arrive at 2[0-9.]* MB/s" "$tmp/capped.log"; then
  echo "ok   capped: $(grep -o "slow link: rank 1.*other links" "$tmp/capped.log" | head -1)"
else echo "FAIL capped: the slow link 1 -> 0 was not named:"; grep -i "slow" "$tmp/capped.log"; fail=1; fi
# The .prom file carries each rank's left link speed: rank 0's is the capped one.
if python3 - "$tmp/capped.prom" <<'PY'
import re, sys
rates = dict(re.findall(r'^troupe_rank_left_link_bytes_per_second\{rank="(\d+)"\} (\S+)$', open(sys.argv[1]).read(), re.M))
r0, r1 = float(rates.get("0", 0)), float(rates.get("1", 0))
print(f"     .prom: rank 0's left link {r0 / 1e6:.1f} MB/s, rank 1's {r1 / 1e6:.1f} MB/s")
sys.exit(0 if 10e6 < r0 < 40e6 and r1 > 10 * r0 else 1)
PY
then echo "ok   capped: the .prom file shows rank 0's left link at the cap"
else echo "FAIL capped: the .prom file's link speeds"; fail=1; fi
if grep -q "slow rank: rank" "$tmp/capped.log"; then echo "FAIL capped: a slow link was taken for a slow rank"; fail=1
else echo "ok   capped: no rank named slow"; fi
if grep -q "slow link: rank\|slow rank: rank" "$tmp/plain.log"; then echo "FAIL plain: named a slow link or rank:"; grep "slow" "$tmp/plain.log"; fail=1
else echo "ok   plain: no link or rank named"; fi
check "one process with dp 1 has no ring to slow" 2 "dp 1 in one process" -- "$troupe" train --slow-link 0:20
# In one process (what troupe stress runs): the in-process ring of a dp 4 job, rank 1's sends
# capped, is named as the link from rank 1 to rank 2 at about the cap; rank 2, which the link makes
# late, is not named a slow rank; the losses are the unshaped run's.
one=(train --hidden 64 --dp 4 --max-steps 20 --eval-batches 1 --no-progress)
"$troupe" "${one[@]}" --out "$tmp/one-plain" > "$tmp/one-plain.log" 2>&1
"$troupe" "${one[@]}" --slow-link 1:20 --out "$tmp/one-capped" > "$tmp/one-capped.log" 2>&1
if grep -qE "slow link: rank 1's ring sends to rank 2 arrive at 1[5-9]\.[0-9]+ MB/s|slow link: rank 1's ring sends to rank 2 arrive at 2[0-1]\.[0-9]+ MB/s" \
     "$tmp/one-capped.log" && ! grep -q "slow rank:" "$tmp/one-capped.log" && ! grep -q "slow link:\|slow rank:" "$tmp/one-plain.log" &&
   same_losses "$tmp/one-plain" "$tmp/one-capped" 20 > /dev/null; then
  echo "ok   one process: the capped link 1 -> 2 is named at about 20 MB/s, no rank is, the losses are the unshaped run's"
else
  echo "FAIL one process: slow link not named as expected:"; grep -E "slow (link|rank)" "$tmp/one-capped.log" "$tmp/one-plain.log"; fail=1
fi
# troupe stress reports it: the slow-link scenario's sync run names the link live (report.json,
# and the HTML table's "named live" column); the undisturbed one names nothing.
cat > "$tmp/stress.toml" <<'TOML'
[stress]
modes = ["sync"]
[[scenario]]
name = "none"
[[scenario]]
name = "slow-link"
slow_links = ["1:20"]
[train]
max_steps = 20
eval_batches = 1
[model]
hidden = [64]
[mesh]
dp = 4
TOML
if "$troupe" stress "$tmp/stress.toml" --out "$tmp/stress" > "$tmp/stress.log" 2>&1 && python3 - "$tmp/stress/report.json" <<'PY'
import json, sys
runs = {r["scenario"]: r for r in json.load(open(sys.argv[1]))["runs"]}
link = runs["slow-link"]["slow_link"]
ok = link is not None and (link["from"], link["to"]) == (1, 2) and link["named_after_step"] < 20
ok = ok and runs["slow-link"]["slow_rank"] is None and runs["none"]["slow_link"] is None
print(runs["slow-link"]["slow_link"], runs["none"]["slow_link"])
sys.exit(0 if ok else 1)
PY
then
  grep -q "slow link 1→2 after step" "$tmp/stress/index.html" && echo "ok   troupe stress names the slow link live (report.json and index.html)" ||
    { echo "FAIL index.html has no named-live cell for the slow link"; fail=1; }
else
  echo "FAIL troupe stress did not report the slow link named live:"; tail -5 "$tmp/stress.log"; fail=1
fi
check "a rank outside the mesh" 2 "slow link of rank 5 but the mesh dp2.pp1.tp1/2 has 2 ranks" -- \
  "$troupe" train --nodes 2 --dp 2 --slow-link 5:20
check "a link that does nothing" 2 "neither caps the bandwidth nor adds latency" -- "$troupe" train --nodes 2 --slow-link 1:0
check "not a number" 2 "\"fast\" is not a number" -- "$troupe" train --nodes 2 --slow-link 1:fast
exit $fail
