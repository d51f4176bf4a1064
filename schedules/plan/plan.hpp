// A training plan for a GPT-style transformer on a cluster: the mesh, micro-batching, schedule,
// ZeRO stage and recomputation, and what it costs. evaluate() prices every chunk of the pipeline
// with time_model.hpp, runs the named schedule through simulate() for the step's pipeline part,
// adds the data-parallel gradient reduction and the optimizer step (not overlapped with the
// pipeline, as Megatron-LM 2021 runs them), and sizes memory on the most loaded device with
// memory_model.hpp from the schedule's peak live activations. search() tries the space.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedules/mesh.hpp"
#include "schedules/plan/memory_model.hpp"
#include "schedules/plan/time_model.hpp"
#include "schedules/simulate.hpp"

namespace troupe::sched::plan {

// The MLP's activation: GELU over one fc of width f, or SwiGLU (Shazeer 2020; Llama) over a
// gate and an up projection of width f each, multiplied.
enum class activation_kind { gelu, swiglu };
const char* to_string(activation_kind a);
std::optional<activation_kind> parse_activation(const std::string& text);

// A GPT decoder: L layers of width h with a query heads, sequence s, vocabulary V. By default
// GPT-3's shape (Narayanan et al. 2021): kv_heads = a (multi-head attention), an MLP of 4h with
// GELU, tied input and output embeddings, unfused attention. kv_heads < a is grouped-query
// attention (k and v projections of kv_heads * h/a), ffn_hidden another MLP width, untied
// embeddings a separate output matrix, fused attention (flash) keeps no s x s scores.
struct model_desc {
  std::string name;
  int layers = 1;
  double hidden = 1024;
  int heads = 16;
  double sequence = 2048;
  double vocab = 51200;
  int kv_heads = 0;        // 0: as many as heads
  double ffn_hidden = 0;   // 0: 4 * hidden
  activation_kind activation = activation_kind::gelu;
  bool tied_embeddings = true;
  bool fused_attention = false;

  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  double ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  // kv_heads * head width over h: the k and v projections' share of a q projection.
  double kv_share() const { return double(kv()) / heads; }
  // Weights of a layer's GEMMs: q and the output projection h^2 each, k and v h^2 * kv_share
  // each, the MLP 2hf (GELU) or 3hf (SwiGLU): 12h^2 for GPT-3's shape.
  double layer_gemm_parameters() const;
  double layer_parameters() const { return layer_gemm_parameters() + 13 * hidden; }
  // Narayanan et al. 2021, eq. for P: 12lh^2 (1 + 13/(12h) + (V + s)/(12lh)); an untied output
  // embedding adds Vh.
  double parameters() const {
    return layers * layer_parameters() + ((tied_embeddings ? 1 : 2) * vocab + sequence) * hidden;
  }
  // FLOPs of one sequence's forward and backward: 3 x (2s per GEMM weight + 4s^2h per layer for
  // QK^T and AV + 2shV for the logits); for GPT-3's shape Narayanan et al. 2021's 72bslh^2 (1 +
  // s/(6h) + V/(12lh)) per batch of b. With full recomputation the layers' forward runs twice:
  // 96, V/(16lh).
  double model_flops_per_sequence() const;
  double hardware_flops_per_sequence(recompute_mode r) const;
  // What is not GPT-3's shape, for a plan's header: "GQA 8 kv heads, SwiGLU 28672, untied, fused attention".
  std::string describe_shape() const;
};

struct plan_config {
  mesh m;
  int global_batch = 1;  // sequences per step
  int micro_batch = 1;   // sequences per micro-batch
  std::string schedule = "1f1b";
  int virtual_stages = 1;  // chunks per stage (interleaved)
  int zero = 0;
  recompute_mode rc = recompute_mode::full;
  bool sequence_parallel = false;
  optimizer opt = optimizer::adam;
  accounting acct = accounting::zero_paper;  // whose byte counts the memory follows
  offload where;
  gemm_precision precision{dtype::bf16, false};
  // Layers of the first and the last pipeline stage (0: the even share), the others splitting the
  // rest evenly: the first and last stages also hold the embedding and the head, so runs give
  // them fewer layers (Llama 3 405B: 7, 8 x 14, 7 on 16 stages; Megatron's
  // --decoder-first/last-pipeline-num-layers).
  int first_stage_layers = 0, last_stage_layers = 0;

