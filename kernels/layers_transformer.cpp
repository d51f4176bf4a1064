// embedding, layernorm, gelu and transformer_block over the device's ops (device_ops.hpp) and the
// dense linear.
// The block keeps its forward activations in fixed slots of `saved` (see enum slot) and reuses
// the sub-layers' own forward/backward, so its math is exactly the sum of tested parts.
#include "kernels/layers_transformer.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/context_attention.hpp"
#include "kernels/device_ops.hpp"
#include "kernels/ops.hpp"
#include "kernels/sublayer_calls.hpp"

namespace troupe {

namespace {

constexpr float gpt2_init_std = 0.02f;

void fill_normal(float* out, int64_t n, float std, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, std);
  for (int64_t i = 0; i < n; ++i) out[i] = dist(rng);
}

void check_last_dim(const tensor& x, int64_t features, const char* who, const char* what) {
  if (x.rank() < 1 || x.size(-1) != features)
    throw std::invalid_argument(std::string(who) + ": " + what + " has shape " + to_string(x.shape()) +
                                ", expected last dimension " + std::to_string(features));
}

using sublayer::add_into;
using sublayer::input_grad;
using sublayer::weight_grad;

}  // namespace

// ---- embedding ----

embedding::embedding(int64_t vocab, int64_t context, int64_t channels, tp_group* g, bool sequence_parallel,
                     tp_group* context_group)
    : vocab_(vocab), context_(context), channels_(channels), group_(g),
      rows_(shard_of(vocab, tp_size(g), tp_rank(g))), sequence_parallel_(sequence_parallel && tp_size(g) > 1),
      context_group_(tp_size(context_group) > 1 ? context_group : nullptr) {}

tensor embedding::position_rows(const device_ops& k, int64_t T) const {
  const float* wpe = params_ + rows_.count * channels_;
  tensor out = k.empty({T, channels_});
  const std::vector<int64_t> at = context::positions(*context_group_, T);
  for (int64_t i = 0; i < T; ++i) std::copy(wpe + at[i] * channels_, wpe + (at[i] + 1) * channels_, out.data() + i * channels_);
  return out;
}

void embedding::add_position_grads(const tensor& partial, int64_t T) {
  float* dwpe = grads_ + rows_.count * channels_;
  const std::vector<int64_t> at = context_group_ ? context::positions(*context_group_, T) : std::vector<int64_t>();
  for (int64_t i = 0; i < T; ++i) {
    float* to = dwpe + (context_group_ ? at[i] : i) * channels_;
    const float* from = partial.data() + i * channels_;
    for (int64_t c = 0; c < channels_; ++c) to[c] += from[c];
  }
}

std::vector<param_spec> embedding::param_specs() const {
  return {{"wte", {rows_.count, channels_}}, {"wpe", {context_, channels_}}};
}

std::vector<param_run> embedding::full_runs() const {
  return {{rows_.begin * channels_, rows_.count * channels_}, {vocab_ * channels_, context_ * channels_}};
}

void embedding::init(float* params, std::mt19937_64& rng) const {
  if (tp_size(group_) == 1) return fill_normal(params, (vocab_ + context_) * channels_, gpt2_init_std, rng);
  std::vector<float> full(static_cast<size_t>(full_params()));
  fill_normal(full.data(), full_params(), gpt2_init_std, rng);
  gather_runs(params, full.data(), full_runs());
}

tensor embedding::forward(const tensor& x, saved_activations& saved) const {
  if (x.rank() != 2 || x.size(1) > context_)
    throw std::invalid_argument("embedding: tokens have shape " + to_string(x.shape()) +
                                ", expected (B, T) with T <= " + std::to_string(context_));
  const int64_t B = x.size(0), T = x.size(1), C = channels_;
  const float* wpe = params_ + rows_.count * C;
  const device_ops& k = ops_on(x);
  tensor y = k.empty({B, T, C});
  if (tp_size(group_) == 1 && !context_group_) {
    k.embedding_forward(f32_out(y), f32(x), params_, wpe, B, T, C, vocab_);
  } else {
    k.embedding_shard_forward(f32_out(y), f32(x), params_, B, T, C, vocab_, rows_.begin, rows_.count);
    if (sequence_parallel_) y = sp::scatter_rows(group_, y);  // one rank holds each token: the sum is exact
    else if (group_) group_->all_reduce_sum(f32_out(y), y.numel());
    if (context_group_) k.position_forward(f32_out(y), f32(position_rows(k, T)), y.size(0), T, C);
    else k.position_forward(f32_out(y), wpe, y.size(0), T, C);
  }
  saved.tensors = {x};
  return y;
}

