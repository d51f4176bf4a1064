#!/usr/bin/env python3
"""A mixture-of-experts GPT's training throughput, troupe against a plain PyTorch MoE, in one run.

Both train examples/gpt.toml's GPT with every block's MLP a mixture of --experts experts (4C
features each), top --top-k routing renormalized over the k, dropless, with Switch's
load-balancing loss at 0.01 (troupe: --experts E --top-k K; PyTorch: bench/pytorch_gpt.py's
MixtureOfExperts, the token-gather loop every MoE tutorial writes, under DDP over gloo for dp 2;
with expert parallelism, troupe --ep against pytorch_gpt.py --ep's ExpertParallelMoE: experts
shared out over the expert group, tokens to their owners and back by all_to_all_single over
gloo, DDP for the rest and the experts' gradients reduced apart).
One thread per rank, the same steps, the first --warmup untimed; the two run alternately,
--repeats times, and the table holds medians (with the range). Also checks that both start at
a first-step loss near ln(vocab).

    bench/moe_vs_pytorch.py [--build build] [--steps 60] [--warmup 5] [--repeats 3] [--experts 4] [--top-k 2]
                            [--meshes 1,2,2x2]   (dp, or dp x ep)
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


def mesh_of(case):
    dp, _, ep = case.partition("x")
    return int(dp), int(ep or 1)


def run_troupe(a, case, env):
    dp, ep = mesh_of(case)
    out = tempfile.mkdtemp(prefix="troupe-moe-bench-")
    cmd = [os.path.join(a.build, "troupe"), "train", "--config", os.path.join(ROOT, "examples", "gpt.toml"),
           "--experts", str(a.experts), "--top-k", str(a.top_k), "--dp", str(dp), "--ep", str(ep), "--threads", "1",
           "--max-steps", str(a.warmup + a.steps), "--out", out, "--no-progress"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"troupe failed ({' '.join(cmd)}):\n{p.stdout}{p.stderr}")
    rate, first_loss = troupe_rate(os.path.join(out, "metrics.jsonl"), a.warmup, a.steps, a.batch_size)
    return {"samples_per_s": rate, "first_loss": first_loss}


def run_pytorch(a, case, env):
    dp, ep = mesh_of(case)
    cmd = [a.python, os.path.join(HERE, "pytorch_gpt.py"), "--experts", str(a.experts), "--top-k", str(a.top_k),
           "--dp", str(dp), "--ep", str(ep), "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch-size", str(a.batch_size)]
    return run_pytorch_peer(cmd, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    peer_arguments(ap, 60)
    ap.add_argument("--experts", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--meshes", default="1,2,2x2", help="dp, or dp x ep, comma-separated")
    a = checked_arguments(ap)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cases = a.meshes.split(",")
    runs, torch_version = alternating_runs(
        a.repeats, cases,
        lambda case: [("troupe", lambda: run_troupe(a, case, env)), ("pytorch", lambda: run_pytorch(a, case, env))],
        "mesh")
    cpu = cpu_model()
    print(f"MoE GPT (examples/gpt.toml, every block {a.experts} experts top-{a.top_k}, dropless, aux 0.01), "
          f"global batch 16, 1 thread per rank, samples/s over {a.steps} steps after {a.warmup}, median (min-max) "
          f"of {a.repeats} alternating runs; PyTorch {torch_version}; {cpu}")
    print()
    print("| dp (x ep) | troupe | PyTorch (DDP over gloo; with ep, all_to_all_single too) | troupe / PyTorch | "
          "first-step loss troupe / PyTorch |")
    print("|---|---:|---:|---:|---:|")
    bad = False
    for case in cases:
        t, p = ([r["samples_per_s"] for r in runs[case][k]] for k in ("troupe", "pytorch"))
        lt, lp = runs[case]["troupe"][0]["first_loss"], runs[case]["pytorch"][0]["first_loss"]
        bad = bad or abs(lt - lp) > 0.3 or abs(lt - math.log(96)) > 0.6
        rate = lambda xs: f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"
        print(f"| {case.replace('x', ' x ep ')} | {rate(t)} | {rate(p)} | **{statistics.median(t) / statistics.median(p):.2f}** | "
              f"{lt:.3f} / {lp:.3f} |")
    if bad:
        sys.exit("first-step losses are not both near ln(vocab): the two models differ")


if __name__ == "__main__":
    main()
