// SGD with momentum and AdamW, element-wise over a flat shard, each update one fused pass (read
// parameter, gradient and state once, write them once) over fixed ranges on the device's threads
// (parallel.hpp): an element's update never depends on which thread ran it.
#include "kernels/optimizer.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/parallel.hpp"

namespace troupe {

const char* to_string(optimizer_kind k) {
  switch (k) {
    case optimizer_kind::adamw: return "adamw";
    case optimizer_kind::sgd: return "sgd";
  }
  return "?";
}

std::optional<optimizer_kind> parse_optimizer_kind(const std::string& text) {
  for (optimizer_kind k : {optimizer_kind::adamw, optimizer_kind::sgd})
    if (text == to_string(k)) return k;
  return std::nullopt;
}

void validate(const optimizer_config& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("optimizer." + what); };
  if (!(c.lr > 0.0f) || !std::isfinite(c.lr)) bad("lr must be a positive number, got " + std::to_string(c.lr));
  if (!(c.weight_decay >= 0.0f)) bad("weight_decay must be >= 0");
  if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) bad("momentum must be in [0, 1)");
  if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) bad("beta1 must be in [0, 1)");
  if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) bad("beta2 must be in [0, 1)");
  if (!(c.eps > 0.0f)) bad("eps must be positive");
}

void optimizer::check_size(int64_t n) const {
  if (n != shard_size_)
    throw std::invalid_argument("optimizer: step over " + std::to_string(n) + " values, shard holds " +
                                std::to_string(shard_size_));
}

void optimizer::step(float* out, const float* params, const float* grads, int64_t n) {
  check_size(n);
  const int k = state_floats();
  if (static_cast<int64_t>(state_.size()) != k * shard_size_)
    throw std::logic_error("optimizer: step() on an optimizer whose state is external; use update_tile");
  float* arrays[2] = {state_.data(), state_.data() + shard_size_};
  begin_step();
  update_tile(out, params, grads, arrays, n);
}

void optimizer::restore(int64_t steps, std::vector<float> state) {
  if (steps < 0) throw std::invalid_argument("optimizer: restoring a negative step count " + std::to_string(steps));
  if (state.size() != state_.size())
    throw std::invalid_argument("optimizer: a saved state of " + std::to_string(state.size()) + " floats for one that keeps " +
                                std::to_string(state_.size()) + " (" + std::to_string(state_floats()) + " x " +
                                std::to_string(shard_size_) + ")");
  steps_ = steps;
  state_ = std::move(state);
}

namespace {

struct adamw_constants {
  float b1, b2, eps, step_size, bc2_sqrt, decay;
};

// One range of the update, restrict-qualified: without it GCC must assume m and v alias the
// parameters and leaves the loop scalar (it ran at a third of the speed inside parallel_for).
// out may be p itself (an in-place step), so only m and v are restrict.
void adamw_range(float* out, const float* p, const float* g, float* __restrict m, float* __restrict v, int64_t n,
                 const adamw_constants k) {
  for (int64_t i = 0; i < n; ++i) {
    const float decayed = p[i] * k.decay;
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * g[i];
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * g[i] * g[i];
    out[i] = decayed - k.step_size * m[i] / (std::sqrt(v[i]) / k.bc2_sqrt + k.eps);
  }
}

class sgd final : public optimizer {
 public:
  explicit sgd(const optimizer_config& c) : c_(c) {}
  int state_floats() const override { return c_.momentum != 0.0f ? 1 : 0; }
  void update_tile(float* out, const float* p, const float* g, float* const* state, int64_t n) override {
    const bool first = steps_ == 1;
    float* buf = c_.momentum != 0.0f ? state[0] : nullptr;
    parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float d = g[i] + c_.weight_decay * p[i];
        if (buf) d = buf[i] = first ? d : c_.momentum * buf[i] + d;
        out[i] = p[i] - c_.lr * d;
      }
    });
  }

 private:
  optimizer_config c_;
};

class adamw final : public optimizer {
 public:
  explicit adamw(const optimizer_config& c) : c_(c) {}
  int state_floats() const override { return 2; }
  void update_tile(float* out, const float* p, const float* g, float* const* state, int64_t n) override {
    const float bc1 = 1.0f - std::pow(c_.beta1, static_cast<float>(steps_));
    const float bc2 = 1.0f - std::pow(c_.beta2, static_cast<float>(steps_));
    const float step_size = c_.lr / bc1;
    const float bc2_sqrt = std::sqrt(bc2);
    const float decay = 1.0f - c_.lr * c_.weight_decay;
    const adamw_constants k{c_.beta1, c_.beta2, c_.eps, step_size, bc2_sqrt, decay};
    parallel_for(n, elementwise_grain, [&](int64_t begin, int64_t end) {
      adamw_range(out + begin, p + begin, g + begin, state[0] + begin, state[1] + begin, end - begin, k);
    });
  }

 private:
  optimizer_config c_;
};

}  // namespace

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& cfg, int64_t shard_size, state_storage storage) {
  validate(cfg);
  std::unique_ptr<optimizer> o;
  if (cfg.kind == optimizer_kind::sgd) o = std::make_unique<sgd>(cfg);
  else o = std::make_unique<adamw>(cfg);
  o->shard_size_ = shard_size;
  if (storage == state_storage::internal) o->state_.assign(static_cast<size_t>(o->state_floats() * shard_size), 0.0f);
  return o;
}

void cpu_optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                        const optimizer_config& cfg, int64_t step) {
  auto opt = make_optimizer(cfg, n, state_storage::external);
  for (int64_t k = 0; k < step; ++k) opt->begin_step();  // AdamW's bias correction reads the count
  opt->update_tile(out, params, grads, state, n);
}

}  // namespace troupe
