#!/usr/bin/env python3
"""What live slow-rank and slow-link detection costs (issue 43): the same data-parallel job over two
processes (--nodes 2 --dp 2, the TCP ring) with detection on (--slow-rank-window 20, twice the default window)
and off (--slow-rank-window 0), alternating, each the median of --repeats rounds of samples/s. The
ring times each collective's first hop and every member keeps its ledger either way (two clock
reads and a few numbers per collective); "off" drops the detectors that read them each step.
Prints one line per job with the ratio on/off and the load average, and exits 1 when a ratio is
under 0.99 (more than 1% lost).

Usage: bench/detection_overhead.py [--troupe build/troupe] [--repeats 3] [--steps 200]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(troupe, config, steps, window):
    with tempfile.TemporaryDirectory() as out:
        cmd = [troupe, "train", "--nodes", "2", "--dp", "2", "--max-steps", str(steps), "--epochs", "1",
               "--no-progress", "--slow-rank-window", str(window), "--out", out]
        if config:
            cmd[2:2] = ["--config", config]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        m = re.search(r"done: \d+ steps, ([0-9.]+) samples/s", p.stdout + p.stderr)
        if not m:
            sys.exit(f"no throughput in the output of {' '.join(cmd)}")
        return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--troupe", default=os.path.join(ROOT, "build", "troupe"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores")
    worst = 1.0
    for name, config in [("MLP (default)", None), ("GPT (examples/gpt.toml)", "examples/gpt.toml")]:
        on, off, loads = [], [], []
        for _ in range(a.repeats):
            on.append(run(a.troupe, config, a.steps, 20))
            off.append(run(a.troupe, config, a.steps, 0))
            loads.append(os.getloadavg()[0])
        ratio = statistics.median(on) / statistics.median(off)
        worst = min(worst, ratio)
        print(f"{name}, --nodes 2 --dp 2, {a.steps} steps: detection on {statistics.median(on):.0f} samples/s, "
              f"off {statistics.median(off):.0f}: on/off {ratio:.3f} (load average {min(loads):.1f}-{max(loads):.1f}; "
              f"runs on {[round(x) for x in on]}, off {[round(x) for x in off]})")
    sys.exit(0 if worst >= 0.99 else 1)


if __name__ == "__main__":
    main()
