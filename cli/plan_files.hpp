// The descriptions `troupe plan` reads (examples/plan/*.toml): a model, a device, a cluster. A
// closed schema per file: an unknown table or key, a missing key or a value of the wrong type
// is refused naming the file, line and key. Only the loading is here; the models are
// schedules/plan/, which does no I/O.
#pragma once

#include <optional>
#include <string>

#include "actors/plan/job_forecast.hpp"
#include "schedules/plan/plan.hpp"

namespace troupe::cli {

// What a paper measured for this model, kept beside it so the comparison reads the same file.
// Besides the mesh, how it ran, so the search compares against it priced under the same
// assumptions (each optional, defaulting to Narayanan et al. 2021's Table 1 runs: micro-batch 1,
// 1F1B, full recomputation, no sequence parallelism, no ZeRO).
struct published_run {
  int tp = 1, pp = 1, dp = 1, global_batch = 1;
  double tflops_per_gpu = 0;         // as the source counts them (see tokens_per_gpu_per_s)
  double percent_of_peak = 0;        // 0: the source gives none
  // Tokens per second per GPU, where the source gives them (0: it does not): the step time
  // follows from them without knowing how the source counted FLOPs.
  double tokens_per_gpu_per_s = 0;
  std::string source;
  int micro_batch = 1;
  std::string schedule = "1f1b";
  int virtual_stages = 1;  // chunks per stage (interleaved)
  std::string recompute = "full";
  bool sequence_parallel = false;
  int zero = 0;
  int first_stage_layers = 0, last_stage_layers = 0;  // 0: the even share
  int cp = 1, ep = 1;
  sched::plan::cp_kind cp_attention = sched::plan::cp_kind::ring;
  sched::plan::rank_order order = sched::plan::rank_order::tp_cp_pp_dp;
  sched::plan::gemm_precision precision{dtype::bf16, false};
  sched::plan::stack_desc stack;  // the software it ran on, as the file states it

  int gpus() const { return tp * pp * dp * cp; }
  // The step time the source's throughput implies for `sequence`-token sequences: from tokens
  // per second where given, else from its TFLOP/s and `flops_per_sequence` (counted as it counts).
  double step_seconds(double sequence, double flops_per_sequence) const;
};

// The configuration a published run states (its mesh, cp and ep, batch, micro-batch, schedule,
// recomputation, sequence parallelism, ZeRO stage, stage layers, rank order, precision and
// stack), for pricing it the way the run ran.
sched::plan::plan_config as_plan_config(const published_run& run);

struct model_file {
  sched::plan::model_desc model;
  int global_batch = 0;                    // [train] global_batch; 0 when the file gives none
  std::optional<published_run> published;  // [published]
};

// Each throws std::invalid_argument ("<file>:<line>: <key>: <problem>", or "<file>: cannot
// read: ..." for a missing file).
model_file load_model_file(const std::string& path);
sched::plan::device_desc load_device_file(const std::string& path);
// A cluster names its device file, relative to the cluster file's folder.
sched::plan::cluster_desc load_cluster_file(const std::string& path);

// The machine description `troupe plan --calibrate` writes and `troupe train --forecast` reads
// (job_forecast.hpp's machine_costs, under [machine]). Written to a temporary file and renamed.
machine_costs load_machine_file(const std::string& path);
void write_machine_file(const std::string& path, const machine_costs& m);

}  // namespace troupe::cli
