// A mixture-of-experts MLP on the CPU (see layers_moe.hpp): the router and the experts through
// ops.hpp's matmul and GELU, the tokens moved by moe_routing.hpp.
#include "kernels/layers_moe.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/ops.hpp"

namespace troupe {

namespace {

// saved.tensors after forward: x, the router's logits, then per expert its pre-GELU rows and its
// output rows. backward_input routes again from the logits (a routing is no tensor to keep) and
// appends what backward_weight needs, so that half neither routes nor moves tokens: the logits'
// gradient, then per expert its output's gradient, its pre-GELU rows' gradient and its input rows.
constexpr size_t kX = 0, kLogits = 1, kExperts = 2;

tensor rows_tensor(std::vector<float> v, int64_t width) {
  const int64_t n = width > 0 ? static_cast<int64_t>(v.size()) / width : 0;
  return tensor({n, width}, v);
}

void require_cpu(const tensor& t, const char* what) {
  if (!t.where().is_cpu()) throw std::invalid_argument(std::string("moe_mlp: ") + what + " is not on the CPU; the layer runs on the CPU only");
}

}  // namespace

moe_mlp::moe_mlp(int64_t channels, int64_t hidden, moe_options o) : C_(channels), F_(hidden), o_(o) {
  if (C_ < 1 || F_ < 1 || o_.experts < 1 || o_.top_k < 1 || o_.top_k > o_.experts || !(o_.capacity_factor >= 0))
    throw std::invalid_argument("moe_mlp: " + std::to_string(o_.experts) + " experts, top-" + std::to_string(o_.top_k) +
                                ", capacity factor " + std::to_string(o_.capacity_factor) +
                                ": need top_k between 1 and the experts and a factor >= 0");
}

std::vector<param_spec> moe_mlp::param_specs() const {
  std::vector<param_spec> specs{{"router.weight", {o_.experts, C_}}};
  for (int64_t e = 0; e < o_.experts; ++e) {
    const std::string p = "experts." + std::to_string(e) + ".";
    specs.push_back({p + "fc.weight", {F_, C_}});
    specs.push_back({p + "fc.bias", {F_}});
    specs.push_back({p + "proj.weight", {C_, F_}});
    specs.push_back({p + "proj.bias", {C_}});
  }
  return specs;
}

void moe_mlp::init(float* params, std::mt19937_64& rng) const {
  // PyTorch Linear's default, per matrix: uniform within 1/sqrt(fan in).
  const float by_c = 1.0f / std::sqrt(static_cast<float>(C_)), by_f = 1.0f / std::sqrt(static_cast<float>(F_));
  fill_uniform(params, o_.experts * C_, by_c, rng);
  float* p = params + o_.experts * C_;
  for (int64_t e = 0; e < o_.experts; ++e, p += expert_params()) {
    fill_uniform(p, F_ * C_ + F_, by_c, rng);
    fill_uniform(p + F_ * C_ + F_, C_ * F_ + C_, by_f, rng);
  }
}

moe::routing moe_mlp::route(const float* logits, int64_t N) const {
  return moe::route(logits, N, o_.experts, o_.top_k, moe::capacity_for(o_.capacity_factor, N, o_.experts, o_.top_k),
                    o_.normalize_top_k, o_.aux_coefficient);
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
  const std::vector<std::vector<float>> in = moe::dispatch(last_, x.data(), C_);
  saved.tensors = {x, logits};
  std::vector<std::vector<float>> outs(static_cast<size_t>(E));
  std::vector<tensor> pre(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const float* w = params_ + E * C_ + e * expert_params();
    const int64_t n = last_.load[static_cast<size_t>(e)];
    std::vector<float> h(static_cast<size_t>(n * F_)), a(static_cast<size_t>(n * F_));
    outs[static_cast<size_t>(e)].assign(static_cast<size_t>(n * C_), 0.0f);
    if (n > 0) {
      ops::matmul_forward(h.data(), in[static_cast<size_t>(e)].data(), w, w + F_ * C_, n, C_, F_);
      ops::gelu_forward(a.data(), h.data(), n * F_);
      ops::matmul_forward(outs[static_cast<size_t>(e)].data(), a.data(), w + F_ * C_ + F_, w + F_ * C_ + F_ + C_ * F_,
                          n, F_, C_);
    }
    pre[static_cast<size_t>(e)] = rows_tensor(std::move(h), F_);
  }
  tensor y(x.shape());
  moe::combine(last_, outs, C_, y.data());
  for (tensor& t : pre) saved.tensors.push_back(std::move(t));
  for (auto& o : outs) saved.tensors.push_back(rows_tensor(std::move(o), C_));
  return y;
}

tensor moe_mlp::backward_input(const tensor& dy, saved_activations& saved) const {
  require_cpu(dy, "the output gradient");
  const tensor& x = saved.tensors.at(kX);
  const tensor& logits = saved.tensors.at(kLogits);
  const int64_t N = x.numel() / C_, E = o_.experts;
  const moe::routing r = route(logits.data(), N);
  std::vector<std::vector<float>> outs(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const tensor& o = saved.tensors.at(kExperts + static_cast<size_t>(E + e));
    outs[static_cast<size_t>(e)].assign(o.data(), o.data() + o.numel());
  }
  moe::combine_grads g = moe::combine_backward(r, outs, dy.data(), C_, o_.normalize_top_k, o_.aux_coefficient);
  tensor dx(x.shape());
  ops::matmul_backward_input(dx.data(), g.logits.data(), params_, N, C_, E);  // the router's share
  std::vector<std::vector<float>> din(static_cast<size_t>(E));
  std::vector<tensor> dpre(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const float* w = params_ + E * C_ + e * expert_params();
    const int64_t n = r.load[static_cast<size_t>(e)];
    const tensor& h = saved.tensors.at(kExperts + static_cast<size_t>(e));
    std::vector<float> da(static_cast<size_t>(n * F_)), dh(static_cast<size_t>(n * F_));
    din[static_cast<size_t>(e)].assign(static_cast<size_t>(n * C_), 0.0f);
    if (n > 0) {
      ops::matmul_backward_input(da.data(), g.expert_out[static_cast<size_t>(e)].data(), w + F_ * C_ + F_, n, F_, C_);
      ops::gelu_backward(dh.data(), h.data(), da.data(), n * F_);
      ops::matmul_backward_input(din[static_cast<size_t>(e)].data(), dh.data(), w, n, C_, F_);
    }
    dpre[static_cast<size_t>(e)] = rows_tensor(std::move(dh), F_);
  }
  std::vector<float> routed_dx(static_cast<size_t>(N * C_), 0.0f);
  moe::dispatch_backward(r, din, C_, routed_dx.data());
  ops::add_into(dx.data(), routed_dx.data(), N * C_);
  std::vector<std::vector<float>> in = moe::dispatch(r, x.data(), C_);  // before x's vector grows below
  saved.tensors.push_back(tensor({N, E}, g.logits));
  for (int64_t e = 0; e < E; ++e) saved.tensors.push_back(rows_tensor(std::move(g.expert_out[static_cast<size_t>(e)]), C_));
  for (tensor& t : dpre) saved.tensors.push_back(std::move(t));
  for (auto& rows : in) saved.tensors.push_back(rows_tensor(std::move(rows), C_));
  return dx;
}

void moe_mlp::backward_weight(const tensor& dy, saved_activations& saved) {
  const int64_t E = o_.experts;
  if (saved.tensors.size() == kExperts + static_cast<size_t>(2 * E)) backward_input(dy, saved);  // the first layer of a model
  const tensor& x = saved.tensors.at(kX);
  const int64_t N = x.numel() / C_;
  const size_t grads_at = kExperts + static_cast<size_t>(2 * E);
  ops::matmul_backward_weight(grads_, nullptr, saved.tensors.at(grads_at).data(), x.data(), N, C_, E);
  for (int64_t e = 0; e < E; ++e) {
    const tensor& h = saved.tensors.at(kExperts + static_cast<size_t>(e));
    const int64_t n = h.numel() / F_;  // the tokens expert e took
    if (n == 0) continue;
    float* gw = grads_ + E * C_ + e * expert_params();
    const tensor& dout = saved.tensors.at(grads_at + 1 + static_cast<size_t>(e));
    const tensor& dh = saved.tensors.at(grads_at + 1 + static_cast<size_t>(E + e));
    const tensor& in = saved.tensors.at(grads_at + 1 + static_cast<size_t>(2 * E + e));
    std::vector<float> a(static_cast<size_t>(n * F_));
    ops::gelu_forward(a.data(), h.data(), n * F_);
    ops::matmul_backward_weight(gw + F_ * C_ + F_, gw + F_ * C_ + F_ + C_ * F_, dout.data(), a.data(), n, F_, C_);
    ops::matmul_backward_weight(gw, gw + F_ * C_, dh.data(), in.data(), n, C_, F_);
  }
}

}  // namespace troupe
