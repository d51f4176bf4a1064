#!/usr/bin/env python3
"""A GPT step with ZeRO-3 against PyTorch FSDP2 (`fully_shard`, gloo, CPU) at dp 2, and plain DP
against DDP beside them, in one run.

Both train examples/gpt.toml's GPT (T 64, C 128, 4 heads, 4 blocks, AdamW lr 3e-3, global batch
16) on the same corpus, one thread per rank, for the same steps; the first --warmup are not
timed. troupe runs both ranks as threads of one process and, like for like with PyTorch, as two
processes (`--nodes 2`: the gathers and reductions on TCP rings between them) (`--zero 3`, units
of --bucket-mb, about one GPT block each, like FSDP2's one unit per block); PyTorch runs each rank
as a process over gloo (bench/pytorch_gpt.py --fsdp, or DDP). The six runs alternate, --repeats times; the table
holds medians (with the range) and checks that the first-step losses agree.

    bench/zero3_vs_fsdp2.py [--build build] [--steps 60] [--warmup 5] [--repeats 3] [--bucket-mb 1]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from tp_vs_pytorch import run_pytorch_peer, troupe_rate  # noqa: E402  (the TP bench's rate windows and retries)


def run_troupe(a, zero, env, nodes=1):
    out = tempfile.mkdtemp(prefix="troupe-zero3-bench-")
    cmd = [os.path.join(a.build, "troupe"), "train", "--config", os.path.join(ROOT, "examples", "gpt.toml"),
           "--dp", "2", "--zero", str(zero), "--bucket-mb", str(a.bucket_mb), "--max-steps",
           str(a.warmup + a.steps), "--threads", "1", "--out", out, "--no-progress"]
    if nodes > 1:  # one rank per process, its gathers and reductions on TCP rings between them, as PyTorch's are
        cmd += ["--nodes", str(nodes)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"troupe failed ({' '.join(cmd)}):\n{p.stdout + p.stderr}")
    rate, first = troupe_rate(os.path.join(out, "metrics.jsonl"), a.warmup, a.steps, 16)
    return {"samples_per_s": rate, "first_loss": first}


def run_pytorch(a, fsdp, env):
    cmd = [a.python, os.path.join(HERE, "pytorch_gpt.py"), "--dp", "2", "--steps", str(a.steps), "--warmup",
           str(a.warmup), "--batch-size", "16", "--threads", "1"] + (["--fsdp"] if fsdp else [])
    return run_pytorch_peer(cmd, env)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
    ap.add_argument("--steps", type=int, default=60, help="timed steps, a multiple of 10")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    a = ap.parse_args()
    if a.steps % 10 or a.warmup < 1:
        sys.exit("--steps must be a multiple of 10 and --warmup at least 1")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = {k: [] for k in ("zero3", "zero3_procs", "fsdp2", "zero0", "zero0_procs", "ddp")}
    jobs = [("zero3", lambda: run_troupe(a, 3, env)), ("zero3_procs", lambda: run_troupe(a, 3, env, 2)),
            ("fsdp2", lambda: run_pytorch(a, True, env)), ("zero0", lambda: run_troupe(a, 0, env)),
            ("zero0_procs", lambda: run_troupe(a, 0, env, 2)), ("ddp", lambda: run_pytorch(a, False, env))]
    torch_version = "?"
    for rep in range(a.repeats):
        for name, fn in (jobs if rep % 2 == 0 else jobs[::-1]):
            r = fn()
            runs[name].append(r)
            torch_version = r.get("torch", torch_version)
            print(f"[{rep + 1}/{a.repeats}] {name}: {r['samples_per_s']:.1f} samples/s, first loss {r['first_loss']:.4f} "
                  f"(load {open('/proc/loadavg').read().split()[0]})", file=sys.stderr, flush=True)
    med = statistics.median

    def rate(k):
        xs = [r["samples_per_s"] for r in runs[k]]
        return med(xs), f"{med(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})"

    print(f"GPT T 64, C 128, 4 heads, 4 blocks, AdamW lr 3e-3, global batch 16, dp 2, 1 thread per rank; samples/s "
          f"over {a.steps} steps after {a.warmup}, median (min–max) of {a.repeats} alternating runs; troupe units of "
          f"{a.bucket_mb} MiB; PyTorch {torch_version}")
    print()
    print("| sharding | troupe | PyTorch | troupe / PyTorch | first-step loss troupe / PyTorch |")
    print("|---|---:|---:|---:|---:|")
    bad = []
    for t, p, label in (("zero3", "fsdp2", "parameters, gradients, optimizer state (ZeRO-3 / FSDP2 fully_shard), "
                                           "troupe's ranks threads of one process"),
                        ("zero3_procs", "fsdp2", "the same, troupe's ranks 2 processes (--nodes 2), as PyTorch's"),
                        ("zero0", "ddp", "none (plain DP / DDP), troupe's ranks threads of one process"),
                        ("zero0_procs", "ddp", "none (plain DP / DDP), troupe's ranks 2 processes (--nodes 2)")):
        (mt, st), (mp, sp) = rate(t), rate(p)
        lt, lp = runs[t][0]["first_loss"], runs[p][0]["first_loss"]
        if abs(lt - lp) > 0.3:
            bad.append(label)
        print(f"| {label} | {st} | {sp} | **{mt / mp:.2f}** | {lt:.3f} / {lp:.3f} |")
    if bad:
        sys.exit(f"first-step losses disagree: {bad}")


if __name__ == "__main__":
    main()