tensor embedding::backward_input(const tensor&, saved_activations&) const { return {}; }

void embedding::backward_weight(const tensor& dy, saved_activations& saved) {
  const tensor& x = saved.tensors.at(0);
  const int64_t B = x.size(0), T = x.size(1), C = channels_;
  const int64_t share = sequence_parallel_ ? B / tp_size(group_) : B;  // sequences of dy here
  if (dy.numel() != share * T * C)
    throw std::invalid_argument("embedding: output gradient has shape " + to_string(dy.shape()) +
                                " for tokens " + to_string(x.shape()));
  float* dwpe = grads_ + rows_.count * C;
  const device_ops& k = ops_on(dy);
  if (tp_size(group_) == 1 && !context_group_) return k.embedding_backward(grads_, dwpe, f32(dy), f32(x), B, T, C, vocab_);
  if (!sequence_parallel_) {
    k.embedding_shard_backward(grads_, f32(dy), f32(x), B, T, C, rows_.begin, rows_.count);
    if (!context_group_) return k.position_backward(dwpe, f32(dy), B, T, C);
    tensor partial = k.zeros({T * C});
    k.position_backward(f32_out(partial), f32(dy), B, T, C);
    return add_position_grads(partial, T);
  }
  const tensor full = sp::gather_rows(group_, dy);
  k.embedding_shard_backward(grads_, f32(full), f32(x), B, T, C, rows_.begin, rows_.count);
  if (context_group_) {
    tensor partial = k.zeros({T * C});
    k.position_backward(f32_out(partial), f32(dy), share, T, C);
    group_->all_reduce_sum(f32_out(partial), partial.numel());  // every rank's sequences, summed in one order
    return add_position_grads(partial, T);
  }
  tensor partial = k.zeros({context_ * C});
  k.position_backward(f32_out(partial), f32(dy), share, T, C);
  sp::add_summed(group_, dwpe, partial);
}

// ---- layernorm ----

layernorm::layernorm(int64_t channels, tp_group* sum_grads_over)
    : channels_(channels), sum_over_(tp_size(sum_grads_over) > 1 ? sum_grads_over : nullptr) {}

std::vector<param_spec> layernorm::param_specs() const {
  return {{"weight", {channels_}}, {"bias", {channels_}}};
}

void layernorm::init(float* params, std::mt19937_64&) const {
  std::fill(params, params + channels_, 1.0f);
  std::fill(params + channels_, params + 2 * channels_, 0.0f);
}

tensor layernorm::forward(const tensor& x, saved_activations& saved) const {
  check_last_dim(x, channels_, "layernorm", "input");
  const int64_t n = x.numel() / channels_;
  const device_ops& k = ops_on(x);
  tensor y = k.empty(x.shape()), mean = k.empty({n}), rstd = k.empty({n});
  k.layernorm_forward(f32_out(y), f32_out(mean), f32_out(rstd), f32(x), params_, params_ + channels_, n, channels_);
  saved.tensors = {x, mean, rstd};
  return y;
}

tensor layernorm::backward_input(const tensor& dy, saved_activations& saved) const {
  check_last_dim(dy, channels_, "layernorm", "output gradient");
  const tensor& x = saved.tensors.at(0);
  const device_ops& k = ops_on(dy);
  tensor dx = k.empty(x.shape());
  k.layernorm_backward(f32_out(dx), nullptr, nullptr, f32(dy), f32(x), params_, f32(saved.tensors.at(1)),
                       f32(saved.tensors.at(2)), x.numel() / channels_, channels_);
  return dx;
}

void layernorm::backward_weight(const tensor& dy, saved_activations& saved) {
  check_last_dim(dy, channels_, "layernorm", "output gradient");
  const tensor& x = saved.tensors.at(0);
  if (!sum_over_) {
    ops_on(dy).layernorm_backward(nullptr, grads_, grads_ + channels_, f32(dy), f32(x), params_,
                                  f32(saved.tensors.at(1)), f32(saved.tensors.at(2)), x.numel() / channels_, channels_);
    return;
  }
  const device_ops& k = ops_on(dy);
  tensor partial = k.zeros({2 * channels_});  // weight, then bias: as in grads_
  k.layernorm_backward(nullptr, f32_out(partial), f32_out(partial) + channels_, f32(dy), f32(x), params_,
                       f32(saved.tensors.at(1)), f32(saved.tensors.at(2)), x.numel() / channels_, channels_);
  sp::add_summed(sum_over_, grads_, partial);
}

