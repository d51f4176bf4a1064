// A mixture-of-experts MLP on the CPU (see layers_moe.hpp): the router and the experts through
// ops.hpp's matmul and GELU, the tokens moved by moe_routing.hpp.
#include "kernels/layers_moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"

namespace troupe {

namespace {

// saved.tensors after forward: x, the router's logits, how many rows each rank of the expert group
// sent each local expert, then per local expert its input rows (every rank's, in rank order) and
// its pre-GELU rows, then per expert (all E) the output rows that came back for this rank's
// tokens. backward_input routes again from the logits (a routing is no tensor to keep) and appends
// what backward_weight needs, so that half neither routes nor moves tokens: the logits' gradient,
// then per local expert its output's gradient and its pre-GELU rows' gradient.
constexpr size_t kX = 0, kLogits = 1, kFrom = 2, kLocal = 3;

tensor rows_tensor(std::vector<float> v, int64_t width) {
  const int64_t n = width > 0 ? static_cast<int64_t>(v.size()) / width : 0;
  return tensor({n, width}, v);
}

void require_cpu(const tensor& t, const char* what) {
  if (!t.where().is_cpu()) throw std::invalid_argument(std::string("moe_mlp: ") + what + " is not on the CPU; the layer runs on the CPU only");
}

int64_t rows_of(const std::vector<float>& v, int64_t H) { return static_cast<int64_t>(v.size()) / H; }

}  // namespace

moe_mlp::moe_mlp(int64_t channels, int64_t hidden, moe_options o, tp_group* experts_group)
    : C_(channels), F_(hidden), o_(o), group_(tp_size(experts_group) > 1 ? experts_group : nullptr),
      ranks_(tp_size(group_)), rank_(tp_rank(group_)) {
  if (C_ < 1 || F_ < 1 || o_.experts < 1 || o_.top_k < 1 || o_.top_k > o_.experts || !(o_.capacity_factor >= 0))
    throw std::invalid_argument("moe_mlp: " + std::to_string(o_.experts) + " experts, top-" + std::to_string(o_.top_k) +
                                ", capacity factor " + std::to_string(o_.capacity_factor) +
                                ": need top_k between 1 and the experts and a factor >= 0");
  if (o_.experts % ranks_ != 0)
    throw std::invalid_argument("moe_mlp: " + std::to_string(o_.experts) + " experts do not split evenly over an expert group of " +
                                std::to_string(ranks_));
  local_ = o_.experts / ranks_;
  first_ = rank_ * local_;
}

std::vector<param_spec> moe_mlp::param_specs() const {
  std::vector<param_spec> specs{{"router.weight", {o_.experts, C_}}};
  for (int64_t e = first_; e < first_ + local_; ++e) {
    const std::string p = "experts." + std::to_string(e) + ".";
    specs.push_back({p + "fc.weight", {F_, C_}});
    specs.push_back({p + "fc.bias", {F_}});
    specs.push_back({p + "proj.weight", {C_, F_}});
    specs.push_back({p + "proj.bias", {C_}});
  }
  return specs;
}

std::vector<param_run> moe_mlp::full_runs() const {
  const int64_t router = o_.experts * C_;
  return {{0, router}, {router + first_ * expert_params(), local_ * expert_params()}};
}

void moe_mlp::init(float* params, std::mt19937_64& rng) const {
  // PyTorch Linear's default, per matrix: uniform within 1/sqrt(fan in). Drawn for every expert,
  // so a rank of an expert group holds its experts' single-device values.
  const float by_c = 1.0f / std::sqrt(static_cast<float>(C_)), by_f = 1.0f / std::sqrt(static_cast<float>(F_));
  std::vector<float> full(static_cast<size_t>(full_params()));
  fill_uniform(full.data(), o_.experts * C_, by_c, rng);
  float* p = full.data() + o_.experts * C_;
  for (int64_t e = 0; e < o_.experts; ++e, p += expert_params()) {
    fill_uniform(p, F_ * C_ + F_, by_c, rng);
    fill_uniform(p + F_ * C_ + F_, C_ * F_ + C_, by_f, rng);
  }
  int64_t at = 0;
  for (const param_run& r : full_runs()) {
    std::copy(full.data() + r.offset, full.data() + r.offset + r.count, params + at);
    at += r.count;
  }
}

moe::routing moe_mlp::route(const float* logits, int64_t N) const {
  return moe::route(logits, N, o_.experts, o_.top_k, moe::capacity_for(o_.capacity_factor, N, o_.experts, o_.top_k),
                    o_.normalize_top_k, o_.aux_coefficient);
}

std::vector<std::vector<float>> moe_mlp::to_owners(std::vector<std::vector<float>> per_expert, int64_t H,
                                                   std::vector<int64_t>& from) const {
  const int P = ranks_;
  const int64_t L = local_;
  if (!group_) {
    if (from.empty())
      for (const auto& rows : per_expert) from.push_back(rows_of(rows, H));
    return per_expert;
  }
  const std::vector<int64_t> per_rank(static_cast<size_t>(P), L);
  if (from.empty()) {  // the owners learn how many rows of each rank's to expect for each expert
    std::vector<float> counts, got(static_cast<size_t>(P * L));
    for (const auto& rows : per_expert) counts.push_back(static_cast<float>(rows_of(rows, H)));
    group_->all_to_all(counts.data(), per_rank, got.data(), per_rank);
    for (float c : got) from.push_back(static_cast<int64_t>(c));
  }
  std::vector<float> send;
  std::vector<int64_t> send_counts(static_cast<size_t>(P), 0), recv_counts(static_cast<size_t>(P), 0);
  for (int64_t e = 0; e < o_.experts; ++e) {  // an owner's experts are contiguous: blocks in owner order
    const auto& rows = per_expert[static_cast<size_t>(e)];
    send.insert(send.end(), rows.begin(), rows.end());
    send_counts[static_cast<size_t>(e / L)] += static_cast<int64_t>(rows.size());
  }
  for (int o = 0; o < P; ++o)
    for (int64_t j = 0; j < L; ++j) recv_counts[static_cast<size_t>(o)] += from[static_cast<size_t>(o * L + j)] * H;
  std::vector<float> got(static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})));
  group_->all_to_all(send.data(), send_counts, got.data(), recv_counts);
  std::vector<std::vector<float>> out(static_cast<size_t>(L));
  int64_t at = 0;
  for (int o = 0; o < P; ++o)
    for (int64_t j = 0; j < L; ++j) {
      const int64_t n = from[static_cast<size_t>(o * L + j)] * H;
      out[static_cast<size_t>(j)].insert(out[static_cast<size_t>(j)].end(), got.begin() + at, got.begin() + at + n);
      at += n;
    }
  return out;
}

