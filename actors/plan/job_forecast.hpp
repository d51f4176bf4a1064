// A forecast of one of troupe's own jobs on this machine, before it runs: the step time and each
// rank's peak device memory by the ledger's kinds, from the job's plan (mesh, schedule, model
// cut, buckets) and a description of the machine measured by calibrate_machine()
// (machine_calibration.hpp). The time model prices every op of every layer of a chunk for one
// micro-batch (GEMMs at a fitted FLOP rate plus their bytes, attention at its measured rate,
// elementwise passes at their bandwidth, the tensor-parallel all-reduces), feeds the chunk costs
// to the schedule simulator with the gradient reduction and the optimizer step, and adds the
// measured cost of running an action and a step. The memory model is the runtime's own: model
// states from memory_plan.hpp, activations as each layer stashes them (kernels/), times the
// schedule's peak of live stashes. `troupe plan --job` prints it; `troupe train --forecast` prints
// it beside what the run measured.
#pragma once

#include <string>
#include <vector>

#include "actors/plan/job_plan.hpp"
#include "actors/config/train_config.hpp"
#include "kernels/device_memory.hpp"
#include "schedules/op_costs.hpp"
#include "schedules/simulate.hpp"

namespace troupe {

// What the ops cost on this machine, on one thread (a rank's device). Written and read as TOML
// by `troupe plan --calibrate` (cli/plan_files.hpp).
struct machine_costs : sched::op_costs {
  // By the two gemm fields below, one rate for every dtype: the calibration times f32 GEMMs.
  double gemm_seconds(dtype d, double m, double n, double k, double batch) const override;

  std::string name;                     // the CPU, as /proc/cpuinfo names it
  double gemm_flops_per_s = 0;          // a GEMM takes 2mnk / gemm_flops_per_s
  double gemm_bytes_per_s = 0;          //   + 4(mk + kn + mn) / gemm_bytes_per_s (0: no byte term)
  double attention_forward_s = 0;       // seconds per unit of B * heads * T^2 * head size
  double attention_backward_s = 0;
  double blockwise_attention_forward_s = 0;   // the same, for the online-softmax kernels --cp runs
  double blockwise_attention_backward_s = 0;
  double elementwise_bytes_per_s = 0;   // layernorm, GELU, residual adds, embedding, loss
  double optimizer_s_per_param = 0;     // the job's optimizer's step, per parameter
  double all_reduce_latency_s = 0;      // a two-rank in-memory all-reduce of n bytes:
  double all_reduce_bytes_per_s = 0;    //   latency + n / bytes_per_s
  // Ranks of one process computing at once share more than cores (caches, memory bandwidth, a
  // VM's vCPUs): each op then takes concurrent_slowdown times as long as alone, measured with
  // two replicas of the model side by side. More ranks than `cores` take turns as well.
  double concurrent_slowdown = 1;
  int cores = 1;
  // From running the model: an action takes op_scale times its ops' sum plus action_overhead_s
  // (what the ops above leave out: allocating and clearing outputs, messages, the data loader).
  double op_scale = 1;
  double action_overhead_s = 0;
  std::string calibrated_with;          // the model the run and the GEMM shapes came from
};

// Seconds of the pieces, for a reader and the tests.
double elementwise_seconds(const machine_costs& m, double bytes);
double all_reduce_seconds(const machine_costs& m, double bytes);

struct rank_forecast {
  int rank = 0;
  memory_figures peak;      // by kind, the most each holds at once
  int64_t peak_total = 0;   // the most all kinds hold together
  // The same if the data-parallel bucket copies are gone before O; their release races with the
  // group's other ranks (job_forecast.cpp), so a run measures a figure between the two.
  int64_t peak_total_low = 0;
};

struct job_forecast {
  double step_seconds = 0;                     // the simulated makespan
  std::vector<sched::chunk_cost> chunk_costs;  // by model chunk, one micro-batch, overheads included
  double reduce_grads_seconds = 0, optimizer_seconds = 0;
  sched::simulation sim;
  std::vector<rank_forecast> ranks;            // by mesh rank
};

// Throws std::invalid_argument naming what the forecast does not model (more than one thread per
// rank, sequence parallelism, ZeRO, parameter servers, an MLP split over tp, expert parallelism
// or an expert capacity, a schedule file). A mixture of experts is priced dropless, its load even.
job_forecast forecast_job(const train_config& cfg, const job_plan& plan, const model_spec& model,
                          const machine_costs& machine);

// One line per rank and the step: "predicted step 0.123 s; rank 0: 49.7 MiB (parameters ...)".
std::string describe(const job_forecast& f);

}  // namespace troupe
