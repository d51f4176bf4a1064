// plan_job: schedule, model cut and buckets of a job (job_plan.hpp).
#include "actors/job/job_plan.hpp"

#include <stdexcept>

#include "actors/job/memory_plan.hpp"
#include "schedules/named.hpp"
#include "schedules/passes.hpp"
#include "schedules/validate.hpp"

namespace troupe {

int job_plan::buckets_of_stage(int stage, int tp) const {
  int n = 0;
  for (const auto& b : buckets.at(slot(stage, tp))) n += static_cast<int>(b.size());
  return n;
}

job_plan plan_job(const train_config& cfg, const prepared_job& data) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  job_plan p;
  p.mesh = cfg.mesh;
  const int P = cfg.mesh.pp, N = cfg.mesh.dp;
  if (cfg.user_schedule.stages.empty()) {
    p.schedule = sched::make_named_schedule(cfg.schedule, P, cfg.micro_batches, cfg.virtual_stages);
  } else {
    p.schedule = cfg.user_schedule;
    const sched::validation check = sched::validate(p.schedule);
    if (!check.ok()) bad("the schedule is refused before it runs: " + check.error);
    if (p.schedule.num_stages != P)
      bad("the schedule has " + std::to_string(p.schedule.num_stages) + " stages but the mesh has pp " + std::to_string(P));
  }
  if (cfg.zero >= 3 && N > 1) {  // ZeRO-3: every weight-reading action bracketed by FP and RP
    bool fetches = false;
    for (const auto& row : p.schedule.stages)
      for (const auto& a : row) fetches = fetches || a.kind == sched::op::fetch_params;
    if (!fetches) p.schedule = sched::add_param_fetches(p.schedule);
    const sched::validation check = sched::validate(p.schedule);
    if (!check.ok()) bad("the schedule with ZeRO-3's fetches is refused: " + check.error);
  }
  const int M = p.schedule.num_microbatches;
  if (cfg.batch_size < static_cast<int64_t>(N) * M)
    bad("batch_size " + std::to_string(cfg.batch_size) + " is too small for dp " + std::to_string(N) + " x " +
        std::to_string(M) + " microbatches: every microbatch needs a sample");
  const int K = sched::num_model_chunks(p.schedule);
  const int T = cfg.mesh.tp;
  validate(data.model, T);
  // The cut is the unsplit model's, the same for every tp rank: a stage's ranks hold one layer range.
  const auto sizes = params_per_layer(build_layers(data.model));
  p.chunks = cfg.cuts.empty() ? balanced_partition(sizes, K) : partition_at(static_cast<int64_t>(sizes.size()), cfg.cuts, K);
  const auto cap = static_cast<int64_t>(cfg.bucket_mb * 1024.0 * 1024.0);
  p.buckets.resize(static_cast<size_t>(P * T));
  p.stage_params.assign(static_cast<size_t>(P * T), 0);
  for (int t = 0; t < T; ++t) {
    tp_layout rank_t(t, T);
    const auto local = T == 1 ? sizes : params_per_layer(build_layers(data.model, &rank_t));
    for (int d = 0; d < P; ++d)
      for (int c = 0; c < p.schedule.virtual_stages; ++c) {
        const layer_range r = p.chunks.at(static_cast<size_t>(sched::model_chunk(p.schedule, d, c)));
        std::vector<int64_t> chunk_sizes(local.begin() + r.begin, local.begin() + r.end);
        for (int64_t n : chunk_sizes) p.stage_params[p.slot(d, t)] += n;
        p.buckets[p.slot(d, t)].push_back(N > 1 ? plan_buckets(chunk_sizes, cap) : std::vector<grad_bucket>{});
      }
  }
  check_device_memory(cfg, p);
  check_host_memory(cfg, p, host_memory_bytes());
  p.resume = open_resume(cfg, data.model, data.total_steps, data.vocabulary);
  return p;
}

}  // namespace troupe
