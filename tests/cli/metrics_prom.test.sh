#!/usr/bin/env bash
# --metrics-prom (issue 43): a job's figures in Prometheus's text exposition format, rewritten
# whole after every step. Every line is a comment (# HELP / # TYPE) or a sample in the format's
# grammar; the step count, loss and samples/s are metrics.jsonl's last step's; each rank has its
# step, compute and wait seconds (wait = step - compute) and its device-memory peaks; the last
# evaluation's test loss is there; Prometheus's own parser (prometheus_client) reads it. A folder
# that is missing or that the file cannot be written in is refused before training, naming the
# flag, exit 2.
# Usage: metrics_prom.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
need_fashion_mnist
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The file's folder is the user's to make (issue 57): a missing one is refused, not created.
check "a .prom file in a missing folder is refused" 2 "metrics-prom $dir/textfile/troupe.prom: its folder $dir/textfile does not exist" -- \
  "$troupe" train --hidden 32 --max-steps 5 --dp 2 --eval-batches 1 --no-progress --out "$dir/run" \
  --metrics-prom "$dir/textfile/troupe.prom" --device-memory 1GiB
mkdir -p "$dir/textfile"
check "a dp 2 job writes its .prom file" 0 "done: 5 steps" -- "$troupe" train --hidden 32 --max-steps 5 --dp 2 \
  --eval-batches 1 --no-progress --out "$dir/run" --metrics-prom "$dir/textfile/troupe.prom" --device-memory 1GiB
python3 - "$dir/textfile/troupe.prom" "$dir/run/metrics.jsonl" <<'PY' || fail=1
import json, re, sys
text = open(sys.argv[1]).read()
steps = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
evals = [json.loads(l) for l in open(sys.argv[2]) if '"test_loss"' in l]
sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (-?[0-9.eE+-]+)$')
values, bad, typed = {}, [], set()
for line in text.splitlines():
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            typed.add(name)
            if kind not in ("counter", "gauge"): bad.append(line)
        continue
    m = sample.match(line)
    if not m: bad.append(line); continue
    if m.group(1) not in typed: bad.append("no # TYPE before: " + line)
    values[m.group(1) + (m.group(2) or "")] = float(m.group(5))
def close(a, b): return abs(a - b) <= 1e-5 * max(1.0, abs(b))
checks = {
    "lines in the exposition grammar": not bad,
    "troupe_steps_total = 5": values.get("troupe_steps_total") == 5,
    "troupe_loss = the last step's": close(values.get("troupe_loss", -1), steps[-1]["loss"]),
    "troupe_samples_per_second = the last step's": abs(values.get("troupe_samples_per_second", -1) - steps[-1]["samples_per_s"]) < 0.1,
    "troupe_test_loss = the last evaluation's": close(values.get("troupe_test_loss", -1), evals[-1]["test_loss"]),
}
for r in ("0", "1"):
    step = values.get('troupe_rank_step_seconds{rank="%s"}' % r, -1)
    comp = values.get('troupe_rank_compute_seconds{rank="%s"}' % r, -1)
    wait = values.get('troupe_rank_wait_seconds{rank="%s"}' % r, -1)
    checks["rank %s: step = compute + wait, all positive" % r] = step > 0 and comp > 0 and wait >= 0 and abs(step - comp - wait) < 1e-6
    checks["rank %s: a parameters peak" % r] = values.get('troupe_rank_memory_peak_bytes{rank="%s",kind="parameters"}' % r, 0) > 0
for what, ok in checks.items(): print(("ok   " if ok else "FAIL ") + what)
for b in bad: print("  not exposition format:", b)
sys.exit(0 if all(checks.values()) else 1)
PY
# The same file through Prometheus's own parser (Debian's python3-prometheus-client, which
# scripts/setup.sh test installs): every family parses, with the per-rank wait times.
if /usr/bin/python3 -c "import prometheus_client.parser" 2>/dev/null; then
  /usr/bin/python3 - "$dir/textfile/troupe.prom" <<'PY' || fail=1
import sys
from prometheus_client.parser import text_string_to_metric_families
families = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
waits = {s.labels.get("rank"): s.value for s in families["troupe_rank_wait_seconds"].samples}
ok = "troupe_steps" in families and "troupe_loss" in families and set(waits) == {"0", "1"}
print(("ok   " if ok else "FAIL ") + f"prometheus_client parses {len(families)} families, the ranks' waits {waits}")
sys.exit(0 if ok else 1)
PY
else
  echo "skip prometheus_client's parser: /usr/bin/python3 has no prometheus_client (apt install python3-prometheus-client)"
fi
chmod 555 "$dir/textfile"
if [ "$(id -u)" != 0 ]; then
  check "an unwritable folder is refused before training" 2 "metrics-prom" -- "$troupe" train --hidden 32 --max-steps 1 \
    --no-progress --out "$dir/run2" --metrics-prom "$dir/textfile/x.prom"
fi
check "a file in /proc is refused before training" 2 "metrics-prom" -- "$troupe" train --hidden 32 --max-steps 1 \
  --no-progress --out "$dir/run3" --metrics-prom /proc/troupe.prom
exit $fail
