#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU: each CUDA op against its CPU reference
# (tests/kernels/cuda_ops.test.cpp). Writes under $OUT (default ./gpu-out): gpu.txt (nvidia-smi),
# build.log, cuda_ops.log (the test's full output), summary.txt (one line a test binary: passed,
# failed or skipped, and the gtest totals). Exits non-zero when a test fails or nothing ran.
#
# Where the project's dependencies are installed it configures build-gpu/ and builds the CUDA
# targets there (ccache when present). The lent H200 machines have nvcc, CMake and ninja but not
# CAF, GTest or OpenBLAS, and cannot install them; there it runs the binary that
# bench/gpu/pack.sh built on the development machine and put in .gpu-pack/ (carry that folder).
# Takes well under a minute of GPU time; the build, where it happens, a few minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"

nvidia-smi >"$out/gpu.txt" 2>&1 || echo "nvidia-smi failed" >>"$out/gpu.txt"

# The CUDA libraries the binary links: the toolkit's, or those of the Python packages there.
cuda_libs=$(dirname "$(find /usr/local/cuda/ /usr/local/cuda/lib64/ /usr/local/cuda/targets/ /opt/ /usr/lib/ \
  -name 'libcublas.so.13' 2>/dev/null | head -1)" 2>/dev/null)

bin=""
if cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTROUPE_WERROR=ON >"$out/build.log" 2>&1; then
  if cmake --build build-gpu -j "$(nproc)" --target kernels_cuda_ops_test >>"$out/build.log" 2>&1; then
    bin=build-gpu/tests/kernels/kernels_cuda_ops_test
    echo "build: configured and built here (see build.log)" >>"$summary"
  else
    echo "build: FAILED (see build.log)" >>"$summary"
  fi
elif [ -x .gpu-pack/kernels_cuda_ops_test ]; then
  bin=.gpu-pack/kernels_cuda_ops_test
  echo "build: the project's dependencies are missing here (build.log); running the binary from .gpu-pack/ ($(cat .gpu-pack/BUILT 2>/dev/null))" >>"$summary"
else
  echo "build: the project's dependencies are missing here (build.log) and there is no .gpu-pack/ (bench/gpu/pack.sh)" >>"$summary"
fi

status=1
if [ -n "$bin" ]; then
  LD_LIBRARY_PATH="$PWD/.gpu-pack/lib:${cuda_libs}:${LD_LIBRARY_PATH:-}" "$bin" >"$out/cuda_ops.log" 2>&1
  rc=$?
  case $rc in
    0) verdict=passed; status=0 ;;
    77) verdict="skipped (no CUDA device)" ;;
    *) verdict="FAILED (exit $rc)" ;;
  esac
  echo "kernels_cuda_ops_test: $verdict; $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/cuda_ops.log" | tr '\n' ' ')" >>"$summary"
  grep -E '^\[  FAILED  \] CudaOps' "$out/cuda_ops.log" | sort -u >>"$summary"
fi
cat "$summary"
exit $status
