// The layers run on whichever device their tensors live on, through that device's ops
// (kernels/device_ops.hpp), with no GPU: a fake device "cuda:7" whose memory is host memory and
// whose ops are the CPU's over raw pointers, counting every call. A whole GPT (and an MLP)
// stack on it must give the CPU stack's parameters and gradients bit for bit, reach every op
// through the fake (a layer that still read tensor::data() would throw: that access is for CPU
// tensors only), keep its buffers on the fake device, and take its batch from the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/allocator.hpp"
#include "kernels/batch.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/model.hpp"
#include "kernels/ops.hpp"
#include "kernels/train_step.hpp"

namespace troupe {
namespace {

constexpr device fake_gpu{device_type::cuda, 7};

// Host memory that says it is cuda:7, and knows its blocks.
class host_backed_allocator final : public allocator {
 public:
  void* allocate(size_t bytes) override {
    void* p = cpu_allocator()->allocate(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    live_[static_cast<const char*>(p)] = bytes;
    return p;
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(static_cast<const char*>(p));
    }
    cpu_allocator()->deallocate(p, bytes);
  }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  device where() const override { return fake_gpu; }
  bool owns(const void* p) const {
    const char* c = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(c);
    if (it == live_.begin()) return false;
    --it;
    return c < it->first + std::max<size_t>(it->second, 1);
  }

 private:
  mutable std::mutex mu_;
  std::map<const char*, size_t> live_;
};

const std::shared_ptr<host_backed_allocator>& fake_memory() {
  static const auto a = std::make_shared<host_backed_allocator>();
  return a;
}

// The CPU's arithmetic behind a device that is not the CPU. Like a GPU's, its loss reaches
// loss_sum and correct only through row_stats and settle().
class counting_ops final : public device_ops {
 public:
  device where() const override { return fake_gpu; }
  int calls(const std::string& op) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(op);
    return it == calls_.end() ? 0 : it->second;
  }

