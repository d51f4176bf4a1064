// The jobs the forecast is checked on: examples/gpt.toml's GPT (T 64, C 128, 4 heads, 4 blocks,
// a 96-character vocabulary, batch 16, AdamW), the same GPT with every block a mixture of 4
// experts, top-2, dropless ("moe"), and the default MLP's shape (784-256-256-10, batch 128), on
// synthetic data of the same shapes, over the meshes and schedules a 2-core machine runs with a
// core per rank.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "actors/config/train_config.hpp"
#include "storage/dataset.hpp"

namespace troupe::test {

struct forecast_case {
  std::string name, model;  // model: "gpt", "moe" or "mlp"
  int dp = 1, pp = 1, tp = 1, micro_batches = 1;
  std::string schedule = "1f1b";
  recompute_mode recompute = recompute_mode::none;
  int cp = 1;
  context::cp_mode cp_mode = context::cp_mode::all_gather;
};

// gtest prints a failing case by its name, not its bytes.
inline void PrintTo(const forecast_case& c, std::ostream* os) { *os << c.name; }

inline std::vector<forecast_case> forecast_cases() {
  return {
      {"gpt_one_device", "gpt"},
      {"gpt_dp2", "gpt", 2},
      {"gpt_tp2", "gpt", 1, 1, 2},
      {"gpt_pp2_gpipe_m4", "gpt", 1, 2, 1, 4, "gpipe"},
      {"gpt_pp2_1f1b_m4", "gpt", 1, 2, 1, 4, "1f1b"},
      {"gpt_pp2_interleaved_m4", "gpt", 1, 2, 1, 4, "interleaved"},
      {"gpt_pp2_zb_h1_m4", "gpt", 1, 2, 1, 4, "zb-h1"},
      {"gpt_selective_recompute", "gpt", 1, 1, 1, 1, "1f1b", recompute_mode::selective},
      {"gpt_pp2_1f1b_m4_full_recompute", "gpt", 1, 2, 1, 4, "1f1b", recompute_mode::full},
      {"gpt_cp2", "gpt", 1, 1, 1, 1, "1f1b", recompute_mode::none, 2},
      {"gpt_cp2_tp2", "gpt", 1, 1, 2, 1, "1f1b", recompute_mode::none, 2},
      // Replicas of a pipeline: the buckets' copies sit beside the last micro-batch's stash, not
      // beside the peak of several.
      {"gpt_dp2_pp2_1f1b_m4", "gpt", 2, 2, 1, 4, "1f1b"},
      {"gpt_dp2_pp2_gpipe_m4", "gpt", 2, 2, 1, 4, "gpipe"},
      {"gpt_pp2_cp2_1f1b_m4", "gpt", 1, 2, 1, 4, "1f1b", recompute_mode::none, 2},
      // The other two ways attention meets the group: the same stash, other traffic.
      {"gpt_cp2_ring", "gpt", 1, 1, 1, 1, "1f1b", recompute_mode::none, 2, context::cp_mode::ring},
      {"gpt_cp2_all_to_all", "gpt", 1, 1, 1, 1, "1f1b", recompute_mode::none, 2, context::cp_mode::all_to_all},
      // A mixture of experts in every block: the router, the rows copied to their experts, the
      // experts' products on a quarter of the rows each (top-2 of 4).
      {"moe_one_device", "moe"},
      {"moe_pp2_1f1b_m4", "moe", 1, 2, 1, 4, "1f1b"},
      {"mlp_one_device", "mlp"},
      {"mlp_dp2", "mlp", 2},
      {"mlp_pp2_1f1b_m4", "mlp", 1, 2, 1, 4, "1f1b"},
  };
}

inline train_config forecast_config(const forecast_case& c, int64_t steps = 12) {
  train_config cfg;
  cfg.optim.kind = optimizer_kind::adamw;
  cfg.optim.lr = 3e-3f;
  cfg.epochs = 1;
  cfg.max_steps = steps;
  cfg.progress = false;
  cfg.eval_max_batches = 1;
  // A folder per case and process: ctest runs the memory and timing cases side by side, and two
  // jobs in one folder race for its metrics file (a CI run once failed on runs/latest).
  cfg.out_dir = (std::filesystem::temp_directory_path() /
                 ("troupe-forecast-" + c.name + "-" + std::to_string(::getpid())))
                    .string();
  std::mt19937_64 rng(5);
  if (c.model == "gpt" || c.model == "moe") {
    cfg.model.kind = model_kind::gpt;
    if (c.model == "moe") {
      cfg.model.experts = 4;
      cfg.model.top_k = 2;
    }
    cfg.model.context = 64;
    cfg.model.channels = 128;
    cfg.model.heads = 4;
    cfg.model.blocks = 4;
    cfg.model.vocab = 96;
    cfg.batch_size = 16;
    cfg.eval_batch_size = 16;
    std::uniform_int_distribution<int32_t> tok(0, 95);
    std::vector<int32_t> tokens(static_cast<size_t>(cfg.batch_size * (steps + 2) * (cfg.model.context + 1) + 1));
    for (auto& t : tokens) t = tok(rng);
    cfg.train_data = std::make_shared<storage::text_dataset>("synthetic", std::move(tokens), cfg.model.context);
  } else {
    cfg.model.kind = model_kind::mlp;
    cfg.model.inputs = 784;
    cfg.model.hidden = {256, 256};
    cfg.model.classes = 10;
    cfg.batch_size = 128;
    cfg.eval_batch_size = 128;
    std::normal_distribution<float> px;
    std::uniform_int_distribution<int32_t> label(0, 9);
    const int64_t n = cfg.batch_size * (steps + 2);
    std::vector<float> pixels(static_cast<size_t>(n * 784));
    for (auto& p : pixels) p = px(rng);
    std::vector<int32_t> labels(static_cast<size_t>(n));
    for (auto& l : labels) l = label(rng);
    cfg.train_data = std::make_shared<storage::image_dataset>("synthetic", 784, std::move(pixels), std::move(labels));
  }
  cfg.mesh.dp = c.dp;
  cfg.mesh.pp = c.pp;
  cfg.mesh.tp = c.tp;
  cfg.mesh.cp = c.cp;
  cfg.cp_mode = c.cp_mode;
  cfg.micro_batches = c.micro_batches;
  cfg.schedule = c.schedule;
  cfg.recompute = c.recompute;
  cfg.watchdog_seconds = 60;
  return cfg;
}

}  // namespace troupe::test
