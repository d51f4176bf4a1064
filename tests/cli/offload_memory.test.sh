#!/bin/bash
# ZeRO-3 with the optimizer on NVMe trains a model whose plain data-parallel job does not fit
# --device-memory: plain DP is refused before it starts (exit 2, with the numbers), the offloaded
# job runs under the same cap to the plain job's losses bit for bit, and the process's peak
# resident memory is lower than a ZeRO-2 job keeping its optimizer in memory, by most of the
# optimizer state the predictions put on NVMe.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/nvme"
# 784-3072-3072-10: 11.9 M parameters, 48 MB; AdamW keeps 12 bytes per parameter of each shard.
job=(--hidden 3072,3072 --dp 2 --batch-size 64 --max-steps 4 --eval-batches 1 --no-progress --bucket-mb 4)
cap=200MiB
check "plain DP over the cap is refused before it starts" 2 "does not fit --device-memory 200.00 MiB: rank 0 needs" -- \
  "$troupe" train "${job[@]}" --device-memory $cap --out "$tmp/refused"
[ -e "$tmp/refused/metrics.jsonl" ] && { echo "FAIL the refused job wrote metrics"; fail=1; }

# Peak RSS (KiB) of one run, its exit code checked.
rss() {
  local out=$1; shift
  python3 - "$@" <<'PY' 2>"$tmp/err" || { cat "$tmp/err"; echo "FAIL $out"; return 1; }
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
if r.returncode != 0:
    sys.stderr.write(r.stderr[-2000:])
    sys.exit(1)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
PY
}
losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "\"loss\"" in l])' "$1"; }

plain_rss=$(rss plain "$troupe" train "${job[@]}" --out "$tmp/plain") || fail=1
memory_rss=$(rss zero2 "$troupe" train "${job[@]}" --zero 2 --out "$tmp/zero2") || fail=1
nvme_rss=$(rss nvme "$troupe" train "${job[@]}" --zero 3 --offload optimizer --offload-to nvme --offload-dir "$tmp/nvme" \
  --aio-block-size 256KiB --aio-queue-depth 4 --device-memory $cap --out "$tmp/nvme-run") || fail=1
echo "peak RSS: plain DP ${plain_rss} KiB, zero 2 ${memory_rss} KiB, zero 3 + NVMe offload ${nvme_rss} KiB"
if [ -n "${nvme_rss:-}" ] && [ -n "${memory_rss:-}" ]; then
  # 2 ranks x 12 bytes x 5.95 M parameters = 143 MB of optimizer state off the host; staging the
  # tiles and the updated shard (2 x 24 MB) takes some back: ask for 60 MB.
  if [ $((memory_rss - nvme_rss)) -lt 60000 ]; then
    echo "FAIL NVMe offload saved only $((memory_rss - nvme_rss)) KiB of resident memory"; fail=1
  else
    echo "ok   NVMe offload lowers peak RSS by $((memory_rss - nvme_rss)) KiB"
  fi
fi
want=$(losses "$tmp/plain/metrics.jsonl")
for run in zero2 nvme-run; do
  got=$(losses "$tmp/$run/metrics.jsonl")
  if [ "$got" != "$want" ]; then echo "FAIL $run losses $got differ from plain DP's $want"; fail=1
  else echo "ok   $run trains to plain DP's losses"; fi
done
[ -z "$(ls -A "$tmp/nvme")" ] || { echo "FAIL shard files left in the offload folder"; fail=1; }
exit $fail
