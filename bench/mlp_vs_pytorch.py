#!/usr/bin/env python3
"""MLP training throughput, troupe against PyTorch on CPU, in one run.

Both train the same MLP (784-256-256-10), on the same Fashion-MNIST files with the same
normalization, with AdamW (lr 1e-3, weight decay 0.01), batch 128, the same epochs and thread
count, and both run with the same OpenBLAS kernels (OPENBLAS_CORETYPE, which troupe sets for
itself on CPUs Debian's OpenBLAS does not know). Prints one table row per peer and the ratio.

    bench/mlp_vs_pytorch.py [--build build] [--epochs 5] [--threads 1] [--repeats 1]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile


def run_troupe(args, env, extra=()):
    out = tempfile.mkdtemp(prefix="troupe-bench-")
    cmd = [os.path.join(args.build, "troupe"), "train", "--epochs", str(args.epochs), "--threads",
           str(args.threads), "--out", out, "--no-progress", *extra]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    m = re.search(r"done: .* ([0-9.]+) samples/s, ([0-9.]+) s training.*test accuracy ([0-9.]+)", p.stderr + p.stdout)
    if not m:
        sys.exit("could not read troupe's summary line:\n" + p.stderr + p.stdout)
    return {"samples_per_s": float(m.group(1)), "train_seconds": float(m.group(2)),
            "test_accuracy": float(m.group(3))}


def run_pytorch(args, env, ranks=1):
    """ranks > 1: DDP over gloo, one process per rank started by torch.distributed.run (whose
    `torchrun` script may carry a stale interpreter path in a moved venv, so it runs as a module)."""
    here = os.path.dirname(os.path.abspath(__file__))
    launch = [args.python] if ranks == 1 else [args.python, "-m", "torch.distributed.run", "--standalone",
                                               "--nproc_per_node", str(ranks)]
    cmd = [*launch, os.path.join(here, "pytorch_mlp.py"), "--epochs", str(args.epochs), "--threads",
           str(args.threads)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--python", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                  ".venv-bench", "bin", "python"),
                    help="interpreter with PyTorch (scripts/setup.sh bench installs it from PyPI into .venv-bench)")
    args = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("OPENBLAS_CORETYPE", "SkylakeX" if "avx512f" in open("/proc/cpuinfo").read() else "Haswell")
    rows = {"troupe": [], "pytorch": []}
    for _ in range(args.repeats):  # interleaved, so drift in machine load hits both alike
        rows["troupe"].append(run_troupe(args, env))
        rows["pytorch"].append(run_pytorch(args, env))
    med = {k: {f: statistics.median(r[f] for r in v) for f in ("samples_per_s", "test_accuracy", "train_seconds")}
           for k, v in rows.items()}
    ratio = med["troupe"]["samples_per_s"] / med["pytorch"]["samples_per_s"]
    torch_version = rows["pytorch"][0].get("torch", "?")
    print(f"MLP 784-256-256-10, AdamW lr 1e-3, batch 128, {args.epochs} epochs, {args.threads} thread(s), "
          f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}, median of {args.repeats}")
    print("| peer | samples/s | train s | test accuracy |")
    print("|---|---:|---:|---:|")
    for k, label in (("troupe", "troupe (actors)"), ("pytorch", f"PyTorch {torch_version}")):
        print(f"| {label} | {med[k]['samples_per_s']:.0f} | {med[k]['train_seconds']:.2f} | "
              f"{med[k]['test_accuracy']:.4f} |")
    print(f"ratio troupe/PyTorch samples/s: {ratio:.2f}; accuracy difference: "
          f"{med['troupe']['test_accuracy'] - med['pytorch']['test_accuracy']:+.4f}")


if __name__ == "__main__":
    main()
