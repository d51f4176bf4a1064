// Dense ops: matmuls through cublasGemmEx with fp32 accumulation (CUBLAS_COMPUTE_32F under the
// default math mode, so fp32 operands never run as TF32), element-wise ops as grid-stride loops.
// The bias is written into the output first and the GEMM adds onto it (beta 1), as on the CPU;
// a cuBLASLt bias/GELU epilogue would save that pass, but this first version keeps one GEMM path
// for every dtype.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace troupe::cuda {

using detail::blocks_for;
using detail::from_f;
using detail::threads;
using detail::to_f;

blas::blas() { TROUPE_CUDA_CHECK(cublasCreate(&h_)); }
blas::~blas() { cublasDestroy(h_); }

namespace {

template <class T>
constexpr cudaDataType_t dtype();
template <>
constexpr cudaDataType_t dtype<float>() { return CUDA_R_32F; }
template <>
constexpr cudaDataType_t dtype<bf16>() { return CUDA_R_16BF; }

// Column-major C (m, n) = op(A) op(B) + beta C, the call every row-major product below maps to:
// a row-major (r, c) matrix is the column-major (c, r) one, its transpose.
template <class Tin, class Tout>
void gemm(blas& b, cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k,
          const Tin* A, int64_t lda, const Tin* B, int64_t ldb, float beta, Tout* C, int64_t ldc) {
  const float alpha = 1.0f;
  TROUPE_CUDA_CHECK(cublasSetStream(b.handle(), stream));
  TROUPE_CUDA_CHECK(cublasGemmEx(b.handle(), ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                 &alpha, A, dtype<Tin>(), static_cast<int>(lda), B, dtype<Tin>(),
                                 static_cast<int>(ldb), &beta, C, dtype<Tout>(), static_cast<int>(ldc),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <class T>
__global__ void broadcast_rows_kernel(T* out, const float* row, int64_t N, int64_t C) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * C; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = from_f<T>(row[i % C]);
}

template <class Tin, class Tout>
void matmul_forward_impl(Tout* out, const Tin* inp, const Tin* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC, blas& b, cudaStream_t stream) {
  float beta = 0.0f;
  if (bias) {
    broadcast_rows_kernel<<<blocks_for(N * OC), threads, 0, stream>>>(out, bias, N, OC);
    TROUPE_CUDA_CHECK(cudaGetLastError());
    beta = 1.0f;
  }
  // out^T (OC, N) = weight (OC, C) . inp^T (C, N); weight is stored as column-major (C, OC).
  gemm(b, stream, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, C, inp, C, beta, out, OC);
}

template <class Tin, class Tout>
void matmul_backward_input_impl(Tout* dinp, const Tin* dout, const Tin* weight, int64_t N, int64_t C, int64_t OC,
                                blas& b, cudaStream_t stream) {
  // dinp^T (C, N) = weight^T (C, OC) . dout^T (OC, N)
  gemm(b, stream, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, C, dout, OC, 0.0f, dinp, C);
}

template <class T>
__global__ void bias_grad_kernel(float* dbias, const T* dout, int64_t N, int64_t OC) {
  detail::column_sum_into(dbias, N, OC, [=] __device__(int64_t n, int64_t c) { return to_f(dout[n * OC + c]); });
}

template <class Tin>
void matmul_backward_weight_impl(float* dweight, float* dbias, const Tin* dout, const Tin* inp, int64_t N, int64_t C,
                                 int64_t OC, blas& b, cudaStream_t stream) {
  // dweight^T (C, OC) += inp^T (C, N) . dout (N, OC)
  gemm(b, stream, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, C, dout, OC, 1.0f, dweight, C);
  if (dbias) {
    bias_grad_kernel<<<static_cast<unsigned>((OC + 31) / 32), dim3(32, 8), 0, stream>>>(dbias, dout, N, OC);
    TROUPE_CUDA_CHECK(cudaGetLastError());
  }
}

// Element-wise ops: f(i) for every i in [0, n).
template <class F>
__global__ void elementwise_kernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) f(i);
}
template <class F>
void elementwise(int64_t n, cudaStream_t stream, F f) {
  if (n <= 0) return;
  elementwise_kernel<<<blocks_for(n), threads, 0, stream>>>(n, f);
  TROUPE_CUDA_CHECK(cudaGetLastError());
}

constexpr float gelu_scale = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(gelu_scale * (x + 0.044715f * x * x * x)));
}

