#!/usr/bin/env python3
"""The include direction, checked: a file may include only its own layer and the layers below.

Layers, bottom to top (DESIGN: arrows point down only):
  kernels < storage < schedules < comm < actors < stress < cli < examples, bench
Inside actors/ the same rule holds between its parts (ACTOR_LAYERS), bottom to top. Every
project include ("dir/...") of every source under the layers is read; tests/ may include
anything. Prints each upward include and exits 1 if there is one.

  scripts/check_layers.py [root]
"""
import pathlib
import re
import sys

LAYERS = ["kernels", "storage", "schedules", "comm", "actors", "stress", "cli", "examples", "bench"]
# examples and bench both sit on top: neither includes the other.
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["bench"] = RANK["examples"]

# actors/, bottom to top. A part named by a file ("job/train_config") takes that file's header and
# source; every other file of a folder is the folder's part.
ACTOR_LAYERS = [
    # plain data and engines with no actor: the job's configuration, the step record, the
    # in-process device group (a comm engine that lives beside the collectives it serves)
    ["job/membership", "job/train_config", "job/job_extras", "job/step_trace", "job/teardown_guard", "collective/local_device_group"],
    # what every actor shares: the messages and how a failure is described
    ["messages", "actor_failure"],
    # planning and memory: the plan of a job and what it will hold where (the gradient buckets'
    # layout, dp_buckets, is planning data that the stage and the plan share)
    ["job/prepared_job", "job/checkpointing", "stage/dp_buckets", "job/job_plan", "job/memory_plan",
     "job/job_forecast", "job/accelerators"],
    # where a running job's observations go: metrics, the measured timeline, the job's outputs
    # (below the actors: the coordinator writes them)
    ["job/metrics_log", "coordinator/pipeline_timing", "job/job_outputs", "job/run_curves", "job/server_report",
     "job/prometheus_file", "job/slow_rank", "job/slow_link", "job/membership_plan"],
    # the actors by role, and actors.hpp, which spawns them
    ["actors", "store", "data", "collective", "optimizer", "server", "stage", "coordinator", "process/net_actors",
     "process/middleman_link"],
    # wiring a mesh's actors across devices and processes (the job hub joins the processes)
    ["job/pipeline_links", "job/mesh_links", "job/mesh_job", "process/net_hub"],
    # running a job: the one runner body (run_job), its placements, the actor system's configuration
    ["job/runtime_config", "job/run_job", "job/training_job", "process/process_job", "process/process_parts",
     "process/process_plumbing", "process/process_zero", "process/process_worker"],
    # measuring the machine by running jobs on it (--forecast's calibration)
    ["job/machine_calibration"],
]

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCES = (".hpp", ".cpp", ".h", ".cu", ".cuh")


def actor_part(rel):
    """rel: a path under actors/ without the suffix, e.g. 'job/mesh_job' or 'stage/stage'."""
    for i, layer in enumerate(ACTOR_LAYERS):
        if rel in layer:
            return i
    folder = rel.split("/")[0] if "/" in rel else rel
    for i, layer in enumerate(ACTOR_LAYERS):
        if folder in layer:
            return i
    return None


def rank_of(path):
    """(layer rank, actor part or None) of a project path like 'actors/job/mesh_job.hpp'."""
    top = path.split("/")[0]
    if top not in RANK:
        return None
    part = None
    if top == "actors":
        rel = path[len("actors/"):].rsplit(".", 1)[0]
        part = actor_part(rel)
    return RANK[top], part


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    bad = []
    unplaced = []
    for top in LAYERS:
        for f in sorted((root / top).rglob("*")):
            if f.suffix not in SOURCES or "build" in f.relative_to(root).parts[:1]:
                continue
            rel = f.relative_to(root).as_posix()
            mine = rank_of(rel)
            if top == "actors" and mine[1] is None:
                unplaced.append(rel)
                continue
            for inc in INCLUDE.findall(f.read_text(errors="replace")):
                theirs = rank_of(inc)
                if theirs is None:
                    continue  # a system or third-party header, or a sibling by its bare name
                if theirs[0] > mine[0] or (theirs[0] == mine[0] == RANK["actors"] and theirs[1] is not None
                                           and theirs[1] > mine[1]):
                    bad.append(f"{rel}: includes {inc}, a layer above its own")
                if top in ("examples", "bench") and inc.split("/")[0] in ("examples", "bench") and \
                        inc.split("/")[0] != top:
                    bad.append(f"{rel}: includes {inc}, a sibling top layer")
    for u in unplaced:
        print(f"{u}: in no layer of actors/ (add it to ACTOR_LAYERS in scripts/check_layers.py)")
    for b in bad:
        print(b)
    if bad or unplaced:
        print(f"check_layers: {len(bad)} upward include(s), {len(unplaced)} unplaced file(s)")
        return 1
    print("check_layers: every include points down or sideways")
    return 0


if __name__ == "__main__":
    sys.exit(main())
