// matmul_precision: the operands of a linear layer's three products (forward, input gradient,
// weight gradient). f32, the default: fp32 operands, every number as it always was. bf16: both
// operands rounded to bf16 on every call (the weights from the fp32 master the optimizer keeps,
// the activations and output gradients as they arrive), the products summed in fp32 into fp32
// results, the operands a GPU's bf16 tensor cores take. A transformer block's linears keep
// their input for the weight gradient as the product took it, in bf16 (half the bytes);
// everything else stays fp32: layernorm, attention, softmax and the loss, the other activations
// kept for backward, the parameters, their gradients and the optimizer's state. It is the linear
// layers' part of PyTorch's autocast(bfloat16), except that a product's result stays fp32.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/tensor.hpp"

namespace troupe {

class device_ops;

enum class matmul_precision : uint8_t { f32, bf16 };
const char* to_string(matmul_precision p);  // "f32", "bf16"
// The precision named by to_string; throws std::invalid_argument naming the text otherwise.
matmul_precision parse_matmul_precision(const std::string& text);

// A linear layer's products at precision p on k's device, as device_ops' fp32 ones (same
// shapes, same accumulation: y and dx written, dweight and dbias added to). dy is an fp32 tensor
// of n rows, and so is forward's x; backward_weight's x may also be what forward returned.
namespace gemm {
// Returns x as the product took it: x itself at f32, its bf16 rounding (x's shape) at bf16,
// which backward_weight takes as it is, so a layer may keep it instead of x.
tensor forward(matmul_precision p, const device_ops& k, float* y, const tensor& x, const float* weight,
               const float* bias, int64_t n, int64_t in, int64_t out);
void backward_input(matmul_precision p, const device_ops& k, float* dx, const tensor& dy, const float* weight,
                    int64_t n, int64_t in, int64_t out);
void backward_weight(matmul_precision p, const device_ops& k, float* dweight, float* dbias, const tensor& dy,
                     const tensor& x, int64_t n, int64_t in, int64_t out);
}  // namespace gemm

}  // namespace troupe
