// Memory per device, by the kinds the runtime's device allocator counts (DESIGN.md, Memory):
// parameters, gradients, optimizer state, activations, buffers. Model states follow the ZeRO
// paper's accounting (bytes per parameter, sharded over data parallelism by stage); activations
// follow Korthikanti et al. 2022 (bytes per transformer layer and micro-batch). Plain arithmetic:
// which micro-batches are in flight comes from the schedule (validate()'s peak), not from here.
#pragma once

#include <string>

#include "kernels/memory_kind.hpp"
#include "kernels/recompute_mode.hpp"

namespace troupe::sched::plan {

// The runtime ledger's kinds (kernels/memory_kind.hpp, header only), so predictions and
// measurements share names; and the runtime's recomputation (kernels/recompute_mode.hpp), so a
// plan names what a job runs.
using troupe::all_memory_kinds;
using troupe::memory_kind;
using troupe::recompute_mode;
using troupe::to_string;

struct memory_by_kind {
  double parameters = 0, gradients = 0, optimizer_state = 0, activations = 0, buffers = 0;  // bytes
  double of(memory_kind k) const;
  double total() const { return parameters + gradients + optimizer_state + activations + buffers; }
};

// Bytes each parameter costs on a device before ZeRO shards it.
struct state_bytes {
  double parameters = 2;       // fp16/bf16 working copy
  double gradients = 2;        // fp16/bf16 gradients
  double optimizer_state = 12; // the ZeRO paper's K
  // Full-size gradient bytes that no stage shards, counted as gradients: DeepSpeed's stage 1-2
  // accumulate 16-bit gradients whole before reducing them into fp32 partitions.
  double gradient_buffer = 0;
  // The ZeRO stage from which `gradients` are sharded: 2 in the ZeRO paper; DeepSpeed's stage 1
  // already keeps only its partition's fp32 gradients (beside the whole 16-bit buffer).
  int gradients_sharded_from = 2;
};

enum class optimizer { adam, sgd };
const char* to_string(optimizer o);  // "adam" (Adam and AdamW cost the same), "sgd"
// Mixed precision: Adam keeps an fp32 master copy, momentum and variance (K = 12, the ZeRO
// paper's figure); SGD with momentum keeps the fp32 master copy and momentum (K = 8).
state_bytes mixed_precision(optimizer o);

// DeepSpeed's own estimator counts (estimate_zero{2,3}_model_states_mem_needs): 4P + 16P/N for
// stage 2, 18P/N for stage 3. Read here as 2 bytes of parameters, 4 of fp32 gradients, 12 of
// fp32 master, momentum and variance, and below stage 3 a whole 16-bit gradient buffer (2).
state_bytes deepspeed_estimator(int zero_stage);

// Whose byte counts model states follow (troupe plan --accounting). The frameworks keep different
// copies at different precisions for the same "ZeRO stage", so one count misstates them:
//   zero-paper  the ZeRO paper's: 16-bit parameters and gradients, K = 12 (the default);
//   deepspeed   DeepSpeed's estimator (deepspeed_estimator), ZeRO 1-3;
//   megatron    Megatron-LM in bf16 with fp32 gradient accumulation (its documented 18 bytes per
//               parameter, 6 + 12/d with the distributed optimizer, which is stage 1): stages 0-1;
//   fsdp        PyTorch FSDP2 full sharding with bf16 compute and fp32 reduction: the sharded fp32
//               parameter is the master copy, fp32 gradients, Adam's two moments (16/d), plus
//               the layer it gathers at 16 bits: stage 3 only.
enum class accounting { zero_paper, deepspeed, megatron, fsdp };
const char* to_string(accounting a);  // "zero-paper", "deepspeed", "megatron", "fsdp"
// Throws std::invalid_argument naming the text and the choices.
accounting parse_accounting(const std::string& text);
// Whether the framework has that stage (0: none).
bool has_stage(accounting a, int zero_stage);
// Bytes per parameter under `a` at `zero_stage`; throws std::invalid_argument naming the
// framework and the stages it has when it has no such stage.
state_bytes accounted_bytes(accounting a, optimizer o, int zero_stage);

// Where ZeRO-Offload puts state instead of the device. Offloading the optimizer also moves the
// sharded gradients (the host runs the step); offloading parameters needs stage 3.
struct offload {
  bool optimizer = false;
  bool parameters = false;
};

// Model states on one device holding `params` parameters (its share after tp and pp), sharded over
// `dp` replicas: stage >= 1 shards optimizer state, >= 2 gradients, 3 parameters. Stage 3 also
// holds one gathered layer (`gathered_layer_params`, parameters and gradients at working
// precision) as a buffer, as DeepSpeed's estimator does. Throws std::invalid_argument for a
// stage outside 0..3 or parameter offload below stage 3.
memory_by_kind model_states(double params, int dp, int zero_stage, const state_bytes& bytes, offload where = {},
                            double gathered_layer_params = 0);

// The shape that sets activation size.
struct layer_shape {
  double sequence = 2048;  // s: the tokens of a sequence this rank holds (its share under context parallelism)
  double micro_batch = 1;  // b
  double hidden = 1024;    // h
  double heads = 16;       // a
  double keys = 0;         // keys each query attends to, for the unfused scores; 0: sequence
  double q_share = 1;      // the query heads' width over h (a * head_dim / h)
  double kv_share = 1;     // k and v width over h (kv_heads / a; below 1 under grouped-query attention)
  double ffn = 0;          // the MLP's width f (an expert's with top_k); 0: 4h
  bool swiglu = false;     // the MLP keeps its gate and up outputs (2f) and their product (f)
  bool fused_attention = false;  // flash attention: no s x s scores, softmax output or dropout mask kept
  // A mixture of experts: each of the rank's s*b/t tokens (its sequence-parallel share) reaches
  // top_k experts, which keep its routed copy (2h bytes) and their MLP's activations; 0: dense.
  double top_k = 0;
  bool dropout = true;  // two sbh masks (attention's output and the MLP's); without, none
  // FP8 GEMMs keep their inputs as the FP8 casts they ran on (Transformer Engine), a byte each:
  // the qkv and fc1 inputs, the projection's and fc2's (the experts' routed copies and fc2 inputs).
  bool fp8 = false;
};

// Bytes one transformer layer stashes for one micro-batch at 16-bit precision, tensor-parallel
// over `tp` (Korthikanti et al. 2022, Table 2): sbh(10 + 24/t + 5as/(ht)) without sequence
// parallelism, sbh(34/t + 5as/(ht)) with it; selective recomputation drops the 5as/(ht) term
// (attention scores are recomputed); full recomputation keeps only the layer's input, 2sbh
// (2sbh/t with sequence parallelism). Of the 24 split over tp, q, k, v and the projection's input
// are 2 + 2 + 2 + 2 (q and the projection's input scale with q_share, k and v with kv_share) and
// the MLP's 16 = 4f/h (SwiGLU 6f/h; experts top_k (2 + 4f/h or 6f/h), over the tokens' tp
// share); fused attention keeps no 5as/(ht) term, as selective recomputation.
double activation_bytes_per_layer(const layer_shape& s, int tp, bool sequence_parallel, recompute_mode r);

// 1e9 bytes, as the ZeRO paper prints GB, and 2^30 bytes, as DeepSpeed's estimator prints GB.
constexpr double gb = 1e9;
constexpr double gib = 1024.0 * 1024.0 * 1024.0;

}  // namespace troupe::sched::plan