std::vector<std::vector<float>> moe_mlp::to_origins(std::vector<std::vector<float>> per_local, int64_t H,
                                                    const std::vector<int64_t>& from,
                                                    const std::vector<int64_t>& load) const {
  if (!group_) return per_local;
  const int P = ranks_;
  const int64_t L = local_;
  std::vector<float> send;
  std::vector<int64_t> send_counts(static_cast<size_t>(P), 0), recv_counts(static_cast<size_t>(P), 0),
      at(static_cast<size_t>(L), 0);
  for (int o = 0; o < P; ++o)
    for (int64_t j = 0; j < L; ++j) {
      const int64_t n = from[static_cast<size_t>(o * L + j)] * H;
      const auto& rows = per_local[static_cast<size_t>(j)];
      send.insert(send.end(), rows.begin() + at[static_cast<size_t>(j)], rows.begin() + at[static_cast<size_t>(j)] + n);
      at[static_cast<size_t>(j)] += n;
      send_counts[static_cast<size_t>(o)] += n;
    }
  for (int64_t e = 0; e < o_.experts; ++e) recv_counts[static_cast<size_t>(e / L)] += load[static_cast<size_t>(e)] * H;
  std::vector<float> got(static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})));
  group_->all_to_all(send.data(), send_counts, got.data(), recv_counts);
  std::vector<std::vector<float>> out(static_cast<size_t>(o_.experts));
  int64_t from_q = 0;
  for (int64_t e = 0; e < o_.experts; ++e) {  // owner by owner, each owner's experts in order
    const int64_t n = load[static_cast<size_t>(e)] * H;
    out[static_cast<size_t>(e)].assign(got.begin() + from_q, got.begin() + from_q + n);
    from_q += n;
  }
  return out;
}

tensor moe_mlp::forward(const tensor& x, saved_activations& saved) const {
  require_cpu(x, "the input");
  if (x.rank() < 1 || x.size(-1) != C_)
    throw std::invalid_argument("moe_mlp: input has shape " + to_string(x.shape()) + ", expected last dimension " +
                                std::to_string(C_));
  const int64_t N = x.numel() / C_, E = o_.experts;
  tensor logits({N, E});
  ops::matmul_forward(logits.data(), x.data(), params_, nullptr, N, C_, E);
  last_ = route(logits.data(), N);
  std::vector<int64_t> from;
  std::vector<std::vector<float>> in = to_owners(moe::dispatch(last_, x.data(), C_), C_, from);
  std::vector<float> from_values(from.begin(), from.end());
  saved.tensors = {x, logits, tensor({static_cast<int64_t>(from.size())}, from_values)};
  std::vector<std::vector<float>> outs(static_cast<size_t>(local_));
  for (int64_t j = 0; j < local_; ++j) {
    const float* w = params_ + E * C_ + j * expert_params();
    const int64_t n = rows_of(in[static_cast<size_t>(j)], C_);
    std::vector<float> h(static_cast<size_t>(n * F_)), a(static_cast<size_t>(n * F_));
    outs[static_cast<size_t>(j)].assign(static_cast<size_t>(n * C_), 0.0f);
    if (n > 0) {
      ops::matmul_forward(h.data(), in[static_cast<size_t>(j)].data(), w, w + F_ * C_, n, C_, F_);
      ops::gelu_forward(a.data(), h.data(), n * F_);
      ops::matmul_forward(outs[static_cast<size_t>(j)].data(), a.data(), w + F_ * C_ + F_, w + F_ * C_ + F_ + C_ * F_,
                          n, F_, C_);
    }
    saved.tensors.push_back(rows_tensor(std::move(in[static_cast<size_t>(j)]), C_));
    saved.tensors.push_back(rows_tensor(std::move(h), F_));
  }
  std::vector<std::vector<float>> back = to_origins(std::move(outs), C_, from, last_.load);
  tensor y(x.shape());
  moe::combine(last_, back, C_, y.data());
  for (auto& o : back) saved.tensors.push_back(rows_tensor(std::move(o), C_));
  return y;
}

