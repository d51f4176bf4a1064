// A training plan for a GPT-style transformer, dense or a mixture of experts, on a cluster: the
// mesh (dp, pp, tp, and the planner's own cp and ep), micro-batching, schedule, ZeRO stage,
// recomputation, precision and the software stack, and what it costs. evaluate() prices every
// chunk of the pipeline with time_model.hpp, runs the named schedule through simulate() for the
// step's pipeline part, adds the data-parallel gradient reduction and the optimizer step (after
// the pipeline, as Megatron-LM 2021 runs them, unless the stack overlaps the reduction), and
// sizes memory on the most loaded device with memory_model.hpp from the schedule's peak live
// activations. search() tries the space.
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
// GPT-3's shape (Narayanan et al. 2021): kv_heads = a (multi-head attention), heads of width h/a,
// an MLP of 4h with GELU, tied input and output embeddings, unfused attention. kv_heads < a is
// grouped-query attention (k and v projections of kv_heads heads), head_dim another head width
// (Qwen3: 64 heads of 128 over h 4096), ffn_hidden another MLP width, untied embeddings a
// separate output matrix, fused attention (flash) keeps no s x s scores and skips the blocks the
// causal mask hides. experts > 0 makes every layer's MLP a mixture of experts (Shazeer 2017;
// Mixtral, Qwen3-MoE): a router of h x experts picks top_k experts per token, each an MLP of
// width moe_ffn_hidden with the model's activation.
struct model_desc {
  std::string name;
  int layers = 1;
  double hidden = 1024;
  int heads = 16;
  double sequence = 2048;
  double vocab = 51200;
  int kv_heads = 0;        // 0: as many as heads
  double head_dim = 0;     // 0: hidden / heads
  double ffn_hidden = 0;   // 0: 4 * hidden
  activation_kind activation = activation_kind::gelu;
  bool tied_embeddings = true;
  bool fused_attention = false;
  bool dropout = true;         // GPT-3's; Llama and Qwen train without, keeping no masks
  int experts = 0;             // 0: a dense MLP
  int top_k = 1;               // experts each token is routed to
  double moe_ffn_hidden = 0;   // one expert's MLP width; 0: ffn_hidden

  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  double head() const { return head_dim > 0 ? head_dim : hidden / heads; }
  double q_width() const { return heads * head(); }    // a * d: h for GPT-3's shape
  double kv_width() const { return kv() * head(); }    // one of k and v
  double ffn() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  double expert_ffn() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : ffn(); }
  bool moe() const { return experts > 0; }
  // k and v's width over h: their projections' share of a GPT-3 q projection.
  double kv_share() const { return kv_width() / hidden; }
  // Weights of a layer's attention GEMMs (q and the output projection h x a*d each, k and v h x
  // kv_heads*d each), of one MLP (2hf for GELU, 3hf for SwiGLU; per expert with experts), and
  // of the router.
  double attention_parameters() const { return 2 * hidden * q_width() + 2 * hidden * kv_width(); }
  double mlp_parameters(double width) const {
    return (activation == activation_kind::swiglu ? 3 : 2) * hidden * width;
  }
  double router_parameters() const { return moe() ? hidden * experts : 0; }
  // Every GEMM weight a layer holds: 12h^2 for GPT-3's shape; all experts with experts.
  double layer_gemm_parameters() const;
  // The GEMM weights one token runs through: the dense layer's, or its top_k experts'.
  double active_layer_gemm_parameters() const;
  // A layer's expert weights (0 for a dense model): expert parallelism splits these, tp the rest.
  double layer_expert_parameters() const { return moe() ? experts * mlp_parameters(expert_ffn()) : 0; }
  double layer_parameters() const { return layer_gemm_parameters() + 13 * hidden; }
  // Narayanan et al. 2021, eq. for P: 12lh^2 (1 + 13/(12h) + (V + s)/(12lh)); an untied output
  // embedding adds Vh.
  double parameters() const {
    return layers * layer_parameters() + ((tied_embeddings ? 1 : 2) * vocab + sequence) * hidden;
  }
  // FLOPs of one sequence's forward and backward: 3 x (2s per active GEMM weight + 4s^2ad per
  // layer for QK^T and AV + 2shV for the logits); for GPT-3's shape Narayanan et al. 2021's
  // 72bslh^2 (1 + s/(6h) + V/(12lh)) per batch of b, and Megatron-LM's count for the others (the
  // causal mask not halved). With full recomputation the layers' forward runs twice: 96,
  // V/(16lh).
  double model_flops_per_sequence() const;
  double hardware_flops_per_sequence(recompute_mode r) const;
  // What is not GPT-3's shape, for a plan's header: "GQA 8 kv heads, SwiGLU 28672, untied, fused attention".
  std::string describe_shape() const;
};

