// plan_job: schedule, model cut and buckets of a job (job_plan.hpp).
#include "actors/plan/job_plan.hpp"

#include <fmt/format.h>

#include <stdexcept>

#include "actors/plan/memory_plan.hpp"
#include "schedules/named.hpp"
#include "schedules/passes.hpp"
#include "schedules/validate.hpp"

namespace troupe {

int job_plan::buckets_of_stage(int stage, int tp) const {
  int n = 0;
  for (const auto& b : buckets.at(slot(stage, tp))) n += static_cast<int>(b.size());
  return n;
}

std::vector<shard_piece> job_plan::shard_of(int rank) const {
  const sched::mesh_coords at = mesh.coords_of(rank);
  return shard_layout(buckets.at(slot(at.pp, at.tp)), mesh.replicas(), mesh.replica_of(rank), mesh.size(sched::axis::edp),
                      mesh.place_in(sched::axis::edp, rank));
}

job_plan plan_job(const train_config& cfg, const prepared_job& data) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  job_plan p;
  p.mesh = cfg.mesh;
  const int P = cfg.mesh.pp, N = cfg.mesh.replicas();  // N: who reduces gradients together
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
  if (cfg.batch_size < static_cast<int64_t>(cfg.mesh.dp) * M)
    bad("batch_size " + std::to_string(cfg.batch_size) + " is too small for dp " + std::to_string(cfg.mesh.dp) + " x " +
        std::to_string(M) + " microbatches: every microbatch needs a sample");
  const int K = sched::num_model_chunks(p.schedule);
  const int T = cfg.mesh.tp;
  validate(data.model, T);
  // The cut is the unsplit model's, the same for every tp rank: a stage's ranks hold one layer range.
  const auto sizes = params_per_layer(build_layers(data.model));
  p.chunks = cfg.cuts.empty() ? balanced_partition(sizes, K) : partition_at(static_cast<int64_t>(sizes.size()), cfg.cuts, K);
  // Each tp rank's parameters per layer, and under expert parallelism how many of them are its
  // experts' (the same count at every place in the expert group: E / ep experts each).
  std::vector<std::vector<int64_t>> local(static_cast<size_t>(T)), tails(static_cast<size_t>(T));
  const bool ep = cfg.mesh.ep > 1;
  for (int t = 0; t < T; ++t) {
    tp_layout rank_t(t, T), expert_rank(0, cfg.mesh.ep);
    if (T == 1 && !ep) {
      local[static_cast<size_t>(t)] = sizes;
      continue;
    }
    const layer_list layers = build_layers(data.model, &rank_t, false, {}, ep ? &expert_rank : nullptr);
    local[static_cast<size_t>(t)] = params_per_layer(layers);
    if (ep) tails[static_cast<size_t>(t)] = expert_tails(layers);
  }

  auto bucketize = [&](job_plan& q, double bucket_mb) {
    const auto cap = static_cast<int64_t>(bucket_mb * 1024.0 * 1024.0);
    q.buckets.assign(static_cast<size_t>(P * T), {});
    q.stage_params.assign(static_cast<size_t>(P * T), 0);
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < P; ++d)
        for (int c = 0; c < q.schedule.virtual_stages; ++c) {
          const layer_range r = q.chunks.at(static_cast<size_t>(sched::model_chunk(q.schedule, d, c)));
          const auto& per_layer = local[static_cast<size_t>(t)];
          std::vector<int64_t> chunk_sizes(per_layer.begin() + r.begin, per_layer.begin() + r.end);
          for (int64_t n : chunk_sizes) q.stage_params[q.slot(d, t)] += n;
          std::vector<int64_t> chunk_tails;
          if (const auto& tail = tails[static_cast<size_t>(t)]; !tail.empty())
            chunk_tails.assign(tail.begin() + r.begin, tail.begin() + r.end);
          q.buckets[q.slot(d, t)].push_back(N > 1 ? plan_buckets(chunk_sizes, cap, chunk_tails) : std::vector<grad_bucket>{});
        }
  };
  bucketize(p, cfg.bucket_mb);
  // Under ZeRO 2 and 3 a rank holds whole buckets (the one backward fills; ZeRO-3's units gathered
  // are its buckets too), so a smaller cap may fit where the default 25 MiB, one unit for a small
  // model, does not: the refusal names the largest that fits.
  std::string smaller;
  if (cfg.zero >= 2 && N > 1 && first_over_device_memory(cfg, p)) {
    for (double mb : {16.0, 8.0, 4.0, 2.0, 1.0, 0.5, 0.25, 0.125, 0.0625, 0.0}) {
      if (mb >= cfg.bucket_mb) continue;
      job_plan q = p;
      bucketize(q, mb);
      if (first_over_device_memory(cfg, q)) continue;
      smaller = fmt::format("; with --bucket-mb {} ({}) it fits", mb, mb > 0 ? "buckets and units of at most that" : "one bucket per layer");
      break;
    }
  }
  check_device_memory(cfg, p, smaller);
  check_host_memory(cfg, p, host_memory_bytes());
  p.resume = open_resume(cfg, data.model, data.total_steps, data.vocabulary);
  return p;
}

}  // namespace troupe
