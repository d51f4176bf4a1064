#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU: each CUDA op against its CPU reference
# (tests/kernels/cuda_ops.test.cpp) and the NCCL group's collectives against CPU sums
# (tests/comm/nccl_group.test.cpp; its cases over several members need as many GPUs), and the
# stage's CUDA queue signalling completions from the stream (tests/kernels/cuda_queue.test.cpp),
# the caching device allocator, pinned host memory and copies (tests/kernels/cuda_device_alloc.test.cpp),
# GPT and MLP layer stacks on the GPU against the CPU's (tests/kernels/cuda_layers.test.cpp), and
# whole --device jobs against the CPU's (tests/actors/gpu_job.test.cpp: pipelines, replicas, ZeRO,
# bf16, tensor parallelism alone and in dp x tp and pp x tp meshes; with two GPUs or more,
# data-parallel groups, ZeRO shards and tensor-parallel pairs over NCCL in the job);
# the list is bench/gpu/tests.list; a GPU job over four processes (troupe train --nodes 4
# --device cuda) against the same job on the CPU, and with two GPUs or more --backend nccl jobs
# over two (dp 2 reducing on the GPUs, pp 2 passing its tensors over NCCL links); then times troupe's GPT step against PyTorch's on the same GPU
# (gpt_step.jsonl, and the ratios in the summary), and the attention alone against PyTorch's
# (attention.jsonl). Writes
# under $OUT (default ./gpu-out): gpu.txt (nvidia-smi), build.log, one NAME.log per test binary
# (its full output), summary.txt (one line a test binary: passed, failed or skipped, and the gtest
# totals, then each failed case). Exits non-zero when a test fails or nothing ran.
#
# Where the project's dependencies are installed it configures build-gpu/ and builds the CUDA
# targets there (ccache when present). The lent H200 machines have nvcc, CMake and ninja but not
# CAF, GTest or OpenBLAS, and cannot install them; there it runs the binary that
# bench/gpu/pack.sh built on the development machine and put in .gpu-pack/ (carry that folder).
# Takes a few minutes of GPU time (the GPT steps most of it); the build, where it happens, a few more.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"

nvidia-smi >"$out/gpu.txt" 2>&1 || echo "nvidia-smi failed" >>"$out/gpu.txt"

tests=$(grep -v "^#" bench/gpu/tests.list)
step_bench=bench/gpt_step_gpu
attention_bench=bench/attention_step_gpu
cli=troupe

# The CUDA libraries the binaries link (cuBLAS, NCCL): the toolkit's, or those of the Python
# packages there.
lib_dir() {
  dirname "$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /usr/local/cuda/targets/ /opt/ /usr/lib/ \
    -name "$1" 2>/dev/null | head -1)" 2>/dev/null
}
cuda_libs="$(lib_dir libcublas.so.13):$(lib_dir libnccl.so.2)"

dir=""
# TROUPE_GPU_USE_PACK=1: the binaries of .gpu-pack/ even where this machine could build.
if [ "${TROUPE_GPU_USE_PACK:-0}" != 1 ] && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_WERROR=ON >"$out/build.log" 2>&1; then
  # shellcheck disable=SC2046
  if cmake --build build-gpu -j "$(nproc)" --target $(for t in $tests $step_bench $attention_bench $cli; do basename "$t"; done) >>"$out/build.log" 2>&1; then
    dir=build-gpu
    echo "build: configured and built here (see build.log)" >>"$summary"
  else
    echo "build: FAILED (see build.log)" >>"$summary"
  fi
elif [ -f .gpu-pack/pack.tar.xz ]; then
  # The binaries and their libraries, unpacked beside each other.
  dir=${TMPDIR:-/tmp}/troupe-gpu-pack
  # Unpacked once a pack (bench/gpu/lease.sh calls this script several times).
  if ! cmp -s .gpu-pack/BUILT "$dir/BUILT" 2>/dev/null; then
    rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf .gpu-pack/pack.tar.xz && cp .gpu-pack/BUILT "$dir/BUILT"
  fi
  why="the project's dependencies are missing here (build.log)"
  [ "${TROUPE_GPU_USE_PACK:-0}" = 1 ] && why="TROUPE_GPU_USE_PACK=1"
  echo "build: $why; running the binaries from .gpu-pack/ ($(cat .gpu-pack/BUILT 2>/dev/null))" >>"$summary"
