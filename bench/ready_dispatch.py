#!/usr/bin/env python3
"""Ready-first against fixed-order dispatch, side by side in one run (issue 40).

A character GPT over pp 4 (four stage threads in one process; the per-action cost is dominated by
the injected jitter, which sleeps, so the 4 stages do not oversubscribe a 2-core machine), 1F1B
with M microbatches. Each row runs fixed and ready alternately, --repeats times, and reports the
median samples/s of each, their ratio and the load average seen; also `troupe schedule`'s
simulated gain for the same schedule and jitter (200 simulated steps, each compute action
--action-ms plus the same jitter). Rows: no jitter (ready must be no slower), and jitter up to J ms
on every rank with stash headroom 0, 1, 4 and M.

    bench/ready_dispatch.py [--build build] [--repeats 3] [--steps 6] [--micro-batches 16] [--jitter-ms 10] [--action-ms 0.2]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load():
    return float(open("/proc/loadavg").read().split()[0])


def train(a, corpus, extra):
    out = tempfile.mkdtemp(prefix="ready-dispatch-")
    cmd = [os.path.join(a.build, "troupe"), "train", "--model", "gpt", "--corpus", corpus, "--context", "16",
           "--channels", "32", "--heads", "2", "--blocks", "4", "--batch-size", str(4 * a.micro_batches), "--pp", "4",
           "--micro-batches", str(a.micro_batches), "--max-steps", str(a.steps), "--eval-batches", "1",
           "--no-progress", "--out", out] + extra
    run = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"done: \d+ steps, ([0-9.]+) samples/s", run.stdout + run.stderr)
    return float(m.group(1))


def simulated(a, headroom):
    """`troupe schedule`'s predicted throughput ratio of ready to fixed for the same pipeline."""
    ms = str(a.action_ms)
    out = subprocess.run([os.path.join(a.build, "troupe"), "schedule", "--schedule", "1f1b", "--pp", "4",
                          "--micro-batches", str(a.micro_batches), "--forward", ms, "--backward-input", ms,
                          "--backward-weight", ms, "--dispatch", "ready", "--ready-stash", str(headroom),
                          "--jitter-ms", str(a.jitter_ms), "--steps", "200"],
                         capture_output=True, text=True, check=True).stdout
    return float(re.search(r"\(([0-9.]+)x the fixed order's throughput\)", out).group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--micro-batches", type=int, default=16)
    p.add_argument("--jitter-ms", type=float, default=10.0)
    # A forward or half-backward of this GPT chunk takes about 0.2 ms here (trace.json of a run
    # without jitter); a full backward is two of them.
    p.add_argument("--action-ms", type=float, default=0.2)
    a = p.parse_args()
    corpus = os.path.join(tempfile.mkdtemp(), "corpus.txt")
    with open(corpus, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog.\n" * 400)
    jitter = []
    for r in range(4):
        jitter += ["--jitter", "%d:%g" % (r, a.jitter_ms)]
    M = a.micro_batches
    rows = [("no jitter", [], 0)] + [("jitter up to %g ms on every rank" % a.jitter_ms, jitter, h) for h in (0, 1, 4, M)]
    print("| case | --ready-stash | fixed samples/s | ready samples/s | ready / fixed | simulated ready / fixed | load average |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, extra, headroom in rows:
        fixed, ready, loads = [], [], []
        for _ in range(a.repeats):
            loads.append(load())
            fixed.append(train(a, corpus, extra + ["--dispatch", "fixed"]))
            ready.append(train(a, corpus, extra + ["--dispatch", "ready", "--ready-stash", str(headroom)]))
        f, r = statistics.median(fixed), statistics.median(ready)
        sim = simulated(a, headroom) if extra else None
        print("| %s | %d | %.0f | %.0f | **%.2f** | %s | %.2f–%.2f |" % (name, headroom, f, r, r / f,
              "%.2f" % sim if sim else "—", min(loads), max(loads)))
    print("\nGPT T 16, C 32, 2 heads, 4 blocks; pp 4, 1F1B, M %d, %d steps; medians of %d alternating runs" %
          (M, a.steps, a.repeats))


if __name__ == "__main__":
    main()
