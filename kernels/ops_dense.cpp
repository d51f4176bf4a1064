// Dense ops on OpenBLAS sgemm: the hot path of the MLP. Loops are kept simple enough for GCC
// to vectorize; the GEMMs carry almost all of the flops.
#include <cblas.h>

#include <algorithm>

#include "kernels/blas_runtime.hpp"
#include "kernels/ops.hpp"

namespace troupe::ops {

namespace {
// Every GEMM runs on the kernels chosen for this CPU, whichever program called it.
void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  ensure_blas_kernels();
  cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC) {
  float beta = 0.0f;
  if (bias) {
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, out + n * OC);
    beta = 1.0f;
  }
  sgemm(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, beta, out, OC);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C,
                           int64_t OC) {
  sgemm(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, 0.0f, dinp, C);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N,
                            int64_t C, int64_t OC) {
  sgemm(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) {
    for (int64_t n = 0; n < N; ++n) {
      const float* row = dout + n * OC;
      for (int64_t o = 0; o < OC; ++o) dbias[o] += row[o];
    }
  }
}

void relu_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

}  // namespace troupe::ops