else
  echo "build: the project's dependencies are missing here (build.log) and there is no .gpu-pack/ (bench/gpu/pack.sh)" >>"$summary"
fi

# compute-sanitizer over every GPU test before anything is timed: memcheck (out-of-bounds and
# misaligned accesses, leaks), racecheck (shared-memory hazards), synccheck (barriers) and
# initcheck (reads of memory never written), one log a tool and test. CUDA calls that fail are
# not findings (--report-api-errors no): the tests provoke some (a missing GPU, an allocation
# too large) and check their errors; a failure the code does not expect fails its test. A finding
# stops the script
# (TROUPE_GPU_KEEP_GOING=1 runs the rest anyway); TROUPE_SANITIZE=0 skips this,
# TROUPE_SANITIZE_ONLY=1 does nothing else, and TROUPE_SANITIZE_TOOLS / TROUPE_SANITIZE_TESTS
# (paths as in tests.list) narrow it.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$dir" ] && [ "${TROUPE_SANITIZE:-1}" != 0 ]; then
  if [ -z "$sanitizer" ]; then
    echo "sanitizer: compute-sanitizer is not on this machine: FAILED" >>"$summary"
    [ "${TROUPE_GPU_KEEP_GOING:-0}" = 1 ] || { cat "$summary"; exit 1; }
  fi
  findings=0
  for tool in ${TROUPE_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    for t in ${TROUPE_SANITIZE_TESTS:-$tests}; do
      name=$(basename "$t")
      bin=$dir/$t
      [ -d "$dir/lib" ] && bin=$dir/$name
      log=$out/sanitize-$tool-$name.log
      extra=()
      [ "$tool" = memcheck ] && extra=(--leak-check no)
      LD_LIBRARY_PATH="$dir/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" timeout "${TROUPE_SANITIZE_TIMEOUT:-600}" \
        "$sanitizer" --tool "$tool" "${extra[@]}" --report-api-errors no --error-exitcode 99 --print-limit 30 \
        --target-processes all \
        "$bin" >"$log" 2>&1
      rc=$?
      case $rc in
        0) verdict=clean ;;
        77) verdict="skipped (no CUDA device)" ;;
        99) verdict="FINDINGS: $(grep -m1 -E '^========= [A-Z]' "$log" | sed 's/^========= //')"; findings=1 ;;
        124) verdict="TIMED OUT after ${TROUPE_SANITIZE_TIMEOUT:-600} s"; findings=1 ;;
        *) verdict="test FAILED under the sanitizer (exit $rc)"; findings=1 ;;
      esac
      echo "sanitize $tool $name: $verdict" >>"$summary"
    done
  done
  if [ $findings = 1 ] && [ "${TROUPE_GPU_KEEP_GOING:-0}" != 1 ]; then
    echo "sanitizer: findings above (sanitize-TOOL-TEST.log): stopped before the tests and the timings" >>"$summary"
    cat "$summary"
    exit 1
  fi
fi

if [ "${TROUPE_SANITIZE_ONLY:-0}" = 1 ]; then
  cat "$summary"
  grep -q "^sanitize .*: \(FINDINGS\|TIMED\|test FAILED\)" "$summary" && exit 1
  exit 0
fi

