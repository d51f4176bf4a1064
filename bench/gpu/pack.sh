#!/usr/bin/env bash
# Builds the GPU tests (bench/gpu/tests.list) on this (development) machine for bench/gpu/run.sh to run on a GPU
# machine that lacks the project's dependencies: the binary and the shared libraries it needs
# that such a machine has no copy of (OpenBLAS and its Fortran runtime, CUDA's runtime), in
# .gpu-pack/ (.gitignore; pass it to the device tool's carry). cuBLAS is too large to carry
# (hundreds of MB), as is NCCL (over 200 MB): both come from the GPU machine's own CUDA 13. RelWithDebInfo for x86-64-v3
# (AVX2, FMA), not Release: Release compiles with -march=native, which could use instructions
# the GPU machine's CPU lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu-pack -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DTROUPE_WERROR=ON >/dev/null
bins="$(grep -v "^#" bench/gpu/tests.list) bench/gpt_step_gpu"
# shellcheck disable=SC2086
cmake --build build-gpu-pack -j "${TROUPE_JOBS:-2}" --target $(for b in $bins; do basename "$b"; done)
rm -rf .gpu-pack
mkdir -p .gpu-pack/lib
for b in $bins; do
  bin=build-gpu-pack/$b
  strip -o ".gpu-pack/$(basename "$b")" "$bin"
  for lib in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libcudart.so.13; do
    path=$(ldd "$bin" | awk -v l="$lib" '$1 == l { print $3 }')
    [ -n "$path" ] && cp -L "$path" .gpu-pack/lib/
  done
done
git rev-parse --short HEAD >.gpu-pack/BUILT
du -sh .gpu-pack
