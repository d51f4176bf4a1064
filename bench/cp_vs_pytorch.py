#!/usr/bin/env python3
"""Context parallelism's training throughput, troupe against a PyTorch DeepSpeed-Ulysses, in one run.

Both train examples/gpt.toml's GPT with every sequence split over --cp ranks (each rank two
chunks of it, one from each end) as --cp processes: troupe with `--cp N --nodes N` in each of its
three --cp-mode forms (the context group a TCP ring between the processes), PyTorch with
bench/pytorch_gpt.py --cp N: the all-to-all (Ulysses) form over gloo, torch.distributed having no
CPU path for its own context_parallel. The ratio compares like with like for troupe's all-to-all;
the ring and all-gather rows say what the other forms cost on the same machine. One thread per
rank, the same steps, the first --warmup untimed; the runs alternate, --repeats times, and the
table holds medians (with the range). Also checks that both start at a first-step loss near
ln(vocab).

    bench/cp_vs_pytorch.py [--build build] [--steps 40] [--warmup 5] [--repeats 3] [--cp 2] [--contexts 64,256]
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile

from tp_vs_pytorch import alternating_runs, checked_arguments, cpu_model, peer_arguments, run_pytorch_peer, troupe_rate

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODES = ("all-to-all", "ring", "all-gather")


def run_troupe(a, mode, T, env):
    out = tempfile.mkdtemp(prefix="troupe-cp-bench-")
    cmd = [os.path.join(a.build, "troupe"), "train", "--config", os.path.join(ROOT, "examples", "gpt.toml"),
           "--context", str(T), "--cp", str(a.cp), "--cp-mode", mode, "--nodes", str(a.cp), "--threads", "1",
           "--max-steps", str(a.warmup + a.steps), "--eval-batches", "1", "--out", out, "--no-progress"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"troupe failed ({' '.join(cmd)}):\n{p.stdout}{p.stderr}")
    rate, first_loss = troupe_rate(os.path.join(out, "metrics.jsonl"), a.warmup, a.steps, a.batch_size)
    return {"samples_per_s": rate, "first_loss": first_loss}


def run_pytorch(a, T, env):
    cmd = [a.python, os.path.join(HERE, "pytorch_gpt.py"), "--cp", str(a.cp), "--context", str(T),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch-size", str(a.batch_size)]
    return run_pytorch_peer(cmd, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    peer_arguments(ap, 40)
    ap.add_argument("--cp", type=int, default=2)
    ap.add_argument("--contexts", default="64,256", help="sequence lengths, comma-separated")
    a = checked_arguments(ap)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    contexts = [int(t) for t in a.contexts.split(",")]
    runs, torch_version = alternating_runs(
        a.repeats, contexts,
        lambda T: [(m, lambda m=m: run_troupe(a, m, T, env)) for m in MODES] + [("pytorch", lambda: run_pytorch(a, T, env))],
        "T")
    cpu = cpu_model()
    print(f"GPT (examples/gpt.toml) at context T, cp {a.cp} as {a.cp} processes, global batch 16, 1 thread per "
          f"rank, samples/s over {a.steps} steps after {a.warmup}, median (min-max) of {a.repeats} alternating runs; "
          f"PyTorch {torch_version} (Ulysses over gloo); {cpu}")
    print()
    print("| T | troupe all-to-all | troupe ring | troupe all-gather | PyTorch Ulysses | troupe all-to-all / PyTorch | "
          "first-step loss troupe / PyTorch |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    bad = False
    rate = lambda xs: f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"
    for T in contexts:
        r = {k: [x["samples_per_s"] for x in runs[T][k]] for k in runs[T]}
        lt, lp = runs[T]["all-to-all"][0]["first_loss"], runs[T]["pytorch"][0]["first_loss"]
        bad = bad or abs(lt - lp) > 0.3 or abs(lt - math.log(96)) > 0.6
        print(f"| {T} | {rate(r['all-to-all'])} | {rate(r['ring'])} | {rate(r['all-gather'])} | {rate(r['pytorch'])} | "
              f"**{statistics.median(r['all-to-all']) / statistics.median(r['pytorch']):.2f}** | {lt:.3f} / {lp:.3f} |")
    if bad:
        sys.exit("first-step losses are not both near ln(vocab): the two models differ")


if __name__ == "__main__":
    main()
