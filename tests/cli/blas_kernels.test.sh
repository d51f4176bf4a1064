#!/usr/bin/env bash
# Every program of the project runs on the same OpenBLAS kernels and GEMM library as `troupe`: a
# test binary and an example (through run_training, as a library user calls it) report the core
# and library `troupe info` names. TROUPE_GEMM switches the library for all of them, and a value
# that names no library stops a job, naming the variable.
# usage: blas_kernels.test.sh TROUPE BLAS_TEST_BINARY EXAMPLE_TRAIN_MLP
set -u
troupe=$1 test_bin=$2 example=$3
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
want=$("$troupe" info | sed -n 's/^blas kernels: //p')
[ -n "$want" ] || { echo "FAIL troupe info names no BLAS kernels"; exit 1; }
echo "troupe runs on $want"
got=$("$test_bin" --gtest_filter=BlasRuntime.ThisTestBinaryRunsOnTheChosenKernels | sed -n 's/^blas kernels: //p')
[ "$got" = "$want" ] || { echo "FAIL the test binary runs on '$got', troupe on '$want'"; fail=1; }
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  (cd "$tmp" && "$example") > "$tmp/example.log" 2>&1 || { echo "FAIL the example failed"; cat "$tmp/example.log"; fail=1; }
  got=$(sed -n 's/.*OpenBLAS kernels \([A-Za-z0-9]*\).*/\1/p' "$tmp/example.log" | head -1)
  [ "$got" = "$want" ] || { echo "FAIL the example runs on '$got', troupe on '$want'"; fail=1; }
fi
gemm=$("$troupe" info | sed -n 's/^gemm library: \([a-z]*\) .*/\1/p')
[ -n "$gemm" ] || { echo "FAIL troupe info names no GEMM library"; exit 1; }
echo "troupe's GEMMs run on $gemm"
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  # The example's log names the library as `troupe info` describes it.
  described=$("$troupe" info | sed -n "s/^gemm library $gemm: //p")
  grep -qF "GEMMs on $described" "$tmp/example.log" ||
    { echo "FAIL the example does not run its GEMMs on '$described'"; grep -m1 "GEMMs on" "$tmp/example.log"; fail=1; }
fi
for lib in openblas onednn; do
  got=$(TROUPE_GEMM=$lib "$troupe" info | sed -n 's/^gemm library: \([a-z]*\) .*/\1/p')
  [ "$got" = "$lib" ] || { echo "FAIL TROUPE_GEMM=$lib: troupe info says '$got'"; fail=1; }
done
TROUPE_GEMM=mkl "$troupe" train --max-steps 1 --out "$tmp/bad" > "$tmp/bad.log" 2>&1
rc=$?
[ $rc -ne 0 ] || { echo "FAIL TROUPE_GEMM=mkl: the job ran"; fail=1; }
grep -q "TROUPE_GEMM=mkl names no GEMM library: use auto, openblas or onednn" "$tmp/bad.log" ||
  { echo "FAIL TROUPE_GEMM=mkl: no error naming it"; cat "$tmp/bad.log"; fail=1; }
[ ! -e "$tmp/bad/metrics.jsonl" ] || { echo "FAIL TROUPE_GEMM=mkl: the job wrote metrics"; fail=1; }
[ $fail = 0 ] && echo "every program runs on $want with its GEMMs on $gemm; TROUPE_GEMM chooses, and a bad value is named"
exit $fail
