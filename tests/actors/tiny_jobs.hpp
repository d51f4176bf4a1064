// Tiny synthetic jobs for the equivalence tests: an MLP and a GPT given in memory, the data for
// kSteps steps, and optimizers whose settings expose a wrong gradient scale (SGD without
// momentum) or hide it (AdamW). Small enough to keep CI fast.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "actors/config/train_config.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "storage/dataset.hpp"

namespace troupe::test {

inline constexpr int64_t kSteps = 20;

struct setup {
  model_spec model;
  std::shared_ptr<const storage::dataset> data;
  int64_t batch = 0;
  int64_t rows_per_sample = 1;
};

// 9 layers each, so P = 4 with 2 virtual stages still gets one layer per chunk; 16 samples per
// batch, so dp 4 x M 4 gives every microbatch one sample.
inline setup mlp_setup() {
  setup s;
  s.model.kind = model_kind::mlp;
  s.model.inputs = 12;
  s.model.hidden = {16, 16, 16, 16};
  s.model.classes = 5;
  s.batch = 16;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> px;
  std::uniform_int_distribution<int32_t> label(0, 4);
  const int64_t n = s.batch * kSteps;
  std::vector<float> pixels(static_cast<size_t>(n * s.model.inputs));
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (auto& l : labels) l = label(rng);
  s.data = std::make_shared<storage::image_dataset>("synthetic", s.model.inputs, std::move(pixels), std::move(labels));
  return s;
}

// `context` 8 lets context parallelism split each sequence into 2 x cp chunks at cp 2 and 4.
inline setup gpt_setup(int64_t context = 6) {
  setup s;
  s.model.kind = model_kind::gpt;
  s.model.vocab = 11;
  s.model.context = context;
  s.model.channels = 8;
  s.model.heads = 4;  // tp 4 takes one head each
  s.model.blocks = 6;
  s.batch = 16;
  s.rows_per_sample = s.model.context;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, 10);
  std::vector<int32_t> tokens(static_cast<size_t>(s.batch * kSteps * (s.model.context + 1) + 1));
  for (auto& t : tokens) t = tok(rng);
  s.data = std::make_shared<storage::text_dataset>("synthetic", std::move(tokens), s.model.context);
  return s;
}

inline optimizer_config optimizer_for(const std::string& kind) {
  optimizer_config o;
  o.kind = *parse_optimizer_kind(kind);
  o.lr = kind == "sgd" ? 0.1f : 1e-2f;
  o.momentum = 0;
  o.weight_decay = kind == "sgd" ? 0.0f : o.weight_decay;
  return o;
}

// A job of kSteps steps on the setup's data, one epoch, a tiny evaluation, no progress bar.
inline train_config tiny_config(const setup& s, const std::string& optim) {
  train_config cfg;
  cfg.model = s.model;
  cfg.optim = optimizer_for(optim);
  cfg.batch_size = s.batch;
  cfg.max_steps = kSteps;
  cfg.epochs = 1;
  cfg.train_data = s.data;
  cfg.eval_max_batches = 1;
  cfg.eval_batch_size = 4;
  cfg.progress = false;
  return cfg;
}

// tiny_config for `model` ("mlp", "gpt", "gpt8": the GPT at context 8, which context
// parallelism splits, or "moe": the GPT with 4 experts, top-2, in every other block, with the
// load-balancing loss) over a dp x pp x tp mesh with M microbatches, and a watchdog short enough
// for a test.
inline train_config tiny_mesh_config(const std::string& model, const std::string& optim, int dp, int pp, int tp, int M) {
  train_config cfg = tiny_config(model == "mlp" ? mlp_setup() : gpt_setup(model == "gpt8" ? 8 : 6), optim);
  if (model == "moe") {
    cfg.model.experts = 4;
    cfg.model.top_k = 2;
    cfg.model.moe_every = 2;
  }
  cfg.mesh.dp = dp;
  cfg.mesh.pp = pp;
  cfg.mesh.tp = tp;
  cfg.micro_batches = M;
  cfg.watchdog_seconds = 20;
  return cfg;
}

}  // namespace troupe::test
