// moe_block (layers_moe_block.hpp): the sub-layers' own forward and backward, chained, so its
// math is the sum of parts tested on their own. saved.tensors holds fixed slots (below), then the
// experts' own saved tensors, which moe_mlp appends to in backward_input.
#include "kernels/layers_moe_block.hpp"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "kernels/context_attention.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/sublayer_calls.hpp"

namespace troupe {

namespace {

enum slot : size_t {
  s_x, s_ln1_mean, s_ln1_rstd, s_ln1_out, s_qkv, s_att, s_att_out, s_x2, s_ln2_mean, s_ln2_rstd,
  g_ln1_out, g_qkv, g_x2, g_ln2_out,  // filled by backward_input, read by backward_weight
  s_experts                           // moe_mlp's saved tensors from here on
};

using sublayer::add_into;
using sublayer::input_grad;
using sublayer::weight_grad;

saved_activations experts_of(const std::vector<tensor>& s) {
  return saved_activations{std::vector<tensor>(s.begin() + s_experts, s.end())};
}

}  // namespace

moe_block::moe_block(int64_t channels, int64_t heads, moe_options o, float proj_std, context::context_split context,
                     tp_group* experts_group)
    : channels_(channels), heads_(heads), proj_std_(proj_std), context_(context), ln1_(channels), qkv_(channels, 3 * channels),
      proj_(channels, channels), ln2_(channels), moe_(channels, 4 * channels, o, experts_group) {
  if (channels <= 0 || heads <= 0 || channels % heads != 0)
    throw std::invalid_argument("moe_block: channels (" + std::to_string(channels) +
                                ") must be a positive multiple of heads (" + std::to_string(heads) + ")");
  if (const std::string why = context::refuses(context_.mode, heads, tp_size(context_.group)); !why.empty())
    throw std::invalid_argument(why);
  offset_[0] = 0;
  for (int i = 0; i < num_parts; ++i) offset_[i + 1] = offset_[i] + part(i)->num_params();
}

layer* moe_block::part(int i) {
  layer* parts[num_parts] = {&ln1_, &qkv_, &proj_, &ln2_, &moe_};
  return parts[i];
}

std::vector<param_spec> moe_block::param_specs() const {
  const char* prefix[num_parts] = {"ln1", "attn.qkv", "attn.proj", "ln2", "mlp"};
  std::vector<param_spec> specs;
  for (int i = 0; i < num_parts; ++i)
    for (auto& s : part(i)->param_specs()) specs.push_back({std::string(prefix[i]) + "." + s.name, s.shape});
  return specs;
}

std::vector<param_run> moe_block::full_runs() const {
  std::vector<param_run> runs{{0, offset_[moe_at]}};
  for (param_run r : moe_.full_runs()) runs.push_back({offset_[moe_at] + r.offset, r.count});
  return runs;
}

void moe_block::init(float* params, std::mt19937_64& rng) const {
  // The dense block's init for the attention half (GPT-2's: zero biases, N(0, 0.02) weights, the
  // projection's scaled), the experts' own (PyTorch Linear's default) for the rest.
  std::fill(params, params + offset_[moe_at], 0.0f);
  ln1_.init(params + offset_[ln1_at], rng);
  ln2_.init(params + offset_[ln2_at], rng);
  auto normal = [&rng](float* out, int64_t n, float std) {
    std::normal_distribution<float> dist(0.0f, std);
    for (int64_t i = 0; i < n; ++i) out[i] = dist(rng);
  };
  normal(params + offset_[qkv_at], 3 * channels_ * channels_, 0.02f);
  normal(params + offset_[proj_at], channels_ * channels_, proj_std_);
  moe_.init(params + offset_[moe_at], rng);
}

void moe_block::bind(const float* params, float* grads) {
  layer::bind(params, grads);
  for (int i = 0; i < num_parts; ++i)
    part(i)->bind(params ? params + offset_[i] : nullptr, grads ? grads + offset_[i] : nullptr);
}

void moe_block::set_matmul_precision(matmul_precision p) {
  layer::set_matmul_precision(p);
  qkv_.set_matmul_precision(p);
  proj_.set_matmul_precision(p);
}

tensor moe_block::forward(const tensor& x, saved_activations& saved) const {
  if (x.rank() != 3 || x.size(2) != channels_)
    throw std::invalid_argument("moe_block: input has shape " + to_string(x.shape()) + ", expected (B, T, " +
                                std::to_string(channels_) + ")");
  const device_ops& k = ops_on(x);
  std::vector<tensor> s(s_experts);
  saved_activations tmp;
  s[s_x] = x;
  s[s_ln1_out] = ln1_.forward(x, tmp);
  s[s_ln1_mean] = tmp.tensors.at(1);
  s[s_ln1_rstd] = tmp.tensors.at(2);
  s[s_qkv] = qkv_.forward(s[s_ln1_out], tmp);
  s[s_ln1_out] = tmp.tensors.at(0);  // what the product took (bf16 rounding included)
  context::attend(k, context_, s[s_att_out], s[s_att], s[s_qkv], channels_, heads_);
  s[s_x2] = proj_.forward(s[s_att_out], tmp);
  s[s_att_out] = tmp.tensors.at(0);
  add_into(s[s_x2], x);
  const tensor ln2_out = ln2_.forward(s[s_x2], tmp);
  s[s_ln2_mean] = tmp.tensors.at(1);
  s[s_ln2_rstd] = tmp.tensors.at(2);
  saved_activations experts;
  tensor y = moe_.forward(ln2_out, experts);  // keeps ln2_out as its input
  add_into(y, s[s_x2]);
  for (tensor& t : experts.tensors) s.push_back(std::move(t));
  if (selective_ && !context_) s[s_att] = tensor();
  saved.tensors = std::move(s);
  return y;
}

tensor moe_block::backward_input(const tensor& dy, saved_activations& saved) const {
  auto& s = saved.tensors;
  if (s.size() <= s_experts || !s[g_x2].empty()) throw std::logic_error("moe_block: backward_input without forward");
  const device_ops& k = ops_on(dy);
  saved_activations experts = experts_of(s);
  tensor d_ln2_out = moe_.backward_input(dy, experts);
  tensor d_x2 = input_grad(ln2_, d_ln2_out, {s[s_x2], s[s_ln2_mean], s[s_ln2_rstd]});
  add_into(d_x2, dy);
  tensor d_att_out = input_grad(proj_, d_x2, {s[s_att_out]});
  if (s[s_att].empty()) {  // selective recomputation: the scores again, from the kept qkv
    tensor unused;
    context::attend(k, context_, unused, s[s_att], s[s_qkv], channels_, heads_);
  }
  tensor d_qkv = context::attend_backward(k, context_, d_att_out, s[s_qkv], s[s_att], channels_, heads_);
  tensor d_ln1_out = input_grad(qkv_, d_qkv, {s[s_ln1_out]});
  tensor dx = input_grad(ln1_, d_ln1_out, {s[s_x], s[s_ln1_mean], s[s_ln1_rstd]});
  add_into(dx, d_x2);
  s.resize(s_experts);
  s[s_qkv] = s[s_att] = tensor();  // backward_weight needs neither
  s[g_ln1_out] = std::move(d_ln1_out);
  s[g_qkv] = std::move(d_qkv);
  s[g_x2] = std::move(d_x2);
  s[g_ln2_out] = std::move(d_ln2_out);
  for (tensor& t : experts.tensors) s.push_back(std::move(t));
  return dx;
}

void moe_block::backward_weight(const tensor& dy, saved_activations& saved) {
  // layer_stack skips backward_input on its first layer; the internal gradients are needed all the same.
  if (saved.tensors.size() > s_experts && saved.tensors[g_x2].empty()) backward_input(dy, saved);
  auto& s = saved.tensors;
  if (s.size() <= s_experts || s[g_x2].empty()) throw std::logic_error("moe_block: backward_weight without forward");
  saved_activations experts = experts_of(s);
  moe_.backward_weight(dy, experts);
  weight_grad(ln2_, s[g_ln2_out], {s[s_x2], s[s_ln2_mean], s[s_ln2_rstd]});
  weight_grad(proj_, s[g_x2], {s[s_att_out]});
  weight_grad(qkv_, s[g_qkv], {s[s_ln1_out]});
  weight_grad(ln1_, s[g_ln1_out], {s[s_x], s[s_ln1_mean], s[s_ln1_rstd]});
}

void expert_tally::add(const expert_tally& o) {
  for (const auto& [layer, counts] : o.routed) {
    auto& mine = routed[layer];
    mine.resize(std::max(mine.size(), counts.size()), 0);
    for (size_t e = 0; e < counts.size(); ++e) mine[e] += counts[e];
  }
  for (const auto& [layer, n] : o.dropped) dropped[layer] += n;
  aux_loss_sum += o.aux_loss_sum;
  forwards += o.forwards;
}

void tally_routing(const layer_stack& stack, expert_tally& t) {
  for (size_t i = 0; i < stack.num_layers(); ++i) {
    const auto* block = dynamic_cast<const moe_block*>(&stack.at(i));
    if (!block) continue;
    const moe::routing& r = block->last_routing();
    const int64_t layer = stack.first_layer() + static_cast<int64_t>(i);
    auto& counts = t.routed[layer];
    counts.resize(r.routed.size(), 0);
    for (size_t e = 0; e < r.routed.size(); ++e) counts[e] += r.routed[e];
    t.dropped[layer] += r.dropped;
    t.aux_loss_sum += r.aux_loss;
    ++t.forwards;
  }
}

}  // namespace troupe
