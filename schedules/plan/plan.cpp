// Pricing and searching plans (see plan.hpp). Per-layer costs count the GEMMs of Megatron-LM's
// layer (QKV, attention scores and context, projection, two MLP GEMMs), the elementwise passes
// between them at memory bandwidth, and tensor parallelism's two all-reduces each way. The model's
// arithmetic is in model_desc.cpp, the explanation of one plan against another in explain.cpp.
#include "schedules/plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <tuple>

#include "schedules/named.hpp"
#include "schedules/validate.hpp"

namespace troupe::sched::plan {

double stage_layers(const model_desc& md, const plan_config& c, int d) {
  const int pp = c.m.pp;
  if (c.first_stage_layers <= 0 && c.last_stage_layers <= 0) return double(md.layers) / pp;
  if (d == 0 && c.first_stage_layers > 0) return c.first_stage_layers;
  if (d == pp - 1 && c.last_stage_layers > 0) return c.last_stage_layers;
  const int ends = (c.first_stage_layers > 0) + (c.last_stage_layers > 0);
  return double(md.layers - c.first_stage_layers - c.last_stage_layers) / (pp - ends);
}

double chunk_layers(const model_desc& md, const plan_config& c, int d, int j) {
  const double n = stage_layers(md, c, d);
  const int v = c.virtual_stages;
  const double share = std::ceil(n / v - 1e-9), short_by = share * v - n;
  if (short_by < 0.5 || (d != 0 && d != c.m.pp - 1)) return n / v;
  // The first stage's first chunks or the last stage's last chunks take one layer fewer each.
  const int from_edge = d == 0 ? j : v - 1 - j;
  return from_edge < short_by ? share - 1 : share;
}

std::string check(const model_desc& model, const cluster_desc& cl, const plan_config& c) {
  const mesh& m = c.m;
  if (m.dp < 1 || m.pp < 1 || m.tp < 1 || c.cp < 1 || c.ep < 1)
    return "mesh " + to_string(m) + " cp " + std::to_string(c.cp) + " ep " + std::to_string(c.ep) +
           ": every axis must be >= 1";
  if (c.gpus() != cl.gpus())
    return "mesh " + to_string(m) + (c.cp > 1 ? " x cp " + std::to_string(c.cp) : std::string()) + " has " +
           std::to_string(c.gpus()) + " ranks but cluster " + cl.name + " has " + std::to_string(cl.gpus()) +
           " GPUs (" + std::to_string(cl.nodes) + " nodes x " + std::to_string(cl.gpus_per_node) +
           "): dp x pp x tp x cp must equal the GPUs";
  if (c.ep > 1 && !model.moe()) return "--ep " + std::to_string(c.ep) + ": " + model.name + " has no experts to spread";
  if (model.moe() && model.experts % c.ep != 0)
    return "--ep " + std::to_string(c.ep) + " does not divide the " + std::to_string(model.experts) + " experts of " +
           model.name;
  if (model.moe() && (m.tp * c.cp * m.dp) % c.ep != 0)
    return "--ep " + std::to_string(c.ep) + " does not divide a pipeline stage's tp x cp x dp = " +
           std::to_string(m.tp * c.cp * m.dp) + " ranks";
  if (model.moe() && (model.top_k < 1 || model.top_k > model.experts))
    return "top_k " + std::to_string(model.top_k) + " must be between 1 and the " + std::to_string(model.experts) +
           " experts of " + model.name;
  if (c.cp > 1 && c.cp_attention != cp_kind::all_to_all && std::fmod(model.sequence, 2.0 * c.cp) != 0)
    return "--cp " + std::to_string(c.cp) + ": " + to_string(c.cp_attention) + " attention splits the " +
           std::to_string(static_cast<long long>(model.sequence)) + "-token sequence into 2 x cp = " +
           std::to_string(2 * c.cp) + " equal chunks, which it does not divide";
  if (c.cp > 1 && c.cp_attention == cp_kind::all_to_all && std::fmod(model.sequence, c.cp) != 0)
    return "--cp " + std::to_string(c.cp) + " does not divide the " +
           std::to_string(static_cast<long long>(model.sequence)) + "-token sequence";
  if (c.cp > 1 && c.cp_attention == cp_kind::all_to_all && (model.kv() / std::max(m.tp, 1)) % c.cp != 0)
    return "--cp " + std::to_string(c.cp) + ": all-to-all attention splits each tp rank's " +
           std::to_string(model.kv() / std::max(m.tp, 1)) + " kv heads over cp, which it does not divide";
  if (model.heads % m.tp != 0)
    return "--tp " + std::to_string(m.tp) + " does not divide the " + std::to_string(model.heads) + " heads of " + model.name;
  if (model.heads % model.kv() != 0)
    return "kv_heads " + std::to_string(model.kv()) + " does not divide the " + std::to_string(model.heads) +
           " heads of " + model.name;
  // Megatron splits the query groups over tp: each rank needs whole k and v heads.
  if (model.kv() % m.tp != 0)
    return "--tp " + std::to_string(m.tp) + " does not divide the " + std::to_string(model.kv()) + " kv_heads of " +
           model.name;
  if (!model.moe() && std::fmod(model.ffn(), m.tp) != 0)
    return "--tp " + std::to_string(m.tp) + " does not divide ffn_hidden " +
           std::to_string(static_cast<long long>(model.ffn())) + " of " + model.name;
  if (m.tp > cl.gpus_per_node)
    return "--tp " + std::to_string(m.tp) + " exceeds the " + std::to_string(cl.gpus_per_node) + " GPUs of a node";
  if (c.virtual_stages < 1) return "--virtual-stages must be >= 1";
  if (c.first_stage_layers < 0 || c.last_stage_layers < 0) return "first and last stage layers must be >= 0";
  if (c.first_stage_layers > 0 || c.last_stage_layers > 0) {
    const int ends = (c.first_stage_layers > 0) + (c.last_stage_layers > 0);
    if (m.pp <= ends) return "uneven first/last stage layers need more pipeline stages than --pp " + std::to_string(m.pp);
    const int rest = model.layers - c.first_stage_layers - c.last_stage_layers, others = m.pp - ends;
    if (rest < others || rest % others != 0)
      return "first stage " + std::to_string(c.first_stage_layers) + " and last stage " +
             std::to_string(c.last_stage_layers) + " layers leave " + std::to_string(rest) + " of " + model.name +
             "'s " + std::to_string(model.layers) + " layers, which " + std::to_string(others) +
             " other stages cannot split evenly";
    for (int d : {0, m.pp - 1})
      if (static_cast<int>(stage_layers(model, c, d)) < c.virtual_stages)
        return "virtual stages " + std::to_string(c.virtual_stages) + " leave a chunk of stage " + std::to_string(d) +
               "'s " + std::to_string(static_cast<int>(stage_layers(model, c, d))) + " layers empty";
    if ((rest / others) % c.virtual_stages != 0)
      return "virtual stages " + std::to_string(c.virtual_stages) + " do not divide the middle stages' " +
             std::to_string(rest / others) + " layers";
  } else if (model.layers % (m.pp * c.virtual_stages) != 0) {
    return "--pp " + std::to_string(m.pp) + " x virtual stages " + std::to_string(c.virtual_stages) +
           " does not divide the " + std::to_string(model.layers) + " layers of " + model.name;
  }
  if (c.micro_batch < 1 || c.global_batch % (m.dp * c.micro_batch) != 0)
    return "global batch " + std::to_string(c.global_batch) + " is not a multiple of dp " + std::to_string(m.dp) +
           " x micro-batch " + std::to_string(c.micro_batch);
  if (c.zero < 0 || c.zero > 3) return "--zero must be 0, 1, 2 or 3, got " + std::to_string(c.zero);
  if (c.where.parameters && c.zero < 3) return "offloading parameters needs --zero 3";
  if (cl.device.peak(c.precision) <= 0) return "device " + cl.device.name + " gives no peak for " + to_string(c.precision);
  return {};
}

namespace {

// One micro-batch's seconds per layer by part, kept beside the chunk costs so a step's time can
// be split into what it was spent on (step_breakdown).
struct layer_parts {
  double compute = 0, tensor_parallel = 0, context_parallel = 0, expert_parallel = 0, recompute = 0;
  double zero3 = 0;                  // per chunk
  double head = 0, embedding_tp = 0;  // once per micro-batch
};

struct priced {
  cost_model costs;
  layer_parts parts;
  double dp_seconds = 0, optimizer_seconds = 0;
};

// Rank distance between neighbours along each axis (see rank_order).
struct strides {
  int tp = 1, cp = 1, pp = 1, dp = 1;
};

strides strides_of(const plan_config& c) {
  const int t = c.m.tp;
  if (c.order == rank_order::tp_cp_dp_pp) return {1, t, t * c.cp * c.m.dp, t * c.cp};
  return {1, t, t * c.cp, t * c.cp * c.m.pp};
}

// How many of a pipeline stage's tp x cp x dp ranks one node holds: a contiguous block with the
// pipeline outermost, else runs of tp x cp ranks every tp x cp x pp.
int stage_ranks_per_node(const plan_config& c, const cluster_desc& cl) {
  const int run = c.m.tp * c.cp, block = run * c.m.dp, g = cl.gpus_per_node;
  if (c.order == rank_order::tp_cp_dp_pp) return std::min(g, block);
  return std::min({g, block, run * std::max(1, g / (run * c.m.pp))});
}

// The experts' data-parallel group: a stage's ranks that hold the same experts, ep apart in the
// stage's rank order.
int expert_dp(const plan_config& c) { return c.m.tp * c.cp * c.m.dp / c.ep; }

int expert_dp_stride(const plan_config& c) {
  const int run = c.m.tp * c.cp;
  return c.order == rank_order::tp_cp_dp_pp || c.ep < run ? c.ep : c.ep * c.m.pp;
}

// A collective over the dense weights' data-parallel group, dp x cp ranks: within cp, then the
// cp-th share over dp (a reduce-scatter inside, the reduction across, a gather inside).
double dense_dp_seconds(collective k, double bytes, const plan_config& c, const cluster_desc& cl) {
  const strides st = strides_of(c);
  return group_collective_seconds(k, bytes, c.cp, st.cp, cl) +
         group_collective_seconds(k, bytes / c.cp, c.m.dp, st.dp, cl);
}

link_class pipeline_link(const plan_config& c, const cluster_desc& cl) {
  const int stride = strides_of(c).pp;
  if (!pipeline_crosses_nodes(c.m.pp, stride, cl)) return cl.intra_node;
  return inter_node_link(cl, pipeline_span(stride, cl));
}

layer_shape shape_of(const model_desc& md, const plan_config& c) {
  layer_shape s{md.sequence / c.cp, double(c.micro_batch), md.hidden, double(md.heads)};
  s.keys = md.sequence;
  s.kv_share = md.kv_share();
  s.q_share = md.q_width() / md.hidden;
  s.ffn = md.ffn();
  s.swiglu = md.activation == activation_kind::swiglu;
  s.fused_attention = md.fused_attention;
  s.dropout = md.dropout;
  s.fp8 = c.precision.fp8 != fp8_scaling::none;
  if (md.moe()) {
    s.top_k = md.top_k;
    s.ffn = md.expert_ffn();
  }
  return s;
}

// Parameters stage d holds on one GPU that tp splits (attention, norms, a dense MLP, the router;
// plus the vocabulary-parallel embedding on the first stage and its tied or untied output copy
// on the last; positions are not split over tp), and its experts' parameters, split over ep.
double stage_parameters(const model_desc& md, const plan_config& c, int d) {
  const mesh& m = c.m;
  double p = stage_layers(md, c, d) * (md.layer_parameters() - md.layer_expert_parameters()) / m.tp;
  if (d == 0) p += md.vocab * md.hidden / m.tp + md.sequence * md.hidden;
  if (d == m.pp - 1 && (m.pp > 1 || !md.tied_embeddings)) p += md.vocab * md.hidden / m.tp;
  return p;
}

double stage_expert_parameters(const model_desc& md, const plan_config& c, int d) {
  return stage_layers(md, c, d) * md.layer_expert_parameters() / c.ep;
}

namespace {

// Combined 1F1B pairs a forward with another micro-batch's backward in the steady state only: a
// stage's warm-up forwards and cool-down backwards run alone. The share of a stage's forwards
// (and backwards) that have a partner, over the stages: Megatron's warm-up is P - p - 1 forwards
// under 1F1B and 2 (P - p - 1) + (v - 1) P chunk forwards under the interleaved schedule, of
// M v in all; GPipe pairs none.
double paired_share(const plan_config& c) {
  const int P = c.m.pp, v = std::max(c.virtual_stages, 1);
  const double total = double(c.microbatches()) * v;
  if (c.schedule == "gpipe" || total <= 0) return 0;
  double unpaired = 0;
  for (int p = 0; p < P; ++p) {
    const double warmup = c.schedule == "interleaved" ? 2.0 * (P - p - 1) + (v - 1.0) * P : P - p - 1.0;
    unpaired += std::min(warmup, total);
  }
  return 1 - unpaired / P / total;
}

}  // namespace

priced price(const model_desc& md, const cluster_desc& cl, const plan_config& c) {
  device_desc dev = cl.device;
  if (c.stack.gemm_efficiency > 0) dev.gemm_efficiency = c.stack.gemm_efficiency;
  const mesh& m = c.m;
  const strides st = strides_of(c);
  const published_device hw(dev, c.precision.tf32);
  // FP8 runs the linear layers' GEMMs only; attention, the router and the logits stay 16-bit.
  const gemm_precision lin = c.precision, att{c.precision.operands, c.precision.tf32};
  const auto gemm = [&](gemm_precision p, double rows_, double n, double k, double batch = 1) {
    return hw.gemm_seconds_at(p, rows_, n, k, batch);
  };
  const double t = m.tp, b = c.micro_batch, s = md.sequence, sl = s / c.cp, h = md.hidden, a = md.heads, V = md.vocab;
  const double qw = md.q_width(), kvw = md.kv_width();
  const double rows = b * sl, sbh = rows * h;  // this rank's share of the micro-batch's tokens
  const bool swiglu = md.activation == activation_kind::swiglu;
  // q, k and v in one product (k and v narrower under GQA), the output projection; then the MLP's
  // up (SwiGLU: gate and up, 2f wide) and down projections, or the router and the experts.
  double linear_gemms = gemm(lin, rows, (qw + 2 * kvw) / t, h) + gemm(lin, rows, h, qw / t);
  const double attention_linear = linear_gemms;  // the attention half's products, apart for overlap_ep
  double quantized = rows * h + rows * qw / t;  // elements cast into FP8 GEMMs' inputs, forward
  double mlp_bytes = 0, a2a = 0;
  if (!md.moe()) {
    const double f = md.ffn(), up = swiglu ? 2 * f : f;
    linear_gemms += gemm(lin, rows, up / t, h) + gemm(lin, rows, h, f / t);
    // bias+GeLU (16sbh/t at 4h: f in, f out); SwiGLU reads 2f and writes f.
    mlp_bytes = (swiglu ? 6 : 4) * f / h * sbh / t;
    quantized += rows * h + rows * f / t;
  } else {
    // Each tp rank routes its own tokens (sequence parallelism's split); with the tokens spread
    // evenly, every rank's experts receive top_k times its tokens in all.
    const double tokens = rows / t, routed = tokens * md.top_k, local = double(md.experts) / c.ep;
    const double fe = md.expert_ffn(), up = swiglu ? 2 * fe : fe;
    linear_gemms += gemm(att, tokens, md.experts, h) + gemm(lin, routed / local, up, h, local) +
                    gemm(lin, routed / local, h, fe, local);
    // The experts' activation, the router's softmax, and the permutation of tokens to their
    // experts and back (each a read and a write of the routed rows).
    mlp_bytes = (swiglu ? 6 : 4) * fe * routed + 8 * tokens * md.experts + 8 * routed * h;
    quantized += routed * h + routed * fe;
    // Dispatch and combine: each rank sends its routed rows at 16 bits over the expert group.
    const int per_node = std::min(c.ep, stage_ranks_per_node(c, cl));
    const int span = (c.ep + per_node - 1) / per_node;
    a2a = all_to_all_seconds(2 * routed * h, c.ep, per_node, span, cl);
  }
  // Attention: under ring and all-gather cp each rank's queries meet every key block; under
  // all-to-all cp each rank runs the whole sequence for heads / cp. Fused attention skips the
  // blocks the causal mask hides, half the scores.
  const bool ring = c.cp_attention != cp_kind::all_to_all || c.cp == 1;
  const double q_rows = ring ? sl : s, heads = b * a / t / (ring ? 1 : c.cp);
  const double keys = md.fused_attention ? s / 2 : s, d = md.head();
  // Unfused, QK^T writes the scores and AV reads them back; fused (flash), both products stay in
  // on-chip memory, so each costs its FLOPs at the output's tiling, and backward recomputes the
  // scores: five products where the unfused backward has four.
  device_desc attention_dev = dev;
  if (c.stack.attention_efficiency > 0) attention_dev.gemm_efficiency = c.stack.attention_efficiency;
  const published_device attention_hw(attention_dev, c.precision.tf32);
  const double attention_gemms =
      md.fused_attention ? attention_hw.fused_attention_seconds(att, q_rows, keys, d, heads)
                         : gemm(att, q_rows, keys, d, heads) + gemm(att, q_rows, d, keys, heads);
  const double attention_backward = (md.fused_attention ? 2.5 : 2) * attention_gemms;
  // Bytes read plus written by the unfused passes: two layer norms (4sbh each), two
  // bias-dropout-adds (7sbh each: two inputs, output, mask), the MLP's activation, and
  // scale-mask-softmax and dropout on the scores (9as^2b/t; none when the attention is fused).
  // Without sequence parallelism the norms and dropouts repeat on every tp rank. FP8 casts each
  // GEMM input (reading 16 bits, writing FP8 and its transpose) and, per tensor, reads it once
  // more for its maximum; the output gradients in backward alike.
  const double norms_and_adds = md.dropout ? 22 : 20;  // a residual add without dropout reads 2, writes 1
  const double linear_bytes = (c.sequence_parallel ? norms_and_adds / t : norms_and_adds) * sbh + mlp_bytes;
  const double attention_bytes = md.fused_attention ? 0 : 9 * a * sl * s * b / t;
  const double cast_bytes =
      quantized * (c.precision.fp8 == fp8_scaling::tensor ? 6 : c.precision.fp8 == fp8_scaling::block ? 4 : 0);
  const double tp_collective = group_collective_seconds(collective::all_reduce, 2 * sbh, m.tp, st.tp, cl);
  // Overlapped with the GEMM beside it (userbuffers), a tp collective shows only where it is longer.
  const double tp_shown = c.stack.overlap_tp ? std::max(0.0, tp_collective - linear_gemms / 4) : tp_collective;
  // Context parallelism's traffic. Ring: cp - 1 steps, each passing a k and a v block (16-bit,
  // this tp rank's heads) to the next rank while the current block's attention runs; backward
  // passes them again with their gradients. All-to-all: q, k, v in and the context out, each way.
  // All-gather: every rank's k and v gathered before attention, nothing to hide behind; backward
  // gathers them again and reduce-scatters their gradients.
  double cp_forward = 0, cp_backward = 0;
  if (c.cp > 1) {
    const bool inside = m.tp * c.cp <= cl.gpus_per_node;
    if (c.cp_attention == cp_kind::all_gather) {
      const double gathered = 2 * 2 * rows * kvw / t * c.cp;  // every rank's k and v, 16-bit
      cp_forward = group_collective_seconds(collective::all_gather, gathered, c.cp, m.tp, cl);
      cp_backward = cp_forward + group_collective_seconds(collective::reduce_scatter, gathered, c.cp, m.tp, cl);
    } else if (ring) {
      const link_class l = inside ? cl.intra_node : inter_node_link(cl, (c.cp - 1) * m.tp / cl.gpus_per_node + 1);
      const double block = 2 * 2 * rows * kvw / t;
      const double steps = c.cp - 1;
      cp_forward = std::max(0.0, steps * (block / l.bus_bytes_per_second + l.alpha_seconds) - attention_gemms);
      cp_backward =
          std::max(0.0, steps * (2 * block / l.bus_bytes_per_second + l.alpha_seconds) - attention_backward);
    } else {
      const int per_node = std::clamp(cl.gpus_per_node / m.tp, 1, c.cp);
      const double bytes = 2 * rows * (2 * qw + 2 * kvw) / t;
      cp_forward = cp_backward = all_to_all_seconds(bytes, c.cp, per_node, (c.cp + per_node - 1) / per_node, cl);
    }
  }
  if (c.stack.overlap_ep) {
    // Megatron-Core's combined 1F1B: a forward and the backward of another micro-batch run as one
    // unit, cut at the all-to-alls, so each all-to-all hides under one piece of the other's
    // compute only: the backward's combine gradient under the forward's attention, the forward's
    // dispatch under the backward's MLP, the backward's dispatch gradient under the forward's
    // MLP, the forward's combine under the backward's attention. Whatever of an all-to-all its
    // piece cannot cover shows (DeepSeek's DualPipe prices its overlap the same way), and all of
    // it where the action has no partner (paired_share).
    const double attention_f = attention_linear + attention_gemms, mlp_f = linear_gemms - attention_linear;
    const double attention_b = 2 * attention_linear + attention_backward, mlp_b = 2 * mlp_f;
    double shown = 0;
    for (double piece : {attention_f, mlp_b, mlp_f, attention_b}) shown += std::max(0.0, a2a - piece);
    const double paired = paired_share(c);
    a2a = paired * shown / 4 + (1 - paired) * a2a;
  }
  const double forward = linear_gemms + attention_gemms +
                         memory_seconds(dev, linear_bytes + attention_bytes + cast_bytes) + 2 * tp_shown +
                         cp_forward + 2 * a2a;
  // Backward: the input gradients of every GEMM (attention's two GEMMs have two inputs each and
  // no weights), the elementwise passes twice over, two all-reduces; the weight gradients apart.
  double input = linear_gemms + attention_backward +
                 memory_seconds(dev, 2 * (linear_bytes + attention_bytes) + cast_bytes) + 2 * tp_shown +
                 cp_backward + 2 * a2a;
  const double weight = linear_gemms;
  priced out;
  out.parts.tensor_parallel = 4 * tp_shown;
  out.parts.context_parallel = cp_forward + cp_backward;
  out.parts.expert_parallel = 4 * a2a;
  out.parts.compute = forward + input + weight - out.parts.tensor_parallel - out.parts.context_parallel -
                      out.parts.expert_parallel;
  if (c.rc == recompute_mode::full) out.parts.recompute = forward;
  if (c.rc == recompute_mode::selective)
    out.parts.recompute = attention_gemms + memory_seconds(dev, attention_bytes) + cp_forward;
  input += out.parts.recompute;

  // A chunk of n layers. ZeRO-3 gathers its parameters for its forward and again for its
  // backward, and reduce-scatters its gradients, for every micro-batch.
  const double layer_dense = (md.layer_parameters() - md.layer_expert_parameters()) / t;
  const double layer_experts = md.layer_expert_parameters() / c.ep;
  const auto chunk_of = [&](double n, double& z3) {
    double z3_forward = 0, z3_backward = 0;
    if (c.zero == 3) {
      const auto both = [&](collective k) {
        return dense_dp_seconds(k, 2 * n * layer_dense, c, cl) +
               group_collective_seconds(k, 2 * n * layer_experts, expert_dp(c), expert_dp_stride(c), cl);
      };
      z3_forward = both(collective::all_gather);
      z3_backward = z3_forward + both(collective::reduce_scatter);
      if (c.stack.overlap_dp) {  // prefetched under the chunk's own compute (FSDP's, DeepSpeed's)
        z3_forward = std::max(0.0, z3_forward - n * forward);
        z3_backward = std::max(0.0, z3_backward - n * (input + weight));
      }
    }
    z3 = z3_forward + z3_backward;
    return chunk_cost{n * forward + z3_forward, n * (input + weight) + z3_backward, n * input + z3_backward,
                      n * weight};
  };
  const int chunks = m.pp * c.virtual_stages;
  out.costs.uniform = chunk_of(double(md.layers) / chunks, out.parts.zero3);
  out.costs.per_chunk.resize(m.pp);
  for (int dd = 0; dd < m.pp; ++dd) {
    double z3 = 0;
    for (int j = 0; j < c.virtual_stages; ++j) out.costs.per_chunk[dd].push_back(chunk_of(chunk_layers(md, c, dd, j), z3));
  }
  // The logits GEMM and the cross-entropy passes (16-bit logits in, fp32 probabilities out) sit
  // on the model's last chunk; the vocabulary-parallel embedding's all-reduce on its first.
  const double logits = gemm(att, rows, V / t, h), ce_bytes = 6 * rows * V / t;
  chunk_cost& last = out.costs.per_chunk[(chunks - 1) % m.pp][(chunks - 1) / m.pp];
  last.forward += logits + memory_seconds(dev, ce_bytes);
  last.backward_input += logits + memory_seconds(dev, ce_bytes);
  last.backward_weight += logits;
  last.backward = last.backward_input + last.backward_weight;
  out.costs.per_chunk[0][0].forward += tp_collective;
  out.parts.head = 3 * logits + 2 * memory_seconds(dev, ce_bytes);
  out.parts.embedding_tp = tp_collective;

  // Megatron's scatter-gather: each tp rank sends 1/t of the boundary activation over its own
  // link, then the receivers all-gather it on NVLink.
  const link_class p2p = pipeline_link(c, cl);
  out.costs.activation_bytes = out.costs.grad_bytes = 2 * sbh / t;
  out.costs.link_bytes_per_second = p2p.bus_bytes_per_second;
  out.costs.send_seconds =
      p2p.alpha_seconds + (t > 1 ? group_collective_seconds(collective::all_gather, 2 * sbh, m.tp, st.tp, cl) : 0);

  // Per step: the gradients' reduction (the dense weights over dp x cp, the experts over their
  // own group; ZeRO 1-2: reduce-scatter then all-gather of the parameters, the same bytes), a
  // tied embedding's all-reduce between first and last stage, and the optimizer step at memory
  // bandwidth over the device's shard of the fp32 state.
  const double params = stage_parameters(md, c, 0), experts = stage_expert_parameters(md, c, 0);
  if (c.zero < 3)
    out.dp_seconds = dense_dp_seconds(collective::all_reduce, 2 * params, c, cl) +
                     group_collective_seconds(collective::all_reduce, 2 * experts, expert_dp(c), expert_dp_stride(c), cl);
  if (c.stack.overlap_dp) {
    // Buckets reduce while the last micro-batch's backward runs and gather while the next step's
    // first forward runs: only what outlasts one micro-batch's work on the stage shows.
    double work = 0;
    for (const chunk_cost& k : out.costs.per_chunk[0]) work += k.forward + k.backward;
    out.dp_seconds = std::max(0.0, out.dp_seconds - work);
  }
  if (m.pp > 1 && md.tied_embeddings) out.dp_seconds += ring_seconds(collective::all_reduce, 2 * V * h / t, 2, p2p);
  const double shard = c.zero >= 1 ? params / (m.dp * c.cp) + experts / expert_dp(c) : params + experts;
  const state_bytes bytes = mixed_precision(c.opt);
  // Read and write the fp32 state, read the gradient, write the 16-bit parameters.
  const double step_bytes = shard * (2 * bytes.optimizer_state + bytes.gradients + bytes.parameters);
  out.optimizer_seconds = c.where.optimizer ? 0 : memory_seconds(dev, step_bytes);
  out.costs.reduce_grads_seconds = out.dp_seconds;
  out.costs.optimizer_step_seconds = out.optimizer_seconds;
  return out;
}

memory_by_kind operator+(memory_by_kind x, const memory_by_kind& y) {
  x.parameters += y.parameters;
  x.gradients += y.gradients;
  x.optimizer_state += y.optimizer_state;
  x.activations += y.activations;
  x.buffers += y.buffers;
  return x;
}

void size_memory(const model_desc& md, const cluster_desc& cl, const plan_config& c, const std::vector<int>& peak,
                 plan_result& r) {
  const mesh& m = c.m;
  const layer_shape shape = shape_of(md, c);
  const double per_layer = activation_bytes_per_layer(shape, m.tp, c.sequence_parallel, c.rc);
  const double sbh = md.sequence / c.cp * c.micro_batch * md.hidden;
  const state_bytes bytes = accounted_bytes(c.acct, c.opt, c.zero);
  r.memory = {};
  for (int d = 0; d < m.pp; ++d) {
    double layers_per_chunk = 0;
    for (int j = 0; j < c.virtual_stages; ++j) layers_per_chunk = std::max(layers_per_chunk, chunk_layers(md, c, d, j));
    const double dense = stage_parameters(md, c, d), experts = stage_expert_parameters(md, c, d);
    memory_by_kind mem =
        model_states(dense, m.dp * c.cp, c.zero, bytes, c.where,
                     (md.layer_parameters() - md.layer_expert_parameters()) / m.tp) +
        model_states(experts, expert_dp(c), c.zero, bytes, c.where, md.layer_expert_parameters() / c.ep);
    mem.activations = peak[d] * layers_per_chunk * per_layer;
    // Recomputing a layer in backward rebuilds all of its activations at once.
    if (c.rc != recompute_mode::none)
      mem.activations += activation_bytes_per_layer(shape, m.tp, c.sequence_parallel, recompute_mode::none) - per_layer;
    // The last stage's fp32 logits for a micro-batch; every stage a send and a receive buffer.
    if (d == m.pp - 1) mem.buffers += 4 * c.micro_batch * md.sequence / c.cp * md.vocab / m.tp;
    if (m.pp > 1) mem.buffers += 2 * 2 * sbh;
    // FP8 keeps each linear weight cast once per step, and its transpose for the backward.
    if (c.precision.fp8 != fp8_scaling::none)
      mem.buffers += 2 * stage_layers(md, c, d) *
                     ((md.attention_parameters() + (md.moe() ? 0 : md.mlp_parameters(md.ffn()))) / m.tp +
                      md.layer_expert_parameters() / c.ep);
    if (d == 0 || mem.total() > r.memory.total()) {
      r.memory = mem;
      r.memory_stage = d;
      r.memory_stage_parameters = dense + experts;
    }
  }
  r.fits = r.memory.total() <= cl.device.memory_bytes;
}

// The busiest stage's step split by part (see step_breakdown); what the parts do not cover of
// the simulated step is that stage's idle time in the pipeline.
step_breakdown break_down(const model_desc& md, const plan_config& c, const priced& p, const simulation& sim) {
  step_breakdown b;
  for (int d = 1; d < c.m.pp; ++d)
    if (sim.idle_seconds[d] < sim.idle_seconds[b.stage]) b.stage = d;
  const double M = c.microbatches(), v = c.virtual_stages;
  const double layers = stage_layers(md, c, b.stage);  // this stage's, over its v chunks
  const int chunks = c.m.pp * c.virtual_stages;
  b.compute = M * layers * p.parts.compute;
  if ((chunks - 1) % c.m.pp == b.stage) b.compute += M * p.parts.head;
  b.recompute = M * layers * p.parts.recompute;
  b.tensor_parallel = M * layers * p.parts.tensor_parallel + (b.stage == 0 ? M * p.parts.embedding_tp : 0);
  b.context_parallel = M * layers * p.parts.context_parallel;
  b.expert_parallel = M * layers * p.parts.expert_parallel;
  b.zero3_gathers = M * v * p.parts.zero3;
  b.dp_reduction = p.dp_seconds;
  b.optimizer = p.optimizer_seconds;
  b.pipeline_idle = 0;
  b.pipeline_idle = std::max(0.0, sim.makespan_seconds - b.total());
  return b;
}

// No schedule runs a step faster than its busiest stage's own work followed by its reduction and
// optimizer step: the search skips simulating a plan this bound already rules out.
double step_lower_bound(const plan_config& c, const priced& p) {
  double busiest = 0;
  for (int d = 0; d < c.m.pp; ++d) {
    double work = 0;
    for (int j = 0; j < c.virtual_stages; ++j) {
      const chunk_cost& k = p.costs.cost_of(d, j);
      work += k.forward + k.backward;
    }
    busiest = std::max(busiest, work);
  }
  return c.microbatches() * busiest + p.dp_seconds + p.optimizer_seconds;
}

plan_result finish(const model_desc& md, const cluster_desc& cl, const plan_config& c, const schedule& s,
                   const priced& p) {
  plan_result r;
  r.config = c;
  r.sim = simulate(s, p.costs);
  r.breakdown = break_down(md, c, p, r.sim);
  r.pipeline_seconds = r.sim.makespan_seconds - p.dp_seconds - p.optimizer_seconds;
  r.dp_seconds = p.dp_seconds;
  r.optimizer_seconds = p.optimizer_seconds;
  r.step_seconds = r.sim.makespan_seconds;
  r.bubble_fraction = r.sim.bubble_fraction;
  size_memory(md, cl, c, r.sim.peak_live_activations, r);
  const double gpus = c.gpus(), seqs = c.global_batch;
  r.tflops_per_gpu = md.hardware_flops_per_sequence(c.rc) * seqs / (r.step_seconds * gpus) / 1e12;
  r.mfu = md.model_flops_per_sequence() * seqs / (r.step_seconds * gpus * cl.device.peak(c.precision));
  return r;
}

}  // namespace

plan_result evaluate(const model_desc& md, const cluster_desc& cl, const plan_config& c) {
  if (const std::string err = check(md, cl, c); !err.empty()) throw std::invalid_argument(err);
  const schedule s = make_named_schedule(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages);
  return finish(md, cl, c, s, price(md, cl, c));
}

dispatch_price price_dispatch(const model_desc& md, const cluster_desc& cl, const plan_config& c, double lateness,
                              int headroom, int steps, uint64_t seed) {
  if (const std::string err = check(md, cl, c); !err.empty()) throw std::invalid_argument(err);
  if (!(lateness >= 0) || headroom < 0 || steps < 1)
    throw std::invalid_argument("a dispatch price needs lateness >= 0, headroom >= 0 and steps >= 1");
  const schedule s = make_named_schedule(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages);
  const priced p = price(md, cl, c);
  simulate_options o;
  o.jitter_seed = seed;
  for (int d = 0; d < c.m.pp; ++d) {  // up to `lateness` of the stage's own forward-and-backward mean
    const chunk_cost& k = p.costs.cost_of(d, 0);
    o.jitter_max_seconds.push_back(lateness * (k.forward + k.backward) / 2);
  }
  dispatch_price out{lateness, headroom, steps};
  out.fixed_seconds = simulate_steps(s, p.costs, o, steps).mean_makespan_seconds;
  o.dispatch = dispatch_policy::ready;
  o.ready_stash = headroom;
  const step_statistics ready = simulate_steps(s, p.costs, o, steps);
  out.ready_seconds = ready.mean_makespan_seconds;
  out.out_of_order = ready.out_of_order;
  return out;
}

std::vector<plan_result> search(const model_desc& md, const cluster_desc& cl, int global_batch,
                                const search_space& space, int top) {
  std::vector<plan_result> found;  // the `top` fastest so far, fastest first
  std::map<std::tuple<std::string, int, int, int>, std::pair<schedule, std::vector<int>>> schedules;
  // One mesh, micro-batch, schedule and interleave degree: every recomputation and sequence
  // parallelism at the lowest ZeRO stage that fits.
  auto try_plans = [&](plan_config c) {
    if (!check(md, cl, c).empty()) return;
    const auto key = std::make_tuple(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages);
    auto it = schedules.find(key);
    if (it == schedules.end()) {
      try {
        schedule made = make_named_schedule(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages);
        std::vector<int> peak = validate(made).peak_live_activations;
        it = schedules.emplace(key, std::make_pair(std::move(made), std::move(peak))).first;
      } catch (const std::invalid_argument&) {
        return;  // e.g. interleaved with M not a multiple of P
      }
    }
    const std::vector<int>& peak = it->second.second;
    for (recompute_mode rc : space.recomputes)
      for (bool sp : space.sequence_parallel) {
        if (sp && c.m.tp == 1) continue;  // nothing to split
        c.rc = rc;
        c.sequence_parallel = sp;
        // Memory first: simulating a plan that cannot fit is wasted work.
        bool any = false;
        for (int z : space.zero) {
          if (!has_stage(space.acct, z)) continue;
          c.zero = z;
          plan_result probe;
          size_memory(md, cl, c, peak, probe);
          if (probe.fits) {
            any = true;
            break;
          }
        }
        if (!any) continue;
        const priced p = price(md, cl, c);
        if (static_cast<int>(found.size()) >= top && step_lower_bound(c, p) >= found.back().step_seconds) continue;
        plan_result r = finish(md, cl, c, it->second.first, p);
        const auto at = std::upper_bound(found.begin(), found.end(), r.step_seconds,
                                         [](double t, const plan_result& x) { return t < x.step_seconds; });
        found.insert(at, std::move(r));
        if (static_cast<int>(found.size()) > top) found.pop_back();
      }
  };
  for (int tp : space.tp)
    for (int cp : space.cp) {
      if (cp > 1 && (md.sequence / cp < space.min_cp_tokens || std::fmod(md.sequence, 2.0 * cp) != 0)) continue;
      for (int pp = 1; pp <= std::min(space.max_pp, md.layers); ++pp) {
        if (cl.gpus() % (tp * cp * pp) != 0 || top < 1) continue;
        const int dp = cl.gpus() / (tp * cp * pp);
        // Where pp does not divide the layers, the middle stages take ceil(L / pp) and the first
        // and last share what is left, as Llama 3 405B's run split them.
        int ends = 0;
        if (md.layers % pp != 0) {
          const int middle = (md.layers + pp - 1) / pp, rest = md.layers - (pp - 2) * middle;
          if (pp < 3 || rest < 2 || rest % 2 != 0) continue;
          ends = rest / 2;
        }
        std::vector<int> eps{1};
        if (md.moe()) eps = space.ep;
        for (int ep : eps) {
          if (md.moe() && (md.experts % ep != 0 || (tp * cp * dp) % ep != 0)) continue;
          for (rank_order order : space.orders) {
            // The orders differ only where both pp and the stage's other ranks span more than one.
            if (order != space.orders.front() && (pp == 1 || dp * cp == 1)) continue;
            for (cp_kind kind : space.cp_kinds) {
              if (kind != space.cp_kinds.front() && cp == 1) continue;
              for (int b : space.micro_batch)
                for (const std::string& name : space.schedules) {
                  if (pp == 1 && name != space.schedules.front()) continue;  // without a pipeline they are one
                  for (int v : name == "interleaved" ? space.interleave : std::vector<int>{1}) {
                    plan_config c;
                    c.m = {dp, pp, tp, 1};
                    c.cp = cp;
                    c.cp_attention = kind;
                    c.ep = ep;
                    c.order = order;
                    c.stack = space.stack;
                    c.precision = space.precision;
                    c.global_batch = global_batch;
                    c.micro_batch = b;
                    c.schedule = name;
                    c.virtual_stages = v;
                    c.first_stage_layers = c.last_stage_layers = ends;
                    c.acct = space.acct;
                    try_plans(c);
                  }
                }
            }
          }
        }
      }
    }
  return found;
}

}  // namespace troupe::sched::plan