status=1
# TROUPE_GPU_SKIP_TESTS=1: only the timings below (the tests ran in an earlier call).
skip_tests=${TROUPE_GPU_SKIP_TESTS:-0}
[ -n "$dir" ] && [ "$skip_tests" = 1 ] && status=0
if [ -n "$dir" ] && [ "$skip_tests" != 1 ]; then
  status=0
  for t in $tests; do
    name=$(basename "$t")
    bin=$dir/$t
    [ -d "$dir/lib" ] && bin=$dir/$name
    if [ ! -x "$bin" ]; then
      echo "$name: MISSING ($bin)" >>"$summary"
      status=1
      continue
    fi
    LD_LIBRARY_PATH="$dir/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" timeout "${TROUPE_GPU_TEST_TIMEOUT:-600}" "$bin" >"$out/$name.log" 2>&1
    rc=$?
    case $rc in
      0) verdict=passed ;;
      77) verdict="skipped (no CUDA device)"; status=1 ;;
      124) verdict="TIMED OUT after ${TROUPE_GPU_TEST_TIMEOUT:-600} s"; status=1 ;;
      *) verdict="FAILED (exit $rc)"; status=1 ;;
    esac
    echo "$name: $verdict; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/$name.log" | tr '\n' ' ')" >>"$summary"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$out/$name.log" | sort -u >>"$summary"
  done
fi
# GPU jobs over processes of troupe's own launch against the same job on the CPU (losses within
# 1e-3 relative: fp32 on both sides, sums in other orders); the corpus is this README. 12 steps:
# the 19th step of this job is a loss spike that AdamW at lr 3e-3 makes ill-conditioned (two CPU
# runs on different machines, rounding apart, read 3.90 and 3.97 there; the H200 3.45), while the
# first 16 agree within 2e-5 relative.
# over_processes NAME FLAGS... -- GPU_FLAGS...: runs the job with FLAGS on the CPU and with
# GPU_FLAGS added on the GPUs, one line in the summary.
over_processes() {
  local name=$1; shift
  local flags=() gpu_flags=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  gpu_flags=("$@")
  local bin=$dir/$cli
  [ -d "$dir/lib" ] && bin=$dir/$(basename "$cli")
  local job=(train --model gpt --corpus README.md --micro-batches 2 --max-steps 12 --batch-size 8)
  local log=$out/$name.log
  : >"$log"
  if LD_LIBRARY_PATH="$dir/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" timeout 120 "$bin" "${job[@]}" "${flags[@]}" --out "$out/$name-cpu" >>"$log" 2>&1 &&
    LD_LIBRARY_PATH="$dir/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" timeout 120 "$bin" "${job[@]}" "${flags[@]}" "${gpu_flags[@]}" --out "$out/$name-gpu" >>"$log" 2>&1 &&
    python3 - "$out/$name-cpu/metrics.jsonl" "$out/$name-gpu/metrics.jsonl" "$name: troupe ${flags[*]} ${gpu_flags[*]}" >>"$summary" <<'PY'
import json, sys
def losses(path):
    return [r["loss"] for r in map(json.loads, open(path)) if "step" in r and "loss" in r]
cpu, gpu = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(g - c) / c for c, g in zip(cpu, gpu)) if cpu and len(cpu) == len(gpu) else float("inf")
print(f"{sys.argv[3]}: {len(gpu)} steps, worst loss difference from the CPU's "
      f"{worst:.2e} relative: {'passed' if worst <= 1e-3 else 'FAILED'}")
sys.exit(0 if worst <= 1e-3 else 1)
PY
  then :; else
    echo "$name: troupe ${flags[*]} ${gpu_flags[*]}: FAILED ($name.log)" >>"$summary"
    status=1
  fi
}
if [ -n "$dir" ] && [ "$skip_tests" != 1 ]; then
  # dp 2 x pp 2 over four processes, every rank on cuda:0: the buckets through pinned host memory
  # and the TCP rings, the activations and their gradients between processes as host copies.
  over_processes nodes --dp 2 --pp 2 --nodes 4 -- --device cuda
  # With two GPUs or more, --backend nccl: the replicas' buckets reduced on the GPUs by an NCCL
  # communicator across the two processes; then the two stages of a pipeline in two processes,
  # their activations and gradients over NCCL links between the GPUs.
  if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
    over_processes nccl --dp 2 --nodes 2 -- --backend nccl --device cuda:0,cuda:1
    over_processes ncclpp --pp 2 --nodes 2 -- --backend nccl --device cuda:0,cuda:1
  else
    echo "nccl, ncclpp: --backend nccl over two processes needs two GPUs: not run" >>"$summary"
  fi
