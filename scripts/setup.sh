#!/usr/bin/env bash
# Set-up for a fresh Debian 12 machine: installs the Debian packages troupe needs (only those
# missing), configures and builds, then runs what was asked:
#   scripts/setup.sh train   build, then train the default job (MLP on Fashion-MNIST, CPU)
#   scripts/setup.sh test    build, then run the test suite (ctest) but the timing comparisons (label perf)
#   scripts/setup.sh build   build only
#   scripts/setup.sh bench   build, install the peers (PyTorch from PyPI into .venv-bench, Gloo, Open MPI,
#                            fio), run the timing comparisons (ctest -L perf) and bench/
# Runs as root or through sudo; never asks a question (CI has no terminal).
set -euo pipefail
cd "$(dirname "$0")/.."

action=${1:-build}
shift || true
case "$action" in train|test|build|bench) ;; *) echo "usage: $0 train|test|build|bench [args...]" >&2; exit 2 ;; esac

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libcaf-dev liburing-dev capnproto libcapnp-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev libdnnl-dev zlib1g-dev libdeflate-dev
  libtomlplusplus-dev libcli11-dev libssl-dev openssl python3 iproute2
  dataset-fashion-mnist fortunes
  librsvg2-dev
  # Debian's oneDNN CMake config looks for OpenCL and fails without it; the package only
  # recommends it, and recommendations are not installed here.
  ocl-icd-opencl-dev
)
# The MPI and Gloo collective back ends (--backend mpi|gloo) are built and tested where Open MPI
# and Gloo are installed.
[ "$action" = test ] && packages+=(openmpi-bin libopenmpi-dev libgloo-dev)
# troupe stress's report is opened in headless Chromium by its test (tests/cli/stress_report.test.sh).
[ "$action" = test ] && packages+=(chromium)
# --metrics-prom's test reads the file with Prometheus's own parser (tests/cli/metrics_prom.test.sh).
[ "$action" = test ] && packages+=(python3-prometheus-client)
# The PyTorch oracle (tests/oracle/) checks the kernels against Debian's PyTorch; skipped without it.
[ "$action" = test ] && packages+=(python3-torch python3-numpy)
# The benchmarks' peer (PyTorch on CPU) is only needed to run bench/: a current release from PyPI
# in the project's virtual environment (below), not Debian's python3-torch 1.13, which has no
# DTensor tensor parallelism.
[ "$action" = bench ] && packages+=(python3 python3-venv python3-pip)
# Cross-process peers (Gloo, Open MPI) and the wire fuzzer (bench/fuzz/run_frame_fuzzer.sh).
[ "$action" = bench ] && packages+=(libgloo-dev openmpi-bin libopenmpi-dev clang libclang-rt-14-dev)
# The NVMe offload peer (bench/offload_bench runs fio's io_uring engine beside storage/uring_store);
# a program run by the benchmark, not a build dependency.
[ "$action" = bench ] && packages+=(fio)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$action" = bench ]; then
  venv=${TROUPE_BENCH_VENV:-$PWD/.venv-bench}
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  if ! "$venv/bin/python" -c "import torch.distributed.tensor.parallel, numpy" 2>/dev/null; then
    echo "setup: installing PyTorch and NumPy into $venv"
    # PyPI's wheel (it brings CUDA libraries along, some GB; the bench runs it on the CPU).
    "$venv/bin/pip" install -q torch numpy
  fi
  "$venv/bin/python" -c "import torch; print('setup: PyTorch', torch.__version__, 'in', '$venv')"
fi

# ccache keys on paths relative to the checkout, so a fresh clone (as CI makes) reuses the cache.
export CCACHE_BASEDIR=$PWD
build=${TROUPE_BUILD_DIR:-build}
jobs=${TROUPE_JOBS:-$(nproc)}
# TROUPE_CMAKE_ARGS adds configure options (.ci/run sets -DTROUPE_WERROR=ON).
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${TROUPE_CMAKE_ARGS:-}
cmake --build "$build" -j "$jobs"

case "$action" in
  train) exec "$build/troupe" train "$@" ;;
  # The timing comparisons (label perf) need an idle machine: `bench` runs them, `test` does not.
  test) exec ctest --test-dir "$build" --output-on-failure -j "$jobs" -LE perf "$@" ;;
  bench)
    timing=0
    ctest --test-dir "$build" --output-on-failure -L perf || timing=$?
    bench/run_all.sh "$build" "$@"
    exit "$timing" ;;
  build) ;;
esac