  int microbatches() const { return global_batch / (m.dp * micro_batch); }
};

// Layers pipeline stage d holds (over its virtual_stages chunks).
double stage_layers(const model_desc& md, const plan_config& c, int d);

// Where one step's time goes on the busiest pipeline stage (the one idle least): the parts add
// up to step_seconds. compute is the layers' and the head's own forward and backward work,
// recompute the forward run again in backward, tensor_parallel the tp all-reduces and the
// embedding's, zero3_gathers stage 3's parameter traffic, pipeline_idle the bubble plus waits for
// activations, then the data-parallel reduction and the optimizer step after the pipeline.
struct step_breakdown {
  double compute = 0, recompute = 0, tensor_parallel = 0, zero3_gathers = 0, pipeline_idle = 0;
  double dp_reduction = 0, optimizer = 0;
  int stage = 0;

  double total() const {
    return compute + recompute + tensor_parallel + zero3_gathers + pipeline_idle + dp_reduction + optimizer;
  }
};

// The breakdown's parts by name, in the order above, for tables and explanations.
struct named_seconds {
  const char* name;
  double seconds;
};
std::vector<named_seconds> parts(const step_breakdown& b);

struct plan_result {
  plan_config config;
  step_breakdown breakdown;
  memory_by_kind memory;  // the most loaded device
  int memory_stage = 0;   // its pipeline stage
  double memory_stage_parameters = 0;  // the parameters that stage's device holds before ZeRO shards them
  bool fits = false;      // memory.total() <= the device's memory
  double step_seconds = 0, pipeline_seconds = 0, dp_seconds = 0, optimizer_seconds = 0;
  double bubble_fraction = 0;
  double tflops_per_gpu = 0;  // hardware FLOPs (recomputation counted), as Narayanan et al. report
  double mfu = 0;             // model FLOPs over peak
  simulation sim;             // the pipeline's simulated timeline
};

// Empty when the plan can be priced, else a message naming the offending field: the mesh must
// use every GPU of the cluster, tp divide the heads and stay within a node, pp * v divide the
// layers, dp * micro_batch divide the global batch, the schedule exist and accept M and P.
std::string check(const model_desc& model, const cluster_desc& cl, const plan_config& c);

// Throws std::invalid_argument carrying check()'s message.
plan_result evaluate(const model_desc& model, const cluster_desc& cl, const plan_config& c);

// A plan's step when each compute action runs late by up to `lateness` of its own cost (a
// cluster's noise: stragglers, throttling, noisy neighbours), drawn per action as the runtime's
// --jitter draws it: the mean pipeline time of `steps` simulated steps under fixed dispatch and
// under ready dispatch (dispatch.hpp) with `headroom` more stashed activations, so a user sees
// before a run what --dispatch ready would gain on this plan. Throws as evaluate does.
struct dispatch_price {
  double lateness = 0;
  int headroom = 0, steps = 0;
  double fixed_seconds = 0, ready_seconds = 0;  // mean makespans of the steps' pipelines
  int out_of_order = 0;                         // actions ready dispatch ran out of row order
};
dispatch_price price_dispatch(const model_desc& md, const cluster_desc& cl, const plan_config& c, double lateness,
                              int headroom, int steps = 20, uint64_t seed = 1);

struct search_space {
  std::vector<int> tp = {1, 2, 4, 8};
  std::vector<int> micro_batch = {1, 2, 4, 8};
  std::vector<std::string> schedules = {"1f1b", "interleaved", "zb-h1"};
  std::vector<int> zero = {0, 1, 2, 3};  // those the accounting has (has_stage)
  accounting acct = accounting::zero_paper;
  std::vector<recompute_mode> recomputes = {recompute_mode::none, recompute_mode::selective, recompute_mode::full};
  std::vector<int> interleave = {2, 4};                  // chunks per stage tried for "interleaved"
  std::vector<bool> sequence_parallel = {false, true};   // tried where tp > 1
  int max_pp = 128;
};

// Every plan of the space that is valid and fits, fastest first (at most `top`). For each
// mesh, micro-batch, schedule and recomputation it keeps the lowest ZeRO stage that fits: the
// stages cost the same step time until 3, which adds gathers.
std::vector<plan_result> search(const model_desc& model, const cluster_desc& cl, int global_batch,
                                const search_space& space = {}, int top = 10);

// Why `chosen` is faster (or slower) than `reference`: one line per part of the step that
// differs by more than 0.5% of the reference's step, largest saving first, then the memory
// both need. The lines name the plan field behind each part (recomputation, tp, pp, the
// schedule, micro-batches), so a reader sees which choice bought the time.
std::vector<std::string> explain(const plan_result& chosen, const plan_result& reference);

}  // namespace troupe::sched::plan