template <class T>
void add_into_impl(T* a, const T* b, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) { a[i] = from_f<T>(to_f(a[i]) + to_f(b[i])); });
}
template <class T>
void relu_forward_impl(T* out, const T* inp, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) { out[i] = from_f<T>(fmaxf(to_f(inp[i]), 0.0f)); });
}
template <class T>
void relu_backward_impl(T* dinp, const T* dout, const T* out, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) { dinp[i] = to_f(out[i]) > 0.0f ? dout[i] : from_f<T>(0.0f); });
}
template <class T>
void gelu_forward_impl(T* out, const T* inp, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) { out[i] = from_f<T>(gelu(to_f(inp[i]))); });
}
template <class T>
void gelu_backward_impl(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) {
    const float x = to_f(inp[i]);
    const float th = tanhf(gelu_scale * (x + 0.044715f * x * x * x));
    const float local = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * gelu_scale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = from_f<T>(local * to_f(dout[i]));
  });
}
template <class T>
void bias_gelu_forward_impl(T* out, T* pre, const float* bias, int64_t N, int64_t OC, cudaStream_t s) {
  elementwise(N * OC, s, [=] __device__(int64_t i) {
    const T x = from_f<T>(to_f(pre[i]) + bias[i % OC]);  // gelu reads the stored (rounded) value, as backward will
    pre[i] = x;
    out[i] = from_f<T>(gelu(to_f(x)));
  });
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, blas& b, cudaStream_t s) {
  matmul_forward_impl(out, inp, weight, bias, N, C, OC, b, s);
}
void matmul_forward(float* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, blas& b, cudaStream_t s) {
  matmul_forward_impl(out, inp, weight, bias, N, C, OC, b, s);
}
void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC, blas& b, cudaStream_t s) {
  matmul_forward_impl(out, inp, weight, bias, N, C, OC, b, s);
}
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int64_t N, int64_t C, int64_t OC,
                           blas& b, cudaStream_t s) {
  matmul_backward_input_impl(dinp, dout, weight, N, C, OC, b, s);
}
void matmul_backward_input(float* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC,
                           blas& b, cudaStream_t s) {
  matmul_backward_input_impl(dinp, dout, weight, N, C, OC, b, s);
}
void matmul_backward_input(bf16* dinp, const bf16* dout, const bf16* weight, int64_t N, int64_t C, int64_t OC,
                           blas& b, cudaStream_t s) {
  matmul_backward_input_impl(dinp, dout, weight, N, C, OC, b, s);
}
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t N, int64_t C,
                            int64_t OC, blas& b, cudaStream_t s) {
  matmul_backward_weight_impl(dweight, dbias, dout, inp, N, C, OC, b, s);
}
void matmul_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp, int64_t N, int64_t C,
                            int64_t OC, blas& b, cudaStream_t s) {
  matmul_backward_weight_impl(dweight, dbias, dout, inp, N, C, OC, b, s);
}

void add_into(float* a, const float* b, int64_t n, cudaStream_t s) { add_into_impl(a, b, n, s); }
void add_into(bf16* a, const bf16* b, int64_t n, cudaStream_t s) { add_into_impl(a, b, n, s); }
void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t s) { relu_forward_impl(out, inp, n, s); }
void relu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t s) { relu_forward_impl(out, inp, n, s); }
void relu_backward(float* dinp, const float* dout, const float* out, int64_t n, cudaStream_t s) {
  relu_backward_impl(dinp, dout, out, n, s);
}
void relu_backward(bf16* dinp, const bf16* dout, const bf16* out, int64_t n, cudaStream_t s) {
  relu_backward_impl(dinp, dout, out, n, s);
}
void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t s) { gelu_forward_impl(out, inp, n, s); }
void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t s) { gelu_forward_impl(out, inp, n, s); }
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s) {
  gelu_backward_impl(dinp, inp, dout, n, s);
}
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n, cudaStream_t s) {
  gelu_backward_impl(dinp, inp, dout, n, s);
}
void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC, cudaStream_t s) {
  bias_gelu_forward_impl(out, pre, bias, N, OC, s);
}
void bias_gelu_forward(bf16* out, bf16* pre, const float* bias, int64_t N, int64_t OC, cudaStream_t s) {
  bias_gelu_forward_impl(out, pre, bias, N, OC, s);
}

void to_bf16(bf16* out, const float* inp, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) { out[i] = __float2bfloat16(inp[i]); });
}
void to_float(float* out, const bf16* inp, int64_t n, cudaStream_t s) {
  elementwise(n, s, [=] __device__(int64_t i) { out[i] = __bfloat162float(inp[i]); });
}

}  // namespace troupe::cuda