// ---- gelu ----

tensor gelu::forward(const tensor& x, saved_activations& saved) const {
  const device_ops& k = ops_on(x);
  tensor y = k.empty(x.shape());
  k.gelu_forward(f32_out(y), f32(x), x.numel());
  saved.tensors = {x};
  return y;
}

tensor gelu::backward_input(const tensor& dy, saved_activations& saved) const {
  const tensor& x = saved.tensors.at(0);
  const device_ops& k = ops_on(dy);
  tensor dx = k.empty(x.shape());
  k.gelu_backward(f32_out(dx), f32(x), f32(dy), x.numel());
  return dx;
}

// ---- transformer_block ----

namespace {
// Slots of the block's saved tensors. Forward fills x .. gelu_out; backward_input adds the
// g_* gradients and clears qkv, att and fc, which backward_weight does not need.
enum slot : size_t {
  s_x, s_ln1_mean, s_ln1_rstd, s_ln1_out, s_qkv, s_att, s_att_out,
  s_x2, s_ln2_mean, s_ln2_rstd, s_ln2_out, s_fc, s_gelu_out, num_forward_slots,
  g_ln1_out = num_forward_slots, g_qkv, g_x2, g_ln2_out, g_fc, num_slots
};
}  // namespace

namespace {
bool channels_ok(int64_t channels, int64_t heads) {
  if (channels <= 0 || heads <= 0 || channels % heads != 0)
    throw std::invalid_argument("transformer_block: channels (" + std::to_string(channels) +
                                ") must be a positive multiple of heads (" + std::to_string(heads) + ")");
  return true;
}
// The heads of rank r: one run from each third of the packed q | k | v rows.
std::vector<shard_range> head_rows(int64_t C, int64_t heads, tp_group* g) {
  const int tp = tp_size(g);
  if (channels_ok(C, heads) && heads % tp != 0)
    throw std::invalid_argument("transformer_block: heads (" + std::to_string(heads) +
                                ") must be divisible by the tensor-parallel size (" + std::to_string(tp) + ")");
  const int64_t per = heads > 0 && tp > 0 ? C / tp : 0, at = per * tp_rank(g);
  return {{at, per}, {C + at, per}, {2 * C + at, per}};
}
}  // namespace

transformer_block::transformer_block(int64_t channels, int64_t heads, float proj_std, tp_group* g,
                                     bool sequence_parallel, context::context_split context)
    : channels_(channels), heads_(heads), proj_std_(proj_std), group_(g), context_(context), ln1_(channels, sequence_parallel ? g : nullptr),
      qkv_(channels, 3 * channels, head_rows(channels, heads, g), g),
      proj_(channels, channels, head_rows(channels, heads, g).front(), g), ln2_(channels, sequence_parallel ? g : nullptr),
      fc_(channels, 4 * channels, {shard_of(4 * channels, tp_size(g), tp_rank(g))}, g),
      fc_proj_(4 * channels, channels, shard_of(4 * channels, tp_size(g), tp_rank(g)), g) {
  local_heads_ = heads / tp_size(g);
  local_channels_ = channels / tp_size(g);
  if (const std::string why = context::refuses(context_.mode, local_heads_, tp_size(context_.group)); !why.empty())
    throw std::invalid_argument(why);
  for (parallel_linear* l : {static_cast<parallel_linear*>(&qkv_), static_cast<parallel_linear*>(&proj_),
                             static_cast<parallel_linear*>(&fc_), static_cast<parallel_linear*>(&fc_proj_)})
    l->set_sequence_parallel(sequence_parallel);
  offset_[0] = full_offset_[0] = 0;
  for (int i = 0; i < num_parts; ++i) {
    offset_[i + 1] = offset_[i] + part(i)->num_params();
    full_offset_[i + 1] = full_offset_[i] + part(i)->full_params();
  }
}

const layer* transformer_block::part(int i) const {
  const layer* parts[num_parts] = {&ln1_, &qkv_, &proj_, &ln2_, &fc_, &fc_proj_};
  return parts[i];
}

