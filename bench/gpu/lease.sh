#!/usr/bin/env bash
# bench/gpu/run.sh's checks reordered for a short device lease (minutes, not hours): what a user
# would ask first comes first, and each later phase runs only while the lease has time left, so a
# lease that ends early still brings back the most useful part. Phases, each a run.sh call with its
# own folder under $OUT:
#   tests/              every GPU test binary and the four-process job, no sanitizer, no timings
#   sanitize-TOOL/      compute-sanitizer's four tools over the kernel-level tests (the jobs'
#                       kernels are these), then sanitize-jobs/: the four over the job tests
#   timings/            the GPT step and the attention against PyTorch
# TROUPE_LEASE_PHASES narrows them (default "tests sanitize-kernels sanitize-jobs timings");
# then packs every log into lease-logs.tgz, so that all of it comes back from the device tool.
# TROUPE_LEASE_S (default 540) is the whole budget in seconds; a phase starts only with at least
# its own timeout left. Reads .gpu-pack/ where the machine cannot build (bench/gpu/pack.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
budget=${TROUPE_LEASE_S:-540}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
# phase NAME NEEDS_S ENV...: run.sh with ENV under $out/NAME, when NEEDS_S seconds are left.
phase() {
  local name=$1 needs=$2; shift 2
  if [ "$(left)" -lt "$needs" ]; then
    echo "$name: not run ($(left) s of the lease left, needs $needs)" >>"$out/lease.txt"
    return
  fi
  local t0=$SECONDS
  env "$@" OUT="$out/$name" timeout "$(left)" bash bench/gpu/run.sh >/dev/null 2>&1
  echo "$name: exit $? in $((SECONDS - t0)) s" >>"$out/lease.txt"
  sed "s/^/  /" "$out/$name/summary.txt" >>"$out/lease.txt" 2>/dev/null
}
: >"$out/lease.txt"
[ -f .gpu-pack/pack.tar.xz ] && export TROUPE_GPU_USE_PACK=1
kernel_tests="tests/kernels/kernels_cuda_ops_test tests/kernels/kernels_cuda_queue_test
  tests/kernels/kernels_cuda_device_alloc_test tests/kernels/kernels_cuda_layers_test tests/comm/comm_nccl_group_test"
wanted() { case " ${TROUPE_LEASE_PHASES:-tests sanitize-kernels sanitize-jobs timings} " in *" $1 "*) return 0 ;; esac; return 1; }
wanted tests && phase tests 60 TROUPE_SANITIZE=0 TROUPE_GPU_TIMINGS=0 TROUPE_GPU_TEST_TIMEOUT=150
if wanted sanitize-kernels; then
  for tool in memcheck racecheck synccheck initcheck; do
    phase "sanitize-$tool" 60 TROUPE_SANITIZE_ONLY=1 TROUPE_GPU_KEEP_GOING=1 TROUPE_SANITIZE_TOOLS=$tool \
      TROUPE_SANITIZE_TIMEOUT=60 "TROUPE_SANITIZE_TESTS=$kernel_tests"
  done
fi
# The jobs are small (a few thousand parameters, 20 steps): every case under every tool.
wanted sanitize-jobs && phase sanitize-jobs 120 TROUPE_SANITIZE_ONLY=1 TROUPE_GPU_KEEP_GOING=1 \
  TROUPE_SANITIZE_TIMEOUT=120 TROUPE_SANITIZE_TESTS=tests/actors/actors_gpu_job_test
wanted timings && phase timings 150 TROUPE_SANITIZE=0 TROUPE_GPU_TIMINGS=1 TROUPE_GPU_SKIP_TESTS=1
# One archive of every log (a device call brings back only a few files), beside lease.txt.
(cd "$out" && tar -czf lease-logs.tgz --exclude=lease.txt --exclude=lease-logs.tgz ./* &&
  find . -mindepth 1 -maxdepth 1 ! -name lease.txt ! -name lease-logs.tgz -exec rm -rf {} +)
cat "$out/lease.txt"
