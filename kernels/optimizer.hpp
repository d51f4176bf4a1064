// Optimizers over one flat shard of parameters: SGD with momentum and AdamW. They see only a
// pointer and a length, so plain training, ZeRO partitions and offloaded shards share them.
// Updates follow PyTorch's formulas (torch.optim.SGD / AdamW) so results compare directly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

// The optimizers troupe updates with. The text form ("adamw", "sgd") is what configs, flags and
// checkpoint manifests carry.
enum class optimizer_kind { adamw, sgd };
const char* to_string(optimizer_kind k);
std::optional<optimizer_kind> parse_optimizer_kind(const std::string& text);

struct optimizer_config {
  optimizer_kind kind = optimizer_kind::adamw;
  float lr = 1e-3f;
  float weight_decay = 0.01f;  // decoupled for AdamW, L2 added to the gradient for SGD
  float momentum = 0.9f;       // SGD
  float beta1 = 0.9f;          // AdamW
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Throws std::invalid_argument naming the bad field.
void validate(const optimizer_config& cfg);

enum class state_storage { internal, external };

class optimizer {
 public:
  virtual ~optimizer() = default;
  // out[i] = update(params[i], grads[i]) for i in [0, n); n must equal the shard size. out may
  // be params itself (in place) or a fresh buffer, which lets an optimizer shard send its new
  // parameters without copying them (the old ones may still be in use by a stage). Needs the
  // optimizer's own state (make_optimizer's state_storage::internal).
  void step(float* out, const float* params, const float* grads, int64_t n);
  void step(float* params, const float* grads, int64_t n) { step(params, params, grads, n); }

  // The same update a tile at a time, for a shard whose state lives elsewhere (offloaded to
  // NVMe): begin_step() once per step, then update_tile over every tile of the shard with that
  // tile's state, state_floats() arrays of n floats (state[j] points at array j's tile; zeros
  // before the first step). step() is begin_step and one tile over the optimizer's own arrays,
  // so both give the same bits.
  void begin_step() { ++steps_; }
  virtual void update_tile(float* out, const float* params, const float* grads, float* const* state, int64_t n) = 0;
  // State floats per parameter: AdamW 2 (its moments), SGD 1 with momentum, 0 without.
  virtual int state_floats() const = 0;

  int64_t steps() const { return steps_; }
  // For checkpoints: its own state arrays (state_floats() arrays of the shard, one after
  // another; empty when the state is external), and their restore, with the step count (AdamW's
  // bias correction depends on it). restore throws std::invalid_argument naming both sizes when
  // the state does not fit this optimizer.
  const std::vector<float>& state() const { return state_; }
  // Array j of its own state, for update_tile over a shard whose master copy lives elsewhere but
  // whose state it keeps (parameter offload with the optimizer on the device).
  float* own_state(int j) { return state_.data() + static_cast<int64_t>(j) * shard_size_; }
  void restore(int64_t steps, std::vector<float> state);
  // Bytes of state it keeps itself (0 when the state is external).
  int64_t state_bytes() const { return static_cast<int64_t>(state_.size() * sizeof(float)); }

 protected:
  friend std::unique_ptr<optimizer> make_optimizer(const optimizer_config&, int64_t, state_storage);
  void check_size(int64_t n) const;
  int64_t steps_ = 0;
  int64_t shard_size_ = 0;
  std::vector<float> state_;  // state_floats() arrays of shard_size_, one after another
};

std::unique_ptr<optimizer> make_optimizer(const optimizer_config& cfg, int64_t shard_size,
                                          state_storage storage = state_storage::internal);

// Step `step` (from 1) of cfg's update over n values with the state arrays given (zeros before
// step 1): the same bits as an optimizer's own step() there. The CPU's device_ops.
void cpu_optimizer_step(float* out, const float* params, const float* grads, float* const* state, int64_t n,
                        const optimizer_config& cfg, int64_t step);

}  // namespace troupe
