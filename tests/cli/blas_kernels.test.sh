#!/usr/bin/env bash
# Every program of the project runs on the same OpenBLAS kernels as `troupe`: a test binary and an
# example (through run_training, as a library user calls it) report the core `troupe info` names.
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
[ $fail = 0 ] && echo "every program runs on $want"
exit $fail
