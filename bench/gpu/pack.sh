#!/usr/bin/env bash
# Builds the GPU tests (bench/gpu/tests.list), the GPT step and the attention alone (bench/gpu/gpt_step.cpp,
# attention_step.cpp) and troupe on this
# (development) machine for bench/gpu/run.sh to run on a GPU machine that lacks the project's
# dependencies: the binaries and the shared libraries they need that such a machine has no copy
# of (OpenBLAS, CAF, spdlog, Cap'n Proto, liburing, CUDA's runtime...), in
# .gpu-pack/ (.gitignore; pass it to the device tool's carry). cuBLAS is too large to carry
# (hundreds of MB), as is NCCL (over 200 MB): both come from the GPU machine's own CUDA 13. RelWithDebInfo for x86-64-v3
# (AVX2, FMA), not Release: Release compiles with -march=native, which could use instructions
# the GPU machine's CPU lacks.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Without the optional peers (Gloo, Open MPI): the GPU checks do not use them, and their
# libraries would only make the pack larger.
cmake -S . -B build-gpu-pack -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DTROUPE_WERROR=ON \
  -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON >/dev/null
bins="$(grep -v "^#" bench/gpu/tests.list) bench/gpt_step_gpu bench/attention_step_gpu troupe"
# shellcheck disable=SC2086
cmake --build build-gpu-pack -j "${TROUPE_JOBS:-2}" --target $(for b in $bins; do basename "$b"; done)
# Staged, then one xz archive (.gpu-pack/pack.tar.xz): unpacked, the binaries and OpenBLAS
# alone pass the 64 MiB a device call may carry.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib"
for b in $bins; do
  bin=build-gpu-pack/$b
  strip -o "$stage/$(basename "$b")" "$bin"
  # Every library it links but the C and C++ runtimes (the GPU machine's own are as new or newer)
  # and the CUDA libraries the GPU machine has (cuBLAS, NCCL, the driver).
  ldd "$bin" | awk '$3 ~ /^\// { print $1, $3 }' | while read -r name path; do
    case $name in
      libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;
      libcublas*|libnccl*|libcuda.so.*) ;;
      *) [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name" ;;
    esac
  done
done
rm -rf .gpu-pack
mkdir -p .gpu-pack
XZ_OPT="-6 -T${TROUPE_JOBS:-2}" tar -C "$stage" -cJf .gpu-pack/pack.tar.xz .
git rev-parse --short HEAD >.gpu-pack/BUILT
du -sh .gpu-pack