  void copy(tensor& dst, const tensor& src) const override {
    count("copy");
    ASSERT_EQ(dst.nbytes(), src.nbytes());
    std::memcpy(dst.raw(), src.raw(), static_cast<size_t>(src.nbytes()));
  }
  void fill_zero(void* p, int64_t bytes) const override {
    count("fill_zero", {p});
    std::memset(p, 0, static_cast<size_t>(bytes));
  }
  void synchronize() const override { count("synchronize"); }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int64_t N, int64_t C,
                      int64_t OC) const override {
    count("matmul_forward", {out, inp, w, b});
    ops::matmul_forward(out, inp, w, b, N, C, OC);
  }
  void matmul_backward_input(float* dinp, const float* dout, const float* w, int64_t N, int64_t C,
                             int64_t OC) const override {
    count("matmul_backward_input", {dinp, dout, w});
    ops::matmul_backward_input(dinp, dout, w, N, C, OC);
  }
  void matmul_backward_weight(float* dw, float* db, const float* dout, const float* inp, int64_t N, int64_t C,
                              int64_t OC) const override {
    count("matmul_backward_weight", {dw, db, dout, inp});
    ops::matmul_backward_weight(dw, db, dout, inp, N, C, OC);
  }
  void add_into(float* a, const float* b, int64_t n) const override {
    count("add_into", {a, b});
    ops::add_into(a, b, n);
  }
  void relu_forward(float* out, const float* inp, int64_t n) const override {
    count("relu_forward", {out, inp});
    ops::relu_forward(out, inp, n);
  }
  void relu_backward(float* dinp, const float* dout, const float* out, int64_t n) const override {
    count("relu_backward", {dinp, dout, out});
    ops::relu_backward(dinp, dout, out, n);
  }
  void gelu_forward(float* out, const float* inp, int64_t n) const override {
    count("gelu_forward", {out, inp});
    ops::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) const override {
    count("gelu_backward", {dinp, inp, dout});
    ops::gelu_backward(dinp, inp, dout, n);
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int64_t N, int64_t OC) const override {
    count("bias_gelu_forward", {out, pre, bias});
    ops::bias_gelu_forward(out, pre, bias, N, OC);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int64_t N, int64_t C) const override {
    count("layernorm_forward", {out, mean, rstd, inp, w, b});
    ops::layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int64_t N, int64_t C) const override {
    count("layernorm_backward", {dinp, dw, db, dout, inp, w, mean, rstd});
    ops::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void embedding_forward(float* out, const float* tokens, const float* wte, const float* wpe, int64_t B, int64_t T,
                         int64_t C, int64_t V) const override {
    count("embedding_forward", {out, tokens, wte, wpe});
    ops::embedding_forward(out, tokens, wte, wpe, B, T, C, V);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const float* tokens, int64_t B, int64_t T,
                          int64_t C) const override {
    count("embedding_backward", {dwte, dwpe, dout, tokens});
    ops::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void embedding_shard_forward(float* out, const float* tokens, const float* wte, int64_t B, int64_t T, int64_t C,
                               int64_t V, int64_t begin, int64_t n) const override {
    count("embedding_shard_forward", {out, tokens, wte});
    ops::embedding_shard_forward(out, tokens, wte, B, T, C, V, begin, n);
  }
  void embedding_shard_backward(float* dwte, const float* dout, const float* tokens, int64_t B, int64_t T, int64_t C,
                                int64_t begin, int64_t n) const override {
    count("embedding_shard_backward", {dwte, dout, tokens});
    ops::embedding_shard_backward(dwte, dout, tokens, B, T, C, begin, n);
  }
  void position_forward(float* out, const float* wpe, int64_t B, int64_t T, int64_t C) const override {
    count("position_forward", {out, wpe});
    ops::position_forward(out, wpe, B, T, C);
  }
  void position_backward(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) const override {
    count("position_backward", {dwpe, dout});
    ops::position_backward(dwpe, dout, B, T, C);
  }
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH) const override {
    count("attention_forward", {out, att, qkv});
    ops::attention_forward(out, att, qkv, B, T, C, NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* att, int64_t B, int64_t T,
                          int64_t C, int64_t NH) const override {
    count("attention_backward", {dqkv, dout, qkv, att});
    ops::attention_backward(dqkv, dout, qkv, att, B, T, C, NH);
  }
  loss_result cross_entropy(const tensor& logits, const std::vector<int32_t>& targets,
                            float grad_scale) const override {
    count("cross_entropy", {logits.raw()});
    const int64_t V = logits.size(-1), N = logits.numel() / V;
    const float* l = f32(logits);
    std::vector<float> probs(static_cast<size_t>(N * V));
    loss_result r;
    r.count = N;
    r.row_stats = tensor({N, 2});
    for (int64_t n = 0; n < N; ++n) {
      float* p = probs.data() + n * V;
      const double loss = ops::softmax_cross_entropy_forward(p, l + n * V, &targets[static_cast<size_t>(n)], 1, V);
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (p[v] > p[best]) best = v;
      r.row_stats.data()[2 * n] = static_cast<float>(loss);
      r.row_stats.data()[2 * n + 1] = best == targets[static_cast<size_t>(n)] ? 1.0f : 0.0f;
    }
    if (grad_scale != 0.0f) {
      r.dlogits = empty(logits.shape());
      ops::softmax_cross_entropy_backward(f32_out(r.dlogits), probs.data(), targets.data(), N, V, grad_scale);
    }
    return r;
  }

 private:
  // Counts the call, and checks that every pointer it was given is in the device's memory: a
  // layer that made a CPU tensor and handed it over would be caught here.
  void count(const std::string& op, std::initializer_list<const void*> on_device = {}) const {
    for (const void* p : on_device)
      EXPECT_TRUE(!p || fake_memory()->owns(p)) << op << " got a pointer outside the device's memory";
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_[op];
  }
  mutable std::mutex mu_;
  mutable std::map<std::string, int> calls_;
};

// One fake device for the whole binary: the tables are process-wide.
const counting_ops& fake_ops() {
  static const std::shared_ptr<counting_ops> ops = [] {
    install_allocator(fake_memory());
    auto o = std::make_shared<counting_ops>();
    install_ops(o);
    return o;
  }();
  return *ops;
}

std::vector<float> values_of(const tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.raw(), static_cast<size_t>(t.nbytes()));
  return v;
}

model_spec small_gpt() {
  model_spec spec;
  spec.kind = "gpt";
  spec.vocab = 11;
  spec.context = 8;
  spec.channels = 16;
  spec.heads = 2;
  spec.blocks = 2;
  return spec;
}

batch token_batch(const model_spec& spec, int64_t B) {
  batch b;
  std::vector<float> tokens;
  for (int64_t i = 0; i < B * spec.context; ++i) {
    tokens.push_back(static_cast<float>((i * 7 + 3) % spec.vocab));
    b.targets.push_back(static_cast<int32_t>((i * 5 + 1) % spec.vocab));
  }
  b.inputs = tensor({B, spec.context}, tokens);
  return b;
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
void expect_same_step(const model_spec& spec, const batch& b) {
  const counting_ops& fake = fake_ops();
  layer_stack cpu(build_layers(spec), 0, 42);
  layer_stack gpu(build_layers(spec), 0, 42, fake_gpu);
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