// How the ranks of a plan's axes are laid out: tp innermost, then cp, then either pp and dp
// (troupe's mesh, Llama 3's order) or dp and pp (Megatron-LM's default --order tp-cp-ep-dp-pp,
// a pipeline stage's ranks contiguous). Expert parallelism takes its ranks from a stage's tp x
// cp x dp ranks in rank order, as Megatron-Core's expert groups do (expert tensor parallelism 1).
enum class rank_order { tp_cp_pp_dp, tp_cp_dp_pp };
const char* to_string(rank_order o);  // "tp-cp-pp-dp", "tp-cp-dp-pp"
std::optional<rank_order> parse_rank_order(const std::string& text);

// Context parallelism's attention: a ring passing key and value blocks between neighbours while
// each block's attention runs (Liu et al. 2023; Megatron-Core's and Llama 3's, with the causal
// load balancing that gives every rank an equal share), or all-to-alls that trade the sequence
// split for a head split around attention (DeepSpeed-Ulysses, Jacobs et al. 2023), or every
// rank's keys and values all-gathered before attention and their gradients reduce-scattered after
// (Llama 3's, Grattafiori et al. 2024, section 3.3.2), with the ring's load balancing. The three
// forms of troupe train's --cp-mode.
enum class cp_kind { ring, all_to_all, all_gather };
const char* to_string(cp_kind k);  // "ring", "all-to-all", "all-gather"
std::optional<cp_kind> parse_cp_kind(const std::string& text);

// How the software that runs a plan behaves, beyond the device's own GEMM efficiency: a run
// description names its stack's figures (the defaults are Megatron-LM 2021's, which Narayanan et
// al.'s Table 1 ran). gemm_efficiency replaces the device's (0: keep it) where a stack's kernels
// reach another share of peak; overlap_dp hides the gradients' reduction under the backward pass
// and ZeRO's parameter gathers under the forward (Megatron-Core's --overlap-grad-reduce and
// --overlap-param-gather, DeepSpeed's overlap_comm, FSDP's prefetch), so only the last bucket's
// share shows; overlap_tp hides tensor parallelism's collectives under the GEMMs they feed
// (Megatron-Core's --tp-comm-overlap with userbuffers); overlap_ep runs one micro-batch's expert
// all-to-alls while another's forward or backward computes (Megatron-Core's
// --overlap-moe-expert-parallel-comm, DeepSeek-V3's DualPipe), each all-to-all under the one
// piece of the other micro-batch's layer it is paired with (its attention or its MLP), so only
// what outlasts that piece shows.
// attention_efficiency is the share of the 16-bit peak its fused attention kernels reach (0: the
// GEMM efficiency): FlashAttention-2 reaches 35% on an H100, FlashAttention-3 up to 75% (Shah et
// al. 2024).
struct stack_desc {
  double gemm_efficiency = 0;
  double attention_efficiency = 0;
  bool overlap_dp = false;
  bool overlap_tp = false;
  bool overlap_ep = false;
  bool operator==(const stack_desc& o) const {
    return gemm_efficiency == o.gemm_efficiency && attention_efficiency == o.attention_efficiency &&
           overlap_dp == o.overlap_dp && overlap_tp == o.overlap_tp && overlap_ep == o.overlap_ep;
  }
};

