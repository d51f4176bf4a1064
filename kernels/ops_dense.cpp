// Dense ops on OpenBLAS sgemm: the hot path of the MLP. Loops are kept simple enough for GCC
// to vectorize; the GEMMs carry almost all of the flops. Everything runs on the device's threads
// (parallel.hpp), the GEMMs too: each is cut into fixed blocks of output rows, one
// single-threaded sgemm per block, because OpenBLAS's own threads split a product by the thread
// count and give other bits on 2 threads than on 1 (tests/actors/thread_count.test.cpp). The
// bias gradient is split by output feature, each summing its rows in row order.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "kernels/gemm_library.hpp"
#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"

namespace troupe::ops {

namespace {
// Every GEMM runs on the kernels chosen for this CPU, whichever program called it.
// Rows of C per block, from the shape alone: at most 8 blocks (so 2 threads get 4 each, 4 get
// 2), none under 64 rows or about 2M multiply-adds, below which each sgemm call's packing of B
// costs more than the block computes (a pipeline's 32-row microbatches ran 30% slower cut into
// 64-row blocks of their weight gradient); a multiple of 16, OpenBLAS's micro-tile height here.
int64_t gemm_rows_per_block(int64_t M, int64_t N, int64_t K) {
  const int64_t eighth = (M + 7) / 8, enough_work = (int64_t{1} << 21) / std::max<int64_t>(N * K, 1);
  const int64_t rows = std::max<int64_t>({eighth, enough_work, 64});
  return (rows + 15) / 16 * 16;
}

// C = op(A) op(B) + beta C, row-major, in blocks of C's rows (op(A)'s rows: for a transposed A,
// its columns). K is never split, so each element is one sgemm's sum whatever runs it.
void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  parallel_for(M, gemm_rows_per_block(M, N, K), [&](int64_t begin, int64_t end) {
    const float* a = ta == CblasNoTrans ? A + begin * lda : A + begin;
    sgemm_rowmajor(ta == CblasTrans, tb == CblasTrans, end - begin, N, K, 1.0f, a, lda, B, ldb, beta, C + begin * ldc, ldc);
  });
}
}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                    int64_t C, int64_t OC) {
  float beta = 0.0f;
  if (bias) {
    parallel_for(N, rows_per_chunk(OC), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) std::copy(bias, bias + OC, out + n * OC);
    });
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
    parallel_for(OC, columns_per_chunk(N), [&](int64_t o0, int64_t o1) {
      for (int64_t n = 0; n < N; ++n) {
        const float* row = dout + n * OC;
        for (int64_t o = o0; o < o1; ++o) dbias[o] += row[o];
      }
    });
  }
}

namespace {
// bf16 operands widened to fp32 (exact), so the products run on the same sgemm as fp32's.
std::vector<float> widened(const bf16* x, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] = to_float(x[i]);
  });
  return out;
}
}  // namespace

void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC) {
  matmul_forward(out, widened(inp, N * C).data(), widened(weight, OC * C).data(), bias, N, C, OC);
}

void matmul_backward_input_bf16(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC) {
  matmul_backward_input(dinp, widened(dout, N * OC).data(), widened(weight, OC * C).data(), N, C, OC);
}

void matmul_backward_weight_bf16(float* dweight, float* dbias, const bf16* dout, const bf16* inp, int64_t N,
                                 int64_t C, int64_t OC) {
  matmul_backward_weight(dweight, dbias, widened(dout, N * OC).data(), widened(inp, N * C).data(), N, C, OC);
}

void round_to_bf16(bf16* out, const float* inp, int64_t n) {
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = troupe::to_bf16(inp[i]);
  });
}

void add_into(float* a, const float* b, int64_t n) {
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) a[i] += b[i];
  });
}

void relu_forward(float* out, const float* inp, int64_t n) {
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
  });
}

void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) {
  parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float d = dout[i];  // loaded either way: a load under the condition keeps the loop scalar
      dinp[i] = out[i] > 0.0f ? d : 0.0f;
    }
  });
}

}  // namespace troupe::ops
