// Dense ops on OpenBLAS sgemm: the hot path of the MLP. Loops are kept simple enough for GCC
// to vectorize; the GEMMs carry almost all of the flops.
#include <cblas.h>

#include <algorithm>

#include "kernels/ops.hpp"

namespace troupe::ops {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC) {
  float beta = 0.0f;
  if (bias) {
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, out + n * OC);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(OC),
              static_cast<int>(C), 1.0f, inp, static_cast<int>(C), weight, static_cast<int>(C), beta, out,
              static_cast<int>(OC));
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C,
                           int64_t OC) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(N), static_cast<int>(C),
              static_cast<int>(OC), 1.0f, dout, static_cast<int>(OC), weight, static_cast<int>(C), 0.0f, dinp,
              static_cast<int>(C));
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N,
                            int64_t C, int64_t OC) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(OC), static_cast<int>(C),
              static_cast<int>(N), 1.0f, dout, static_cast<int>(OC), inp, static_cast<int>(C), 1.0f, dweight,
              static_cast<int>(C));
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