tensor moe_mlp::backward_input(const tensor& dy, saved_activations& saved) const {
  require_cpu(dy, "the output gradient");
  const tensor& x = saved.tensors.at(kX);
  const tensor& logits = saved.tensors.at(kLogits);
  const int64_t N = x.numel() / C_, E = o_.experts;
  const size_t outs_at = kLocal + static_cast<size_t>(2 * local_);
  const moe::routing r = route(logits.data(), N);
  std::vector<std::vector<float>> outs(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const tensor& o = saved.tensors.at(outs_at + static_cast<size_t>(e));
    outs[static_cast<size_t>(e)].assign(o.data(), o.data() + o.numel());
  }
  moe::combine_grads g = moe::combine_backward(r, outs, dy.data(), C_, o_.normalize_top_k, o_.aux_coefficient);
  tensor dx(x.shape());
  ops::matmul_backward_input(dx.data(), g.logits.data(), params_, N, C_, E);  // the router's share
  const tensor& from_t = saved.tensors.at(kFrom);
  std::vector<int64_t> from(from_t.data(), from_t.data() + from_t.numel());
  std::vector<std::vector<float>> dout = to_owners(std::move(g.expert_out), C_, from);
  std::vector<std::vector<float>> din(static_cast<size_t>(local_));
  std::vector<tensor> dh_rows(static_cast<size_t>(local_));
  for (int64_t j = 0; j < local_; ++j) {
    const float* w = params_ + E * C_ + j * expert_params();
    const tensor& h = saved.tensors.at(kLocal + static_cast<size_t>(2 * j + 1));
    const int64_t n = h.numel() / F_;
    std::vector<float> da(static_cast<size_t>(n * F_)), dh(static_cast<size_t>(n * F_));
    din[static_cast<size_t>(j)].assign(static_cast<size_t>(n * C_), 0.0f);
    if (n > 0) {
      ops::matmul_backward_input(da.data(), dout[static_cast<size_t>(j)].data(), w + F_ * C_ + F_, n, F_, C_);
      ops::gelu_backward(dh.data(), h.data(), da.data(), n * F_);
      ops::matmul_backward_input(din[static_cast<size_t>(j)].data(), dh.data(), w, n, C_, F_);
    }
    dh_rows[static_cast<size_t>(j)] = rows_tensor(std::move(dh), F_);
  }
  std::vector<float> routed_dx(static_cast<size_t>(N * C_), 0.0f);
  moe::dispatch_backward(r, to_origins(std::move(din), C_, from, r.load), C_, routed_dx.data());
  ops::add_into(dx.data(), routed_dx.data(), N * C_);
  saved.tensors.push_back(tensor({N, E}, g.logits));
  for (int64_t j = 0; j < local_; ++j) {
    saved.tensors.push_back(rows_tensor(std::move(dout[static_cast<size_t>(j)]), C_));
    saved.tensors.push_back(std::move(dh_rows[static_cast<size_t>(j)]));
  }
  return dx;
}

void moe_mlp::backward_weight(const tensor& dy, saved_activations& saved) {
  const int64_t E = o_.experts;
  const size_t grads_at = kLocal + static_cast<size_t>(2 * local_ + E);
  if (saved.tensors.size() == grads_at) backward_input(dy, saved);  // the first layer of a model
  const tensor& x = saved.tensors.at(kX);
  const int64_t N = x.numel() / C_;
  ops::matmul_backward_weight(grads_, nullptr, saved.tensors.at(grads_at).data(), x.data(), N, C_, E);
  for (int64_t j = 0; j < local_; ++j) {
    const tensor& in = saved.tensors.at(kLocal + static_cast<size_t>(2 * j));
    const tensor& h = saved.tensors.at(kLocal + static_cast<size_t>(2 * j + 1));
    const int64_t n = h.numel() / F_;  // the tokens expert first_ + j took, over the group
    if (n == 0) continue;
    float* gw = grads_ + E * C_ + j * expert_params();
    const tensor& dout = saved.tensors.at(grads_at + 1 + static_cast<size_t>(2 * j));
    const tensor& dh = saved.tensors.at(grads_at + 2 + static_cast<size_t>(2 * j));
    std::vector<float> a(static_cast<size_t>(n * F_));
    ops::gelu_forward(a.data(), h.data(), n * F_);
    ops::matmul_backward_weight(gw + F_ * C_ + F_, gw + F_ * C_ + F_ + C_ * F_, dout.data(), a.data(), n, F_, C_);
    ops::matmul_backward_weight(gw, gw + F_ * C_, dh.data(), in.data(), n, C_, F_);
  }
}

}  // namespace troupe
