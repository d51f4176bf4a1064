// Optimizers over one flat shard of parameters: SGD with momentum and AdamW. They see only a
// pointer and a length, so plain training, ZeRO partitions and offloaded shards share them.
// Updates follow PyTorch's formulas (torch.optim.SGD / AdamW) so results compare directly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

struct optimizer_config {
  std::string kind = "adamw";  // "adamw" or "sgd"
  float lr = 1e-3f;
  float weight_decay = 0.01f;  // decoupled for AdamW, L2 added to the gradient for SGD
  float momentum = 0.9f;       // SGD
  float beta1 = 0.9f;          // AdamW
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Throws std::invalid_argument naming the bad field.
void validate(const optimizer_config& cfg);

class optimizer {
 public:
  virtual ~optimizer() = default;
  // out[i] = update(params[i], grads[i]) for i in [0, n); n must equal the shard size. out may
  // be params itself (in place) or a fresh buffer, which lets an optimizer shard send its new
  // parameters without copying them (the old ones may still be in use by a stage).
  virtual void step(float* out, const float* params, const float* grads, int64_t n) = 0;
  void step(float* params, const float* grads, int64_t n) { step(params, params, grads, n); }
  int64_t steps() const { return steps_; }

 protected:
  void check_size(int64_t n) const;
  int64_t steps_ = 0;
  int64_t shard_size_ = 0;
};

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& cfg, int64_t shard_size);

}  // namespace troupe
