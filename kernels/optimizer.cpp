// SGD with momentum and AdamW, element-wise over a flat shard.
#include "kernels/optimizer.hpp"

#include <cmath>
#include <stdexcept>

namespace troupe {

void validate(const optimizer_config& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("optimizer." + what); };
  if (c.kind != "adamw" && c.kind != "sgd") bad("kind must be \"adamw\" or \"sgd\", got \"" + c.kind + "\"");
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

namespace {

class sgd final : public optimizer {
 public:
  sgd(const optimizer_config& c, int64_t n) : c_(c), buf_(static_cast<size_t>(n)) { shard_size_ = n; }
  void step(float* out, const float* p, const float* g, int64_t n) override {
    check_size(n);
    const bool first = steps_++ == 0;
    for (int64_t i = 0; i < n; ++i) {
      float d = g[i] + c_.weight_decay * p[i];
      if (c_.momentum != 0.0f) d = buf_[i] = first ? d : c_.momentum * buf_[i] + d;
      out[i] = p[i] - c_.lr * d;
    }
  }

 private:
  optimizer_config c_;
  std::vector<float> buf_;
};

class adamw final : public optimizer {
 public:
  adamw(const optimizer_config& c, int64_t n) : c_(c), m_(static_cast<size_t>(n)), v_(static_cast<size_t>(n)) {
    shard_size_ = n;
  }
  void step(float* out, const float* p, const float* g, int64_t n) override {
    check_size(n);
    ++steps_;
    const float bc1 = 1.0f - std::pow(c_.beta1, static_cast<float>(steps_));
    const float bc2 = 1.0f - std::pow(c_.beta2, static_cast<float>(steps_));
    const float step_size = c_.lr / bc1;
    const float bc2_sqrt = std::sqrt(bc2);
    const float decay = 1.0f - c_.lr * c_.weight_decay;
    float* __restrict m = m_.data();
    float* __restrict v = v_.data();
    const float b1 = c_.beta1, b2 = c_.beta2, eps = c_.eps;
    for (int64_t i = 0; i < n; ++i) {
      const float decayed = p[i] * decay;
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      out[i] = decayed - step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    }
  }

 private:
  optimizer_config c_;
  std::vector<float> m_, v_;
};

}  // namespace

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& cfg, int64_t shard_size) {
  validate(cfg);
  if (cfg.kind == "sgd") return std::make_unique<sgd>(cfg, shard_size);
  return std::make_unique<adamw>(cfg, shard_size);
}

}  // namespace troupe