int64_t transformer_block::offset_of(const layer& sub) const {
  for (int i = 0; i < num_parts; ++i)
    if (part(i) == &sub) return offset_[i];
  throw std::invalid_argument("transformer_block: offset_of a layer that is not one of its parts");
}

std::vector<param_run> transformer_block::full_runs() const {
  std::vector<param_run> runs;
  for (int i = 0; i < num_parts; ++i)
    for (param_run r : part(i)->full_runs()) runs.push_back({full_offset_[i] + r.offset, r.count});
  return runs;
}

std::vector<param_spec> transformer_block::param_specs() const {
  const char* prefix[num_parts] = {"ln1", "attn.qkv", "attn.proj", "ln2", "mlp.fc", "mlp.proj"};
  std::vector<param_spec> specs;
  for (int i = 0; i < num_parts; ++i)
    for (auto& s : part(i)->param_specs()) specs.push_back({std::string(prefix[i]) + "." + s.name, s.shape});
  return specs;
}

void transformer_block::init(float* params, std::mt19937_64& rng) const {
  if (tp_size(group_) == 1) return init_full(params, rng);
  // The unsplit block's values, then this rank's share: every tp degree starts where one device does.
  const transformer_block whole(channels_, heads_, proj_std_);
  std::vector<float> full(static_cast<size_t>(full_params()));
  whole.init_full(full.data(), rng);
  gather_runs(params, full.data(), full_runs());
}

void transformer_block::init_full(float* params, std::mt19937_64& rng) const {
  std::fill(params, params + offset_[num_parts], 0.0f);  // every bias starts at zero
  ln1_.init(params + offset_[ln1_at], rng);
  ln2_.init(params + offset_[ln2_at], rng);
  const std::pair<int, float> linears[] = {
      {qkv_at, gpt2_init_std}, {proj_at, proj_std_}, {fc_at, gpt2_init_std}, {fc_proj_at, proj_std_}};
  for (const auto& [at, std] : linears) {
    const auto& l = static_cast<const parallel_linear&>(*part(at));
    fill_normal(params + offset_[at], l.in_features() * l.out_features(), std, rng);
  }
}

void transformer_block::bind(const float* params, float* grads) {
  layer::bind(params, grads);
  layer* parts[num_parts] = {&ln1_, &qkv_, &proj_, &ln2_, &fc_, &fc_proj_};
  for (int i = 0; i < num_parts; ++i)
    parts[i]->bind(params ? params + offset_[i] : nullptr, grads ? grads + offset_[i] : nullptr);
}

void transformer_block::set_matmul_precision(matmul_precision p) {
  layer::set_matmul_precision(p);
  for (parallel_linear* l : std::initializer_list<parallel_linear*>{&qkv_, &proj_, &fc_, &fc_proj_})
    l->set_matmul_precision(p);
}

void transformer_block::attend(const device_ops& k, tensor& out, tensor& state, const tensor& qkv) const {
  context::attend(k, context_, out, state, qkv, local_channels_, local_heads_);
}

tensor transformer_block::attend_backward(const device_ops& k, const tensor& dout, const tensor& qkv,
                                          const tensor& state) const {
  return context::attend_backward(k, context_, dout, qkv, state, local_channels_, local_heads_);
}

