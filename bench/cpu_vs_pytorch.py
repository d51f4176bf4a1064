#!/usr/bin/env python3
"""CPU training speed, troupe against PyTorch (the PyPI release in .venv-bench), side by side.

One table for issue 18: the MLP (784-256-256-10, batch 128, AdamW, --epochs) and the GPT
(examples/gpt.toml, --steps timed after --warmup) at 1 and 2 threads; the GPT as two 1-thread
pipeline stages (--pp 2 --micro-batches 4) against PyTorch on 2 threads; and data parallelism,
`--dp 2` with one thread per rank, against PyTorch DDP over gloo with 2 processes of 1 thread
(the MLP's under torch.distributed.run, the GPT's from bench/pytorch_gpt.py). Every row runs the
two peers alternately, --repeats times, and reports medians with the load average seen. It also
runs build/bench/sgemm_bound and gives the GPT's GFLOP/s at 1 thread as a fraction of sgemm's, and
prints the CPU model and what computes on each side (troupe's GEMM library and OpenBLAS kernels,
PyTorch's MKL / oneDNN and CPU capability).

    bench/cpu_vs_pytorch.py [--build build] [--repeats 3] [--epochs 5] [--steps 60] [--warmup 5] [--only mlp|gpt]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from types import SimpleNamespace

import mlp_vs_pytorch
import tp_vs_pytorch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load():
    return float(open("/proc/loadavg").read().split()[0])


def mlp_rows(a):
    def ns(threads):
        return SimpleNamespace(build=a.build, epochs=a.epochs, threads=threads, python=a.python)
    return [
        ("MLP 784-256-256-10, batch 128, AdamW, %d epochs" % a.epochs, 1, "samples/s",
         lambda env: mlp_vs_pytorch.run_troupe(ns(1), env)["samples_per_s"],
         lambda env: mlp_vs_pytorch.run_pytorch(ns(1), env)["samples_per_s"]),
        ("same", 2, "samples/s",
         lambda env: mlp_vs_pytorch.run_troupe(ns(2), env)["samples_per_s"],
         lambda env: mlp_vs_pytorch.run_pytorch(ns(2), env)["samples_per_s"]),
        ("same, `--dp 2` (1 thread each) / DDP gloo, 2 processes", 2, "samples/s",
         lambda env: mlp_vs_pytorch.run_troupe(ns(1), env, ["--dp", "2"])["samples_per_s"],
         lambda env: mlp_vs_pytorch.run_pytorch(ns(1), env, ranks=2)["samples_per_s"]),
    ]


def gpt_rows(a):
    g = SimpleNamespace(build=a.build, python=a.python, steps=a.steps, warmup=a.warmup, batch_size=16,
                        micro_batches=4, schedule="1f1b")

    def troupe(mesh, threads):
        return lambda env: tp_vs_pytorch.run_troupe(g, mesh, env, threads=threads)["samples_per_s"]

    def pytorch(mesh, threads):
        return lambda env: tp_vs_pytorch.run_pytorch(g, mesh, env, threads=threads)["samples_per_s"]
    return [
        ("GPT (`examples/gpt.toml`: T 64, C 128, 4 heads, 4 blocks, batch 16)", 1, "sequences/s",
         troupe((1, 1, 1), 1), pytorch((1, 1, 1), 1)),
        ("same", 2, "sequences/s", troupe((1, 1, 1), 2), pytorch((1, 1, 1), 2)),
        ("same, `--pp 2 --micro-batches 4` (two 1-thread stages) / PyTorch on 2 threads", 2, "sequences/s",
         troupe((1, 2, 1), 1), pytorch((1, 1, 1), 2)),
        ("same, `--dp 2` (1 thread each) / DDP gloo, 2 processes", 2, "sequences/s",
         troupe((2, 1, 1), 1), pytorch((2, 1, 1), 1)),
    ]


def sgemm_bound(a, env):
    """build/bench/sgemm_bound's table: {threads: (square GFLOP/s, the GPT step's GEMMs GFLOP/s on OpenBLAS's
    threads, the same as the kernels block them on the GEMM library in use)}, and the GFLOP per step."""
    p = subprocess.run([os.path.join(a.build, "bench", "sgemm_bound")], env=env, capture_output=True, text=True,
                       check=True)
    sys.stderr.write(p.stdout)
    flops = float(re.search(r"= ([0-9.]+) GFLOP", p.stdout).group(1))
    in_use = re.search(r"the kernels' GEMM library here: (\w+)", p.stdout).group(1)
    header = next(line for line in p.stdout.splitlines() if line.startswith("| threads"))
    libraries = re.findall(r"as the kernels run them on (\w+)", header)
    col = 4 + 2 * libraries.index(in_use) + 1  # the in-use library's GFLOP/s
    rows = {}
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows[int(cells[0])] = (float(cells[1]), float(cells[3]), float(cells[col]))
    return rows, flops, p.stdout


def kernels_of_both(a, env):
    """The CPU model and what computes on each side: troupe's GEMM library and OpenBLAS kernels (`troupe info`),
    PyTorch's BLAS and CPU capability."""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               "unknown CPU")
    info = subprocess.run([os.path.join(a.build, "troupe"), "info"], env=env, capture_output=True, text=True,
                          check=True).stdout
    field = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line)
    gemm = field.get("gemm library", "?")
    ours = f"GEMMs on {field.get('gemm library ' + gemm.split()[0], gemm)}, OpenBLAS kernels {field.get('blas kernels')}"
    torch = subprocess.run([a.python, "-c", "import torch, re; c = torch.__config__.show(); "
                            "m = re.search(r'Math Kernel Library Version ([^ ]+)', c); "
                            "d = re.search(r'MKL-DNN (v[0-9.]+)', c); "
                            "print('MKL ' + m.group(1) if m else 'no MKL', '/ oneDNN ' + d.group(1) if d else '', "
                            "'/ CPU capability', torch.backends.cpu.get_cpu_capability())"],
                           env=env, capture_output=True, text=True, check=True).stdout.strip()
    return cpu, ours, torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"),
                    help="interpreter with PyTorch from PyPI (scripts/setup.sh bench installs it)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60, help="timed GPT steps, a multiple of 10")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", choices=("mlp", "gpt"))
    a = ap.parse_args()
    env = dict(os.environ)
    # PyTorch's MKL/oneDNN take their threads from torch.set_num_threads; OMP_NUM_THREADS=1 keeps
    # a DDP launcher from starting more. troupe picks its OpenBLAS kernels itself.
    env["OMP_NUM_THREADS"] = "1"
    rows = (mlp_rows(a) if a.only != "gpt" else []) + (gpt_rows(a) if a.only != "mlp" else [])
    results = [{"troupe": [], "pytorch": [], "load": []} for _ in rows]
    torch_version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True, check=True).stdout.strip()
    for rep in range(a.repeats):
        for i, (job, threads, unit, t_fn, p_fn) in enumerate(rows):
            order = [("troupe", t_fn), ("pytorch", p_fn)]
            for name, fn in (order if rep % 2 == 0 else order[::-1]):  # drift in load falls on both alike
                results[i]["load"].append(load())
                results[i][name].append(fn(env))
                print(f"[{rep + 1}/{a.repeats}] {job} / {threads} thread(s) {name}: {results[i][name][-1]:.0f} {unit} "
                      f"(load average {results[i]['load'][-1]:.2f})", file=sys.stderr, flush=True)
    bound, flops, _ = sgemm_bound(a, env) if a.only != "mlp" else ({}, 0.0, "")

    cpu, ours, theirs = kernels_of_both(a, env)
    med = statistics.median
    print(f"CPU: {cpu}, {os.cpu_count()} cores; troupe: {ours}; PyTorch: {theirs}")
    print(f"troupe against PyTorch {torch_version} ({a.python}), median of {a.repeats} alternating runs; "
          f"load average over the runs {min(min(r['load']) for r in results):.2f}–{max(max(r['load']) for r in results):.2f}")
    print()
    print("| job | threads | troupe | PyTorch %s | ratio | load average |" % torch_version.split("+")[0])
    print("|---|---:|---:|---:|---:|---:|")
    for (job, threads, unit, _, _), r in zip(rows, results):
        t, p = med(r["troupe"]), med(r["pytorch"])
        print(f"| {job} | {threads} | {t:,.0f} {unit} | {p:,.0f} | **{t / p:.2f}** | "
              f"{min(r['load']):.2f}–{max(r['load']):.2f} |")
    if bound:
        print()
        print(f"GPT FLOPs per step: {flops:.3f} GFLOP (sgemm_bound prints the formula)")
        for (job, threads, unit, _, _), r in zip(rows, results):
            if unit == "sequences/s" and "`--" not in job:  # the single-device rows
                if threads not in bound:
                    continue
                gflops = flops * med(r["troupe"]) / 16
                sq, step, blocked = bound[threads]
                print(f"GPT at {threads} thread(s): {gflops:.1f} GFLOP/s = {gflops / sq:.2f} of sgemm 1024^3 "
                      f"({sq:.1f} GFLOP/s), {gflops / max(step, blocked):.2f} of the step's own GEMMs alone "
                      f"({step:.1f} GFLOP/s on OpenBLAS's threads, {blocked:.1f} in the kernels' blocks)")


if __name__ == "__main__":
    main()
