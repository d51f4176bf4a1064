// Data-parallel job assembly: bucket plan, per-rank loaders, optimizer shards and stages around
// one collective group; and the straggler option's parser. The training loop itself is the
// message flow of dp_stage.cpp and coordinator.cpp; run_training (training_job.cpp) calls this.
#include <stdexcept>

#include "actors/collective.hpp"
#include "actors/dp_actors.hpp"
#include "kernels/layer_stack.hpp"

namespace troupe {

straggler_spec parse_straggler(const std::string& text) {
  auto bad = [&]() -> straggler_spec {
    throw std::invalid_argument("straggler \"" + text + "\": expected rank:ms or rank:ms:random, e.g. 1:50");
  };
  const auto c1 = text.find(':');
  if (c1 == std::string::npos || c1 == 0) return bad();
  const auto c2 = text.find(':', c1 + 1);
  straggler_spec s;
  try {
    size_t used = 0;
    s.rank = std::stoi(text.substr(0, c1), &used);
    if (used != c1) return bad();
    const std::string ms = text.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    s.ms = std::stod(ms, &used);
    if (used != ms.size()) return bad();
  } catch (const std::logic_error&) {
    return bad();
  }
  if (c2 != std::string::npos) {
    if (text.substr(c2 + 1) != "random") return bad();
    s.random = true;
  }
  if (s.rank < 0 || s.ms < 0) return bad();
  return s;
}

std::vector<grad_bucket> plan_dp_buckets(const model_spec& model, double bucket_mb) {
  std::vector<int64_t> layer_params;
  for (const auto& l : build_layers(model)) layer_params.push_back(l->num_params());
  return plan_buckets(layer_params, static_cast<int64_t>(bucket_mb * 1024.0 * 1024.0));
}

dp_rank_parts spawn_dp_rank(caf::actor_system& sys, const dp_job_args& a, int r, caf::actor collective,
                            const std::vector<grad_bucket>& buckets) {
  const train_config& cfg = *a.cfg;
  dp_rank_parts p;
  p.optimizer = spawn_optimizer_shard(sys, cfg.optim, 0, a.num_params);
  const eval_plan eval = plan_evaluation(cfg, a.eval->size(), a.global_rows / cfg.batch_size);
  p.loader = spawn_data_loader(sys, {a.train, a.eval, cfg.batch_size, eval, cfg.seed, r, cfg.mesh.dp});
  dp_stage_args sa;
  sa.base.model = a.model;
  sa.base.seed = cfg.seed;
  sa.base.global_rows = a.global_rows;
  sa.base.total_steps = a.total_steps;
  sa.base.loader = p.loader;
  sa.base.optimizer = p.optimizer;
  sa.base.coordinator = a.coordinator;
  sa.rank = r;
  sa.ranks = cfg.mesh.dp;
  sa.collective = std::move(collective);
  sa.buckets = buckets;
  for (const auto& st : cfg.stragglers)
    if (st.rank == r) sa.straggler = st;
  sa.trace_step = cfg.trace_step >= 0 ? cfg.trace_step : a.total_steps - 1;
  p.stage = spawn_dp_stage(sys, std::move(sa));
  return p;
}

dp_job_parts spawn_dp_job(caf::actor_system& sys, const dp_job_args& a) {
  const train_config& cfg = *a.cfg;
  dp_job_parts parts;
  parts.buckets = plan_dp_buckets(a.model, cfg.bucket_mb);
  auto group = spawn_collective_group(sys, cfg.mesh.dp, collective_options_from_env());
  for (int r = 0; r < cfg.mesh.dp; ++r) {
    dp_rank_parts p = spawn_dp_rank(sys, a, r, group[r], parts.buckets);
    parts.stages.push_back(p.stage);
    parts.members.insert(parts.members.end(), {p.stage, p.optimizer, p.loader, group[r]});
  }
  parts.collectives = group;
  return parts;
}

}  // namespace troupe
