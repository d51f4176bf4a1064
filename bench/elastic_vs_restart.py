#!/usr/bin/env python3
"""Time one process failure costs a job: --elastic against --max-restarts (issue 42).

The same job (`troupe train --nodes 3 --dp 3`, the default MLP) loses process 2 to a SIGKILL
(--kill-process 2:AT) once under --elastic (the replica is dropped, the others go on from their
state in memory) and once under --max-restarts 1 (every process starts again from the latest
checkpoint, --checkpoint-every 20, and replays the steps since). Each run's metrics.jsonl is
watched as it is written: the time lost is how long after step F's line (the last logged before
the kill) step F+1's line came, less the median gap between two steps' lines of that run. For
the restart that includes starting the processes, reading the checkpoint and replaying the steps
since it; for the elastic job, the step in flight and the regroup.

  python3 bench/elastic_vs_restart.py [--troupe build/troupe] [--repeats 3]
"""
import argparse, glob, os, statistics, subprocess, sys, tempfile, time

def run(troupe, extra, out, kill_at):
    cmd = [troupe, "train", "--nodes", "3", "--dp", "3", "--hidden", "64,64", "--batch-size", "96",
           "--max-steps", "200", "--epochs", "1", "--eval-batches", "1", "--no-progress", "--peer-timeout", "5",
           "--straggler", "0:10", "--seed", "7", "--kill-process", f"2:{kill_at}", "--out", out] + extra
    log = open(out + ".log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    seen = {}  # step -> wall time its line appeared (the restarted run's line for a replayed step: later)
    offsets = {}
    t0 = time.monotonic()
    while True:
        done = proc.poll() is not None
        for path in glob.glob(os.path.join(out, "metrics.jsonl*")):
            try:  # by inode: a restart moves the first run's file aside (metrics.jsonl.1)
                with open(path) as f:
                    key = os.fstat(f.fileno()).st_ino
                    f.seek(offsets.get(key, 0))
                    data = f.read()
                    data = data[: data.rfind("\n") + 1]
                    offsets[key] = offsets.get(key, 0) + len(data)
            except FileNotFoundError:
                continue
            now = time.monotonic() - t0
            for line in data.splitlines():
                if '"loss"' not in line:
                    continue
                step = int(line.split('"step": ')[1].split(",")[0])
                seen.setdefault(step, []).append(now)
        if done:
            break
        time.sleep(0.002)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}; see {out}.log")
    text = open(out + ".log").read()
    kill_s = None
    for line in text.splitlines():
        if "SIGKILL sent to process 2" in line:
            kill_s = float(line.split("), ")[1].split(" s into")[0])
    firsts = sorted((times[0], step) for step, times in seen.items())
    # The last step logged before the gap the failure made: the largest gap between lines.
    gaps = [(b[0] - a[0], a[1]) for a, b in zip(firsts, firsts[1:])]
    worst, last = max(gaps)
    typical = statistics.median(g for g, _ in gaps)
    # Step last+1's line after the failure (a restart logs replayed steps again: their last time).
    back = max(seen[last + 1]) if len(seen[last + 1]) > 1 else seen[last + 1][0]
    lost = back - min(seen[last]) - typical
    return lost, typical, last, kill_s, "restart 1 of 1" in text

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--troupe", default="build/troupe")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kill-at", type=float, default=1.0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="elastic-bench-")
    rows = {"elastic": [], "restart": []}
    for i in range(a.repeats):
        lost, step_s, last, _, _ = run(a.troupe, ["--elastic"], f"{tmp}/elastic-{i}", a.kill_at)
        rows["elastic"].append((lost, step_s, last))
        ck = f"{tmp}/ckpt-{i}"
        lost, step_s, last, _, restarted = run(a.troupe, ["--max-restarts", "1", "--checkpoint-dir", ck,
                                                          "--checkpoint-every", "20"], f"{tmp}/restart-{i}", a.kill_at)
        if not restarted:
            sys.exit("the --max-restarts run did not restart")
        rows["restart"].append((lost, step_s, last))
        print(f"repeat {i + 1}: elastic lost {rows['elastic'][-1][0]:.3f} s (after step {rows['elastic'][-1][2]}), "
              f"restart lost {lost:.3f} s (after step {last})", flush=True)
    e = statistics.median(r[0] for r in rows["elastic"])
    r = statistics.median(r[0] for r in rows["restart"])
    step = statistics.median(x[1] for x in rows["elastic"] + rows["restart"])
    print(f"\ntime lost to one SIGKILLed process (median of {a.repeats}; a step takes {step * 1e3:.1f} ms):")
    print(f"  --elastic          {e:.3f} s")
    print(f"  --max-restarts 1   {r:.3f} s")
    print(f"  restart / elastic  {r / e:.1f}x")

if __name__ == "__main__":
    main()
