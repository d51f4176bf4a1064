#!/usr/bin/env bash
# troupe on a machine without a GPU maps no CUDA library: the binary does not link cuBLAS, NCCL,
# cuDNN or the shared CUDA runtime (kernels/cuda/lazy_library.hpp opens cuBLAS and NCCL at their
# first call; the runtime is linked statically), so `troupe info` stays under 64 MB of resident
# memory (242 MB when it linked them). In a build without CUDA both hold trivially.
set -uo pipefail
troupe=$1
fail=0
linked=$(ldd "$troupe" | grep -oE "lib(cublas|cublasLt|nccl|cudnn|cudart)[^ ]*" | sort -u | tr '\n' ' ')
if [ -n "$linked" ]; then
  echo "FAIL troupe links CUDA libraries at start: $linked"
  fail=1
else
  echo "ok   troupe links no CUDA library at start"
fi
python3 - "$troupe" <<'PY' || fail=1
import resource, subprocess, sys
out = subprocess.run([sys.argv[1], "info"], capture_output=True, text=True)
peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if out.returncode != 0:
    print(f"FAIL troupe info exited {out.returncode}: {out.stderr[-500:]}")
    sys.exit(1)
ok = peak_mib < 64
print(f"{'ok  ' if ok else 'FAIL'} troupe info's peak resident memory {peak_mib:.1f} MiB (limit 64)")
sys.exit(0 if ok else 1)
PY
exit $fail
