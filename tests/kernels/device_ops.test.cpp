// The layers run on whichever device their tensors live on, through that device's ops
// (kernels/device_ops.hpp), with no GPU: tests/kernels/fake_gpu.hpp's "cuda:7", host memory
// behind the CPU's ops, counting every call. A whole GPT (and an MLP)
// stack on it must give the CPU stack's parameters and gradients bit for bit, reach every op
// through the fake (a layer that still read tensor::data() would throw: that access is for CPU
// tensors only), keep its buffers on the fake device, and take its batch from the host.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/batch.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/model.hpp"
#include "kernels/train_step.hpp"
#include "tests/kernels/fake_gpu.hpp"
#include "tests/kernels/token_batch.hpp"

namespace troupe {
namespace {

using test::counting_ops;
using test::fake_gpu;
using test::fake_ops;
using test::token_batch;

std::vector<float> values_of(const tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.raw(), static_cast<size_t>(t.nbytes()));
  return v;
}

model_spec small_gpt() {
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = 11;
  spec.context = 8;
  spec.channels = 16;
  spec.heads = 2;
  spec.blocks = 2;
  return spec;
}

batch image_batch(const model_spec& spec, int64_t B) {
  batch b;
  std::vector<float> x;
  for (int64_t i = 0; i < B * spec.inputs; ++i) x.push_back(static_cast<float>((i * 37) % 101) / 101.0f - 0.5f);
  for (int64_t i = 0; i < B; ++i) b.targets.push_back(static_cast<int32_t>(i % spec.classes));
  b.inputs = tensor({B, spec.inputs}, x);
  return b;
}

// Two micro-batches of gradients on the CPU and on the fake device, from the same seed.
void expect_same_step(const model_spec& spec, const batch& b, matmul_precision p = matmul_precision::f32) {
  const counting_ops& fake = fake_ops();
  layer_stack cpu(build_layers(spec), 0, 42);
  layer_stack gpu(build_layers(spec), 0, 42, fake_gpu);
  cpu.set_matmul_precision(p);
  gpu.set_matmul_precision(p);
  EXPECT_EQ(gpu.params().where(), fake_gpu);
  EXPECT_EQ(gpu.grads().where(), fake_gpu);
  ASSERT_EQ(values_of(cpu.params()), values_of(gpu.params())) << "the init is drawn on the host for every device";

  const int copies = fake.calls("copy"), syncs = fake.calls("synchronize");
  const float scale = 1.0f / static_cast<float>(2 * loss_rows(b));
  step_stats on_cpu, on_gpu;
  for (int m = 0; m < 2; ++m) {
    on_cpu.add(compute_gradients(cpu, b, scale));
    on_gpu.add(compute_gradients(gpu, b, scale));
  }
  EXPECT_EQ(values_of(cpu.grads()), values_of(gpu.grads()));
  EXPECT_EQ(on_gpu.count, on_cpu.count);
  EXPECT_EQ(on_gpu.correct, on_cpu.correct);
  EXPECT_NEAR(on_gpu.loss_sum, on_cpu.loss_sum, 1e-5 * on_cpu.loss_sum) << "float row losses, summed in double";
  EXPECT_GE(fake.calls("copy") - copies, 2) << "each host batch is copied to the device";
  EXPECT_EQ(fake.calls("synchronize") - syncs, 2) << "the reference step waits once per micro-batch";
}

TEST(DeviceOps, a_gpt_stack_on_another_device_runs_every_op_there_and_matches_the_cpu_bit_for_bit) {
  const model_spec spec = small_gpt();
  expect_same_step(spec, token_batch(spec, 3));
  const counting_ops& fake = fake_ops();
  for (const char* op : {"embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward",
                         "matmul_forward", "matmul_backward_input", "matmul_backward_weight", "attention_forward",
                         "attention_backward", "bias_gelu_forward", "gelu_backward", "add_into", "cross_entropy",
                         "fill_zero"})
    EXPECT_GT(fake.calls(op), 0) << op << " never reached the device's ops";
}

// At matmul_precision::bf16 the products' operands are rounded on the device and the bf16
// products run there, and nothing takes the fp32 ones.
TEST(DeviceOps, a_gpt_stack_at_bf16_matmul_precision_rounds_and_multiplies_on_the_device_as_the_cpu_does) {
  const model_spec spec = small_gpt();
  const counting_ops& fake = fake_ops();
  const int fp32_products = fake.calls("matmul_forward") + fake.calls("matmul_backward_input") +
                            fake.calls("matmul_backward_weight");
  expect_same_step(spec, token_batch(spec, 3), matmul_precision::bf16);
  for (const char* op : {"round_to_bf16", "matmul_forward_bf16", "matmul_backward_input_bf16", "matmul_backward_weight_bf16"})
    EXPECT_GT(fake.calls(op), 0) << op << " never reached the device's ops";
  EXPECT_EQ(fake.calls("matmul_forward") + fake.calls("matmul_backward_input") + fake.calls("matmul_backward_weight"),
            fp32_products);
}

TEST(DeviceOps, an_mlp_stack_on_another_device_matches_the_cpu_bit_for_bit) {
  model_spec spec;
  spec.inputs = 12;
  spec.hidden = {9, 7};
  spec.classes = 5;
  expect_same_step(spec, image_batch(spec, 6));
  EXPECT_GT(fake_ops().calls("relu_forward"), 0);
  EXPECT_GT(fake_ops().calls("relu_backward"), 0);
}

TEST(DeviceOps, a_device_stack_loads_host_parameters_by_copy_and_refuses_to_adopt_them) {
  fake_ops();  // installs the device
  const model_spec spec = small_gpt();
  layer_stack cpu(build_layers(spec), 0, 1);
  layer_stack gpu(build_layers(spec), 0, 2, fake_gpu);
  ASSERT_NE(values_of(cpu.params()), values_of(gpu.params()));
  gpu.load_params(cpu.params());
  EXPECT_EQ(gpu.params().where(), fake_gpu);
  EXPECT_EQ(values_of(cpu.params()), values_of(gpu.params()));
  try {
    gpu.adopt_params(cpu.params().clone());
    FAIL() << "adopted parameters on another device";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:7"), std::string::npos) << e.what();
  }
}

TEST(DeviceOps, a_gpu_with_no_ops_installed_is_named) {
  try {
    ops_for({device_type::cuda, 5});
    FAIL() << "ops for a GPU nobody set up";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(install_ops(nullptr), std::invalid_argument);
}

TEST(DeviceOps, settle_adds_each_rows_loss_and_hit_and_leaves_a_cpu_result_alone) {
  loss_result r;
  r.loss_sum = 1.0;
  r.correct = 2;
  r.row_stats = tensor({3, 2}, {0.5f, 1.0f, 0.25f, 0.0f, 2.0f, 1.0f});
  r.settle();
  EXPECT_DOUBLE_EQ(r.loss_sum, 3.75);
  EXPECT_EQ(r.correct, 4);
  EXPECT_TRUE(r.row_stats.empty());
  r.settle();  // nothing left to add
  EXPECT_DOUBLE_EQ(r.loss_sum, 3.75);
  EXPECT_EQ(r.correct, 4);
}

}  // namespace
}  // namespace troupe
