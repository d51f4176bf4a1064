// matmul_precision (matmul_precision.hpp): the text form, and the products at either precision.
#include "kernels/matmul_precision.hpp"

#include <stdexcept>

#include "kernels/device_ops.hpp"

namespace troupe {

const char* to_string(matmul_precision p) { return p == matmul_precision::bf16 ? "bf16" : "f32"; }

matmul_precision parse_matmul_precision(const std::string& text) {
  for (matmul_precision p : {matmul_precision::f32, matmul_precision::bf16})
    if (text == to_string(p)) return p;
  throw std::invalid_argument("matmul precision \"" + text + "\": expected f32 or bf16");
}

namespace gemm {

namespace {
// n values rounded to bf16, on k's device: a temporary operand, freed once the product using it
// is enqueued (a GPU's caching allocator hands a block out again only in its stream's order).
tensor rounded(const device_ops& k, const float* values, int64_t n) {
  tensor t = k.empty({n}, dtype::bf16);
  k.round_to_bf16(t.data_as<bf16>(), values, n);
  return t;
}
const bf16* b16(const tensor& t) { return t.data_as<bf16>(); }
}  // namespace

tensor forward(matmul_precision p, const device_ops& k, float* y, const tensor& x, const float* weight,
               const float* bias, int64_t n, int64_t in, int64_t out) {
  if (p == matmul_precision::f32) {
    k.matmul_forward(y, f32(x), weight, bias, n, in, out);
    return x;
  }
  const tensor xb = rounded(k, f32(x), n * in), wb = rounded(k, weight, out * in);
  k.matmul_forward_bf16(y, b16(xb), b16(wb), bias, n, in, out);
  return xb.reshaped(x.shape());
}

void backward_input(matmul_precision p, const device_ops& k, float* dx, const tensor& dy, const float* weight,
                    int64_t n, int64_t in, int64_t out) {
  if (p == matmul_precision::f32) return k.matmul_backward_input(dx, f32(dy), weight, n, in, out);
  const tensor dyb = rounded(k, f32(dy), n * out), wb = rounded(k, weight, out * in);
  k.matmul_backward_input_bf16(dx, b16(dyb), b16(wb), n, in, out);
}

void backward_weight(matmul_precision p, const device_ops& k, float* dweight, float* dbias, const tensor& dy,
                     const tensor& x, int64_t n, int64_t in, int64_t out) {
  if (p == matmul_precision::f32) return k.matmul_backward_weight(dweight, dbias, f32(dy), f32(x), n, in, out);
  const tensor dyb = rounded(k, f32(dy), n * out);
  const tensor xb = x.type() == dtype::bf16 ? x : rounded(k, f32(x), n * in);
  k.matmul_backward_weight_bf16(dweight, dbias, b16(dyb), b16(xb), n, in, out);
}

}  // namespace gemm

}  // namespace troupe
