#!/usr/bin/env python3
"""GPT training throughput over dp x pp x tp meshes, troupe against PyTorch's DTensor tensor
parallel (bench/pytorch_gpt.py), in one run.

Both train examples/gpt.toml's GPT (vocabulary from the corpus, T 64, C 128, 4 heads, 4 blocks,
AdamW lr 3e-3, global batch 16) on the same corpus, one thread per rank, for the same steps; the
first --warmup steps are not timed. For each mesh the two run alternately, --repeats times, and
the table holds medians (with the range). troupe runs every rank as a thread of one process
(tp groups in-process); PyTorch runs every rank as a process with gloo. Also prints troupe's
tensor-parallel collective share (its log line "tensor-parallel collectives: X% of the ranks'
compute time") and checks that the first-step losses of both are close to each other.

    bench/tp_vs_pytorch.py [--build build] [--steps 60] [--warmup 5] [--repeats 3] [--meshes 1x1x1,1x1x2,...]
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MESHES = "1x1x1,1x1x2,1x1x4,2x1x2,1x2x2,2x2x2"  # dp x pp x tp


def troupe_rate(metrics, warmup, steps, batch):
    """Samples/s over steps [warmup, warmup + steps) from metrics.jsonl. Each step line's rate is
    taken over the 10 steps ending there, so the lines at warmup + 9, + 19, ... tile the timed steps."""
    rates = {}
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if "samples_per_s" in r and "step" in r:
                rates[r["step"]] = r
    seconds = sum(10 * batch / rates[n]["samples_per_s"] for n in range(warmup + 9, warmup + steps, 10))
    return steps * batch / seconds, rates[0]["loss"]


def run_troupe(a, mesh, env, nodes=1, threads=1):
    dp, pp, tp = mesh
    out = tempfile.mkdtemp(prefix="troupe-tp-bench-")
    cmd = [os.path.join(a.build, "troupe"), "train", "--config", os.path.join(ROOT, "examples", "gpt.toml"),
           "--dp", str(dp), "--pp", str(pp), "--tp", str(tp), "--max-steps", str(a.warmup + a.steps),
           "--threads", str(threads), "--out", out, "--no-progress"]
    if nodes > 1:  # one process per rank on this machine: the tp groups are TCP rings, as PyTorch's gloo groups
        cmd += ["--nodes", str(nodes)]
    if pp > 1:
        cmd += ["--micro-batches", str(a.micro_batches), "--schedule", a.schedule]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    log = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(f"troupe failed ({' '.join(cmd)}):\n{log}")
    rate, first_loss = troupe_rate(os.path.join(out, "metrics.jsonl"), a.warmup, a.steps, a.batch_size)
    share = re.search(r"tensor-parallel collectives: ([0-9.]+)% of the ranks' compute time", log)
    vocab = re.search(r"vocab=(\d+)", log)
    return {"samples_per_s": rate, "first_loss": first_loss, "tp_share": float(share.group(1)) if share else None,
            "vocab": int(vocab.group(1)), "out": out}


def run_pytorch(a, mesh, env, threads=1):
    dp, pp, tp = mesh
    cmd = [a.python, os.path.join(HERE, "pytorch_gpt.py"), "--dp", str(dp), "--pp", str(pp), "--tp", str(tp),
           "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch-size", str(a.batch_size),
           "--threads", str(threads)]
    if pp > 1:
        cmd += ["--micro-batches", str(a.micro_batches), "--schedule", a.schedule]
    return run_pytorch_peer(cmd, env)


def peer_arguments(ap, steps):
    """The options every troupe-against-PyTorch GPT bench takes."""
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"))
    ap.add_argument("--steps", type=int, default=steps, help="timed steps, a multiple of 10")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)


def checked_arguments(ap):
    a = ap.parse_args()
    a.batch_size = 16  # examples/gpt.toml's
    if a.steps % 10 or a.warmup < 1:
        sys.exit("--steps must be a multiple of 10 and --warmup at least 1 (troupe's rate windows are 10 steps)")
    return a


def alternating_runs(repeats, cases, runners, label):
    """runners(case): [(name, fn)], fn() giving a run's dict. Each repeat runs every case's runners,
    in reverse order on odd repeats; returns ({case: {name: [runs]}}, PyTorch's version)."""
    runs = {case: {} for case in cases}
    torch_version = "?"
    for rep in range(repeats):
        for case in cases:
            order = runners(case)
            for name, fn in (order if rep % 2 == 0 else order[::-1]):
                r = fn()
                runs[case].setdefault(name, []).append(r)
                torch_version = r.get("torch", torch_version)
                print(f"[{rep + 1}/{repeats}] {label} {case} {name}: {r['samples_per_s']:.1f} samples/s, first loss "
                      f"{r['first_loss']:.4f} (load average {open('/proc/loadavg').read().split()[0]})",
                      file=sys.stderr, flush=True)
    return runs, torch_version


def cpu_model():
    return next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")


def run_pytorch_peer(cmd, env):
    """Runs bench/pytorch_gpt.py and returns its JSON line, with first_loss added."""
    for attempt in range(3):  # its gloo ranks have aborted now and then; such a run is repeated, and said so
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode == 0:
            break
        print(f"PyTorch peer failed (attempt {attempt + 1}; {' '.join(cmd)}):\n{p.stderr[-3000:]}", file=sys.stderr)
    else:
        sys.exit("PyTorch peer failed three times")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["first_loss"] = r["losses"][0]
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=os.path.join(ROOT, ".venv-bench", "bin", "python"),
                    help="interpreter with PyTorch from PyPI (scripts/setup.sh bench installs it)")
    ap.add_argument("--steps", type=int, default=60, help="timed steps, a multiple of 10")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--micro-batches", type=int, default=4, help="per replica, for meshes with pp > 1")
    ap.add_argument("--schedule", choices=("1f1b", "gpipe"), default="1f1b")
    ap.add_argument("--meshes", default=MESHES, help="dp x pp x tp, comma-separated")
    ap.add_argument("--no-processes", action="store_true",
                    help="skip troupe's runs with one process per rank (--nodes), keep the in-process ones")
    ap.add_argument("--json", help="also write every run's numbers here")
    a = ap.parse_args()
    a.batch_size = 16  # examples/gpt.toml's
    if a.steps % 10 or a.warmup < 1:
        sys.exit("--steps must be a multiple of 10 and --warmup at least 1 (troupe's rate windows are 10 steps)")
    meshes = [tuple(int(v) for v in m.split("x")) for m in a.meshes.split(",")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = {m: {"troupe": [], "troupe_procs": [], "pytorch": []} for m in meshes}
    torch_version = "?"
    for rep in range(a.repeats):
        for m in meshes:
            # alternate which peer goes first, so drift in the machine's load falls on both alike
            order = [("troupe", run_troupe), ("pytorch", run_pytorch)]
            if m[0] * m[1] * m[2] > 1 and not a.no_processes:
                order.insert(1, ("troupe_procs", lambda a, m, env: run_troupe(a, m, env, nodes=m[0] * m[1] * m[2])))
            for name, fn in (order if rep % 2 == 0 else order[::-1]):
                r = fn(a, m, env)
                runs[m][name].append(r)
                torch_version = r.get("torch", torch_version)
                print(f"[{rep + 1}/{a.repeats}] {'x'.join(map(str, m))} {name}: {r['samples_per_s']:.1f} samples/s, "
                      f"first loss {r['first_loss']:.4f}" +
                      (f", tp share {r['tp_share']:.1f}%" if r.get("tp_share") is not None else "") +
                      f" (load average {open('/proc/loadavg').read().split()[0]})",
                      file=sys.stderr, flush=True)

    def med(xs):
        return statistics.median(xs)

    vocab = runs[meshes[0]]["troupe"][0]["vocab"]
    print(f"GPT vocab {vocab}, T 64, C 128, 4 heads, 4 blocks, AdamW lr 3e-3, global batch 16, 1 thread per rank; "
          f"pp meshes: {a.schedule} with {a.micro_batches} microbatches per replica; samples/s over {a.steps} steps "
          f"after {a.warmup} warm-up steps, median (min-max) of {a.repeats} alternating runs; PyTorch {torch_version}")
    print()
    print("| mesh dp×pp×tp | ranks | troupe, 1 process | troupe, a process per rank | PyTorch DTensor, gloo | "
          "troupe / PyTorch | troupe (processes) / PyTorch | troupe TP collective share, 1 process / processes | "
          "first-step loss troupe / PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    bad = []
    for m in meshes:
        t, n, p = runs[m]["troupe"], runs[m]["troupe_procs"], runs[m]["pytorch"]
        ts, ns, ps = ([r["samples_per_s"] for r in x] for x in (t, n, p))

        def rate(xs):
            return f"{med(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})" if xs else "—"

        def share(rs):
            xs = [r["tp_share"] for r in rs if r["tp_share"] is not None]
            return f"{med(xs):.0f}% ({min(xs):.0f}–{max(xs):.0f})" if xs else "—"
        ratio_n = f"**{med(ns) / med(ps):.2f}**" if ns else "—"
        lt, lp = t[0]["first_loss"], p[0]["first_loss"]
        if abs(lt - lp) > 0.3 or abs(lp - math.log(vocab)) > 0.5:
            bad.append(m)
        print(f"| {'×'.join(map(str, m))} | {m[0] * m[1] * m[2]} | {rate(ts)} | {rate(ns)} | {rate(ps)} | "
              f"**{med(ts) / med(ps):.2f}** | {ratio_n} | {share(t)} / {share(n)} | {lt:.3f} / {lp:.3f} |")
    print()
    firsts = ", ".join(f"{runs[m]['pytorch'][0]['first_loss']:.5f}" for m in meshes)
    print(f"ln(vocab) = {math.log(vocab):.3f}; PyTorch's first-step loss on each mesh (the same everywhere when "
          f"its split is right): {firsts}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"x".join(map(str, m)): v for m, v in runs.items()}, f, indent=1)
    if bad:
        sys.exit(f"first-step losses disagree for meshes {bad}")


if __name__ == "__main__":
    main()