fi
# The GPT step against PyTorch's on the same GPU (bench/gpu/gpt_step.cpp, gpt_step_torch.py):
# GPT-2 small's shape (124M with an untied head), batch 8 x 1024 tokens; one JSON line each.
# TROUPE_GPU_TIMINGS=0 skips this and the attention's timing (a short device lease spent on the
# tests alone).
timings=${TROUPE_GPU_TIMINGS:-1}
[ "$timings" = 0 ] && echo "timings: not run (TROUPE_GPU_TIMINGS=0)" >>"$summary"
if [ -n "$dir" ] && [ "$timings" != 0 ]; then
  bin=$dir/$step_bench
  [ -d "$dir/lib" ] && bin=$dir/$(basename "$step_bench")
  : >"$out/gpt_step.jsonl"
  : >"$out/gpt_step.log"
  for precision in f32 bf16; do
    if LD_LIBRARY_PATH="$dir/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" timeout 200 "$bin" --matmul-precision $precision \
      >>"$out/gpt_step.jsonl" 2>>"$out/gpt_step.log"; then
      echo "gpt_step (troupe, $precision matmuls): $(tail -1 "$out/gpt_step.jsonl")" >>"$summary"
    else
      echo "gpt_step (troupe, $precision matmuls): FAILED (gpt_step.log)" >>"$summary"
      status=1
    fi
  done
  if timeout 300 python3 bench/gpu/gpt_step_torch.py >>"$out/gpt_step.jsonl" 2>>"$out/gpt_step.log"; then
    grep '"pytorch"' "$out/gpt_step.jsonl" | sed 's/^/gpt_step (PyTorch): /' >>"$summary"
    python3 - "$out/gpt_step.jsonl" >>"$summary" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [r for r in rows if r["peer"] == "troupe"]
for r in rows:
    if r["peer"] != "pytorch":
        continue
    for o in ours:
        print(f"gpt_step ratio: troupe {o['precision']} step / PyTorch {r['precision']} step = "
              f"{o['step_ms'] / r['step_ms']:.2f} (MFU {o['mfu']:.3f} vs {r['mfu']:.3f})")
PY
  else
    echo "gpt_step (PyTorch): FAILED (gpt_step.log)" >>"$summary"
    status=1
  fi
fi
# The attention alone against PyTorch's scaled_dot_product_attention on the same shape (GPT-2
# small's: batch 8, T 1024, 12 heads of 64): forward and backward ms, one JSON line each.
if [ -n "$dir" ] && [ "$timings" != 0 ]; then
  bin=$dir/$attention_bench
  [ -d "$dir/lib" ] && bin=$dir/$(basename "$attention_bench")
  : >"$out/attention.jsonl"
  if LD_LIBRARY_PATH="$dir/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" timeout 120 "$bin" >>"$out/attention.jsonl" 2>"$out/attention.log" &&
    timeout 120 python3 bench/gpu/attention_torch.py >>"$out/attention.jsonl" 2>>"$out/attention.log"; then
    python3 - "$out/attention.jsonl" >>"$summary" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = next(r for r in rows if r["peer"] == "troupe")
print(f"attention (troupe fp32): forward {ours['fwd_ms']} ms, backward {ours['bwd_ms']} ms")
for r in rows:
    if r["peer"] == "pytorch":
        print(f"attention ratio: troupe fp32 / PyTorch {r['version']} {r['precision']}: forward "
              f"{ours['fwd_ms'] / r['fwd_ms']:.2f}, backward {ours['bwd_ms'] / r['bwd_ms']:.2f} "
              f"(PyTorch {r['fwd_ms']} / {r['bwd_ms']} ms)")
PY
  else
    echo "attention: FAILED (attention.log)" >>"$summary"
    status=1
  fi
fi
cat "$summary"
exit $status