// The mesh's dp, pp and tp, and the plan's own axes: cp splits every sequence over cp ranks, ep
// spreads each layer's experts over ep ranks. The GPUs are dp x pp x tp x cp; ep divides a stage's
// tp x cp x dp ranks, whose gradients the dense weights reduce over dp x cp and the experts'
// over tp x cp x dp / ep.
struct plan_config {
  mesh m;
  int cp = 1;
  cp_kind cp_attention = cp_kind::ring;
  int ep = 1;
  rank_order order = rank_order::tp_cp_pp_dp;
  stack_desc stack;
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
  // --decoder-first/last-pipeline-num-layers). Interleaved, a stage's chunks take equal shares,
  // the first stage's first chunks and the last stage's last chunks one layer fewer where the
  // share does not divide (Megatron's --account-for-embedding/loss-in-pipeline-split).
  int first_stage_layers = 0, last_stage_layers = 0;

  int gpus() const { return m.ranks() * cp; }
  int microbatches() const { return global_batch / (m.dp * micro_batch); }
};

// Layers pipeline stage d holds (over its virtual_stages chunks), and its chunk j's.
double stage_layers(const model_desc& md, const plan_config& c, int d);
double chunk_layers(const model_desc& md, const plan_config& c, int d, int j);

// Where one step's time goes on the busiest pipeline stage (the one idle least): the parts add
// up to step_seconds. compute is the layers' and the head's own forward and backward work,
// recompute the forward run again in backward, tensor_parallel the tp all-reduces and the
// embedding's (what overlap leaves of them), context_parallel the cp traffic attention does not
// hide, expert_parallel the experts' all-to-alls, zero3_gathers stage 3's parameter traffic,
// pipeline_idle the bubble plus waits for activations, then the data-parallel reduction and the
// optimizer step after the pipeline.
struct step_breakdown {
  double compute = 0, recompute = 0, tensor_parallel = 0, context_parallel = 0, expert_parallel = 0;
  double zero3_gathers = 0, pipeline_idle = 0, dp_reduction = 0, optimizer = 0;
  int stage = 0;

  double total() const {
    return compute + recompute + tensor_parallel + context_parallel + expert_parallel + zero3_gathers +
           pipeline_idle + dp_reduction + optimizer;
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
  std::vector<int> interleave = {2, 4, 5, 8};            // chunks per stage tried for "interleaved"
  std::vector<bool> sequence_parallel = {false, true};   // tried where tp > 1
  // Context parallelism tried where it leaves every rank at least min_cp_tokens of the sequence
  // (below that its traffic outweighs what it saves), and expert parallelism (for a mixture of
  // experts) over the degrees that divide the experts.
  std::vector<int> cp = {1, 2, 4, 8, 16, 32};
  double min_cp_tokens = 4096;
  std::vector<int> ep = {1, 2, 4, 8, 16, 32, 64};
  std::vector<cp_kind> cp_kinds = {cp_kind::ring, cp_kind::all_to_all, cp_kind::all_gather};
  std::vector<rank_order> orders = {rank_order::tp_cp_pp_dp, rank_order::tp_cp_dp_pp};
  gemm_precision precision{dtype::bf16, false};
  stack_desc stack;  // the software every plan runs on
  int max_pp = 128;
};

// Every plan of the space that is valid and fits, fastest first (at most `top`). For each
// mesh, micro-batch, schedule and recomputation it keeps the lowest ZeRO stage that fits: the
// stages cost the same step time until 3, which adds gathers. A plan whose busiest stage's own
// work already exceeds the top plans' steps is not simulated: no schedule could make it faster.
std::vector<plan_result> search(const model_desc& model, const cluster_desc& cl, int global_batch,
                                const search_space& space = {}, int top = 10);

// Why `chosen` is faster (or slower) than `reference`: one line per part of the step that
// differs by more than 0.5% of the reference's step, largest saving first, then the memory
// both need. The lines name the plan field behind each part (recomputation, tp, pp, the
// schedule, micro-batches), so a reader sees which choice bought the time.
std::vector<std::string> explain(const plan_result& chosen, const plan_result& reference);

}  // namespace troupe::sched::plan