tensor transformer_block::forward(const tensor& x, saved_activations& saved) const {
  if (x.rank() != 3 || x.size(2) != channels_)
    throw std::invalid_argument("transformer_block: input has shape " + to_string(x.shape()) +
                                ", expected (B, T, " + std::to_string(channels_) + ")");
  const device_ops& k = ops_on(x);
  std::vector<tensor> s(num_forward_slots);
  saved_activations tmp;
  s[s_x] = x;
  s[s_ln1_out] = ln1_.forward(x, tmp);
  s[s_ln1_mean] = tmp.tensors.at(1);
  s[s_ln1_rstd] = tmp.tensors.at(2);
  // Each linear's input slot keeps what the linear kept: at bf16, the rounding its product took.
  s[s_qkv] = qkv_.forward(s[s_ln1_out], tmp);
  s[s_ln1_out] = tmp.tensors.at(0);
  // Every sequence of the microbatch (more than x's under sequence parallelism).
  attend(k, s[s_att_out], s[s_att], s[s_qkv]);
  s[s_x2] = proj_.forward(s[s_att_out], tmp);
  s[s_att_out] = tmp.tensors.at(0);
  add_into(s[s_x2], x);  // residual: x2 = x + proj(...)
  s[s_ln2_out] = ln2_.forward(s[s_x2], tmp);
  s[s_ln2_mean] = tmp.tensors.at(1);
  s[s_ln2_rstd] = tmp.tensors.at(2);
  s[s_fc] = fc_.forward_unbiased(s[s_ln2_out], tmp);  // its bias is added in the GELU's pass
  s[s_ln2_out] = tmp.tensors.at(0);
  s[s_gelu_out] = k.empty(s[s_fc].shape());
  k.bias_gelu_forward(f32_out(s[s_gelu_out]), f32_out(s[s_fc]), fc_.bias_values(), s[s_fc].numel() / fc_.out_features(),
                      fc_.out_features());
  tensor y = fc_proj_.forward(s[s_gelu_out], tmp);
  s[s_gelu_out] = tmp.tensors.at(0);
  add_into(y, s[s_x2]);  // residual: y = x2 + mlp(...)
  if (selective_ && !context_) s[s_att] = tensor();
  saved.tensors = std::move(s);
  return y;
}

tensor transformer_block::backward_input(const tensor& dy, saved_activations& saved) const {
  auto& s = saved.tensors;
  if (s.size() != num_forward_slots) throw std::logic_error("transformer_block: backward_input without forward");
  if (dy.shape() != s[s_x].shape())
    throw std::invalid_argument("transformer_block: output gradient has shape " + to_string(dy.shape()) +
                                ", input was " + to_string(s[s_x].shape()));
  const device_ops& k = ops_on(dy);
  tensor d_gelu_out = input_grad(fc_proj_, dy, {s[s_gelu_out]});
  tensor d_fc = input_grad(gelu_, d_gelu_out, {s[s_fc]});
  tensor d_ln2_out = input_grad(fc_, d_fc, {s[s_ln2_out]});
  tensor d_x2 = input_grad(ln2_, d_ln2_out, {s[s_x2], s[s_ln2_mean], s[s_ln2_rstd]});
  add_into(d_x2, dy);  // the residual passes dy straight through
  tensor d_att_out = input_grad(proj_, d_x2, {s[s_att_out]});
  if (s[s_att].empty()) {  // selective recomputation: the scores again, from the kept qkv
    tensor unused;
    attend(k, unused, s[s_att], s[s_qkv]);
  }
  tensor d_qkv = attend_backward(k, d_att_out, s[s_qkv], s[s_att]);
  tensor d_ln1_out = input_grad(qkv_, d_qkv, {s[s_ln1_out]});
  tensor dx = input_grad(ln1_, d_ln1_out, {s[s_x], s[s_ln1_mean], s[s_ln1_rstd]});
  add_into(dx, d_x2);
  // Keep what backward_weight needs; a zero-bubble schedule holds this between B and W.
  s[s_qkv] = s[s_att] = s[s_fc] = tensor();
  s.resize(num_slots);
  s[g_ln1_out] = std::move(d_ln1_out);
  s[g_qkv] = std::move(d_qkv);
  s[g_x2] = std::move(d_x2);
  s[g_ln2_out] = std::move(d_ln2_out);
  s[g_fc] = std::move(d_fc);
  return dx;
}

void transformer_block::backward_weight(const tensor& dy, saved_activations& saved) {
  // layer_stack skips backward_input on its first layer when nobody wants dL/dx; the internal
  // gradients are needed all the same.
  if (saved.tensors.size() == num_forward_slots) backward_input(dy, saved);
  auto& s = saved.tensors;
  if (s.size() != num_slots) throw std::logic_error("transformer_block: backward_weight without forward");
  weight_grad(fc_proj_, dy, {s[s_gelu_out]});
  weight_grad(fc_, s[g_fc], {s[s_ln2_out]});
  weight_grad(ln2_, s[g_ln2_out], {s[s_x2], s[s_ln2_mean], s[s_ln2_rstd]});
  weight_grad(proj_, s[g_x2], {s[s_att_out]});
  weight_grad(qkv_, s[g_qkv], {s[s_ln1_out]});
  weight_grad(ln1_, s[g_ln1_out], {s[s_x], s[s_ln1_mean], s[s_ln1_rstd]});
}

}  // namespace troupe
