// The forecast of a job (see job_forecast.hpp). The op lists follow the layers' own forward and
// backward (kernels/layers_*.cpp): what each GEMM multiplies, which passes read and write what,
// what each layer keeps in its stash.
#include "actors/plan/job_forecast.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "actors/plan/memory_plan.hpp"
#include "schedules/validate.hpp"

namespace troupe {

double machine_costs::gemm_seconds(dtype, double m, double n, double k, double batch) const {
  const double bytes = gemm_bytes_per_s > 0 ? 4 * (m * k + k * n + m * n) / gemm_bytes_per_s : 0;
  return batch * (2 * m * n * k / gemm_flops_per_s + bytes);
}

double elementwise_seconds(const machine_costs& m, double bytes) { return bytes / m.elementwise_bytes_per_s; }

double all_reduce_seconds(const machine_costs& m, double bytes) {
  return m.all_reduce_latency_s + bytes / m.all_reduce_bytes_per_s;
}

namespace {

// One layer's seconds for one micro-batch, and the floats its stash keeps after forward.
struct layer_cost {
  double forward = 0, backward_input = 0, backward_weight = 0;
  double stash_floats = 0;
};

// The shape every layer of one micro-batch sees.
struct batch_shape {
  double rows = 0;       // R: samples (MLP) or tokens (GPT) of the micro-batch
  double sequences = 0;  // b (GPT)
  int tp = 1;
  int cp = 1;  // context parallelism: rows holds T / cp of each sequence's tokens
  context::cp_mode cp_mode = context::cp_mode::all_gather;
};

// What a cp mode's backward moves per rank against the all-gather's, whose forward and backward
// the calibrated all-reduce prices (kernels/context_attention.hpp). Per rank and block, in units
// of its own q, k, v or output (S floats): the all-gather moves 2(cp - 1) S forward (k and v of
// the others) and 4(cp - 1) S backward (gathered again, gradients reduce-scattered). The ring
// moves the same forward and 2(cp - 1) + 2 cp backward (k|v round again, their gradients one
// step more). The all-to-all's exchanges pass each block (cp - 1) / 2 links on average: forward
// qkv and the output, 4 S (cp - 1) / 2 = 2(cp - 1) S; backward qkv, dout and dqkv, 7 S (cp - 1) / 2.
double cp_backward_share(context::cp_mode mode, int cp) {
  switch (mode) {
    case context::cp_mode::all_gather:
      return 1;
    case context::cp_mode::ring:
      return (2.0 * (cp - 1) + 2.0 * cp) / (4.0 * (cp - 1));
    case context::cp_mode::all_to_all:
      return 7.0 / 8.0;
  }
  return 1;
}

void check_modelled(const train_config& cfg, const model_spec& model) {
  auto refuse = [](const std::string& what) {
    throw std::invalid_argument("the forecast does not model " + what);
  };
  if (cfg.threads != 1) refuse("--threads " + std::to_string(cfg.threads) + " (the calibration measures one thread per rank)");
  if (cfg.sequence_parallel) refuse("--sequence-parallel");
  if (cfg.zero != 0) refuse("--zero " + std::to_string(cfg.zero) + " (only plain data parallelism, --zero 0)");
  if (cfg.consistency != consistency_model::none) refuse("parameter servers (--consistency)");
  if (model.kind == model_kind::mlp && cfg.mesh.tp > 1) refuse("an MLP split over --tp");
  if (model.experts > 0 && cfg.mesh.ep > 1) refuse("expert parallelism (--ep)");
  if (model.experts > 0 && model.capacity_factor > 0) refuse("an expert capacity (--capacity-factor; dropless only)");
  if (!cfg.user_schedule.stages.empty()) refuse("a schedule file (only the named schedules)");
  // A GPU's attention keeps a log-sum-exp per row, not the scores, and runs at the GPU's speed.
  for (const device& d : cfg.devices)
    if (!d.is_cpu()) refuse("ranks on " + d.to_string() + " (the calibration measures this machine's CPU)");
}

// A linear layer's three products, on f32 operands as the calibration measured them.
double linear_forward(const machine_costs& m, double R, double out, double in) {
  // the product, then the bias added to every row
  return m.gemm_seconds(dtype::f32, R, out, in, 1) + elementwise_seconds(m, 8 * R * out);
}
double linear_input(const machine_costs& m, double R, double out, double in) {
  return m.gemm_seconds(dtype::f32, R, in, out, 1);
}
double linear_weight(const machine_costs& m, double R, double out, double in) {
  // dW, then the bias's row sums
  return m.gemm_seconds(dtype::f32, out, in, R, 1) + elementwise_seconds(m, 4 * R * out);
}

layer_cost block_cost(const machine_costs& m, const model_spec& spec, const batch_shape& s, recompute_mode rc) {
  const double R = s.rows, C = spec.channels, t = s.tp, Ct = C / t, H = spec.heads / t, T = spec.context;
  // Under context parallelism a rank's T / cp queries meet all T keys, gathered from the group
  // (kernels/context_attention.hpp): one all-gather of k|v forward, one reduce-scatter of their
  // gradients back, each about an all-reduce of the rank's own k|v.
  const double Tq = T / s.cp;
  const double attention_units = s.sequences * H * Tq * T * (C / spec.heads);
  const double cp = s.cp > 1 ? all_reduce_seconds(m, 4 * 2 * R * Ct) : 0;  // the forward's, every mode's
  const double cp_back = cp * (s.cp > 1 ? cp_backward_share(s.cp_mode, s.cp) : 1);
  const double ln_forward = elementwise_seconds(m, 4 * 2 * R * C), ln_backward = elementwise_seconds(m, 4 * 4 * R * C);
  const double add = elementwise_seconds(m, 4 * 3 * R * C);
  const double tp = t > 1 ? all_reduce_seconds(m, 4 * R * C) : 0;
  // (out, in) of qkv, proj, fc and fc_proj on this tp rank.
  const double linears[4][2] = {{3 * Ct, C}, {C, Ct}, {4 * Ct, C}, {C, 4 * Ct}};
  layer_cost c;
  // Context parallelism runs the blockwise kernels (online softmax, no T x T scores kept).
  const double attention_forward_s = s.cp > 1 ? m.blockwise_attention_forward_s : m.attention_forward_s;
  const double attention_backward_s = s.cp > 1 ? m.blockwise_attention_backward_s : m.attention_backward_s;
  const double attention = attention_units * attention_forward_s;
  c.forward = 2 * ln_forward + attention + 2 * add + elementwise_seconds(m, 4 * 2 * 4 * R * Ct) + 2 * tp + cp;
  c.backward_input = 2 * ln_backward + attention_units * attention_backward_s + 2 * add +
                     elementwise_seconds(m, 4 * 3 * 4 * R * Ct) + 2 * tp + cp_back;
  for (const auto& l : linears) {
    c.forward += linear_forward(m, R, l[0], l[1]);
    c.backward_input += linear_input(m, R, l[0], l[1]);
    c.backward_weight += linear_weight(m, R, l[0], l[1]);
  }
  // Kept: x, ln1's output, x2, ln2's output (R x C each); qkv, the attention's output, fc's and
  // GELU's outputs (12 R x C/t); the layernorms' means and rstds; the scores (b x H x T x T).
  // Context parallelism keeps no scores: a log-sum-exp per query row and head and a copy of the
  // attention's output (R x (H + C/t)), from which backward recomputes them block by block.
  const double scores = s.cp > 1 ? R * (H + Ct) : s.sequences * H * T * T;
  c.stash_floats = 4 * R * C + 12 * R * Ct + 4 * R + scores;
  if (rc == recompute_mode::selective && s.cp == 1) {
    c.stash_floats -= scores;
    c.backward_input += attention;
  }
  if (rc == recompute_mode::full) c.backward_input += c.forward;
  return c;
}

// An MoE block (kernels/layers_moe_block.hpp): the dense block's attention half, then the router
// and the experts on every token's top_k rows, the load spread evenly (dropless, one rank
// holding every expert: what the forecast takes). Kept beyond the attention half: ln2's output
// (the experts' input), the router's logits, each expert's input rows and pre-GELU rows (their
// copies: top_k rows per token), the outputs that came back, and the rows' counts.
layer_cost moe_block_cost(const machine_costs& m, const model_spec& spec, const batch_shape& s, recompute_mode rc) {
  const double R = s.rows, C = spec.channels, E = double(spec.experts), K = double(spec.top_k), F = 4 * C;
  const double routed = R * K, per_expert = routed / E;
  layer_cost c = block_cost(m, spec, s, rc == recompute_mode::full ? recompute_mode::none : rc);
  // Take the dense MLP out: its two linears, GELU's pass and its stash (fc and GELU outputs).
  c.forward -= linear_forward(m, R, F, C) + linear_forward(m, R, C, F) + elementwise_seconds(m, 4 * 2 * F * R);
  c.backward_input -= linear_input(m, R, F, C) + linear_input(m, R, C, F) + elementwise_seconds(m, 4 * 3 * F * R);
  c.backward_weight -= linear_weight(m, R, F, C) + linear_weight(m, R, C, F);
  c.stash_floats -= 8 * R * C;
  // The router (no bias), its softmax and top-k; the rows copied to their experts and combined back.
  c.forward += m.gemm_seconds(dtype::f32, R, E, C, 1) + elementwise_seconds(m, 4 * 3 * R * E) +
               elementwise_seconds(m, 4 * 2 * 2 * routed * C);
  c.backward_input += m.gemm_seconds(dtype::f32, R, C, E, 1) + elementwise_seconds(m, 4 * 3 * R * E) +
                      elementwise_seconds(m, 4 * 3 * 2 * routed * C);
  c.backward_weight += m.gemm_seconds(dtype::f32, E, C, R, 1);
  // Each expert, an MLP of 4C, on its share of the rows.
  c.forward += E * (linear_forward(m, per_expert, F, C) + linear_forward(m, per_expert, C, F)) +
               elementwise_seconds(m, 4 * 2 * F * routed);
  c.backward_input += E * (linear_input(m, per_expert, F, C) + linear_input(m, per_expert, C, F)) +
                      elementwise_seconds(m, 4 * 3 * F * routed);
  c.backward_weight += E * (linear_weight(m, per_expert, F, C) + linear_weight(m, per_expert, C, F)) +
                       elementwise_seconds(m, 4 * F * routed);  // GELU again for fc_proj's weight gradient
  c.stash_floats += R * E + E + routed * (C + F) + routed * C;
  if (rc == recompute_mode::full) c.backward_input += c.forward;
  return c;
}

// Layer i of the model, as build_layers() lays it out (kernels/model.cpp, gpt.cpp).
layer_cost cost_of_layer(const machine_costs& m, const model_spec& spec, const batch_shape& s, recompute_mode rc,
                         int64_t i) {
  const double R = s.rows;
  layer_cost c;
  if (spec.kind == model_kind::gpt) {
    const double C = spec.channels, V = double(spec.vocab) / s.tp;
    const int64_t blocks = spec.blocks;
    if (i == 0) {  // token and position embedding: gather rows, add, and scatter-add back
      c.forward = elementwise_seconds(m, 4 * 3 * R * C) + (s.tp > 1 ? all_reduce_seconds(m, 4 * R * C) : 0);
      c.backward_weight = elementwise_seconds(m, 4 * 3 * R * C);
      c.stash_floats = R;  // the tokens
    } else if (i <= blocks) {
      c = spec.is_moe_block(i - 1) ? moe_block_cost(m, spec, s, rc) : block_cost(m, spec, s, rc);
    } else if (i == blocks + 1) {  // the final layernorm
      c.forward = elementwise_seconds(m, 4 * 2 * R * C);
      c.backward_input = elementwise_seconds(m, 4 * 4 * R * C);
      c.stash_floats = R * C + 2 * R;
    } else {  // the head, column-parallel over the vocabulary; its input gradient is summed over tp
      c.forward = linear_forward(m, R, V, C);
      c.backward_input = linear_input(m, R, V, C) + (s.tp > 1 ? all_reduce_seconds(m, 4 * R * C) : 0);
      c.backward_weight = linear_weight(m, R, V, C);
      c.stash_floats = R * C;
    }
  } else {
    std::vector<int64_t> widths{spec.inputs};
    widths.insert(widths.end(), spec.hidden.begin(), spec.hidden.end());
    widths.push_back(spec.classes);
    const double in = double(widths[static_cast<size_t>(i / 2)]), out = double(widths[static_cast<size_t>(i / 2 + 1)]);
    if (i % 2 == 0) {
      c.forward = linear_forward(m, R, out, in);
      c.backward_input = linear_input(m, R, out, in);
      c.backward_weight = linear_weight(m, R, out, in);
      c.stash_floats = R * in;  // the input: the layer below's saved output, counted once (below)
    } else {  // the relu after linear i - 1, on its output
      c.forward = elementwise_seconds(m, 4 * 2 * R * out);
      c.backward_input = elementwise_seconds(m, 4 * 3 * R * out);
      c.stash_floats = R * out;
    }
  }
  if (rc == recompute_mode::full && !(spec.kind == model_kind::gpt && i >= 1 && i <= spec.blocks))
    c.backward_input += c.forward;
  return c;
}

// The floats of layer i's input, which full recomputation keeps instead of its activations.
double input_floats(const model_spec& spec, const batch_shape& s, int64_t i) {
  if (i == 0) return spec.kind == model_kind::gpt ? s.rows : s.rows * double(spec.inputs);
  if (spec.kind == model_kind::gpt) return s.rows * double(spec.channels);
  const int64_t width = i % 2 == 0 ? spec.hidden[static_cast<size_t>(i / 2 - 1)] : spec.hidden[static_cast<size_t>(i / 2)];
  return s.rows * double(width);
}

int64_t layer_count(const model_spec& spec) {
  return spec.kind == model_kind::gpt ? spec.blocks + 3 : 2 * static_cast<int64_t>(spec.hidden.size()) + 1;
}

// The loss on the last chunk's logits: softmax and cross-entropy forward, their gradient back.
double loss_seconds(const machine_costs& m, const model_spec& spec, const batch_shape& s) {
  const double classes = spec.kind == model_kind::gpt ? double(spec.vocab) / s.tp : double(spec.classes);
  double t = 2 * elementwise_seconds(m, 4 * 2 * s.rows * classes);
  if (s.tp > 1) t += 3 * all_reduce_seconds(m, 4 * s.rows);  // the vocabulary-parallel max, sum and target logit
  return t;
}

batch_shape shape_of(const train_config& cfg, const model_spec& spec) {
  batch_shape s;
  s.sequences = double(cfg.batch_size) / cfg.mesh.dp / cfg.micro_batches;
  s.cp = cfg.mesh.cp;
  s.cp_mode = cfg.cp_mode;
  s.rows = spec.kind == model_kind::gpt ? s.sequences * spec.context / s.cp : s.sequences;
  s.tp = cfg.mesh.tp;
  return s;
}

// Stash bytes of layers [begin, end) for one micro-batch: an MLP's relu keeps the output its next
// linear keeps as input, which the chunk counts once.
double stash_of(const std::vector<layer_cost>& layers, const model_spec& spec, int64_t begin, int64_t end) {
  double floats = 0;
  for (int64_t i = begin; i < end; ++i) {
    const bool shared = spec.kind == model_kind::mlp && i % 2 == 0 && i > begin;
    if (!shared) floats += layers[static_cast<size_t>(i)].stash_floats;
  }
  return 4 * floats;
}

// A stage's stash bytes along its row: a micro-batch's stash lives from its F to its B (or W);
// full recomputation rebuilds one layer's activations at a time in B or I (chunk_rebuild: the
// most its stash then holds; 0 without full recomputation).
// peak: the most held at once. at_last_backward: what is held at the row's last B or W, that
// micro-batch's included: when the gradient buckets go out, the activations beside their copies
// (under 1F1B and GPipe the earlier micro-batches' stashes are gone by then, so the peak and the
// copies do not add up).
struct stash_walk {
  double peak = 0, at_last_backward = 0;
};
stash_walk walk_stashes(const sched::schedule& s, int stage, const std::vector<double>& chunk_stash,
                        const std::vector<double>& chunk_rebuild, int pp) {
  double live = 0;
  stash_walk w;
  for (const sched::action& a : s.stages[static_cast<size_t>(stage)]) {
    const size_t chunk = static_cast<size_t>(a.chunk * pp + stage);
    if (chunk >= chunk_stash.size()) continue;
    // Under full recomputation the micro-batch's stash (its layers' inputs) grows to the rebuilt
    // layer's activations at most; otherwise it is what forward left.
    const double rebuilt = chunk_rebuild[chunk] > 0 ? live - chunk_stash[chunk] + chunk_rebuild[chunk] : live;
    switch (a.kind) {
      case sched::op::forward:
        live += chunk_stash[chunk];
        w.peak = std::max(w.peak, live);
        break;
      case sched::op::backward:
      case sched::op::backward_input:
        if (chunk_rebuild[chunk] > 0) w.peak = std::max(w.peak, rebuilt);
        if (a.kind == sched::op::backward) {
          w.at_last_backward = rebuilt;
          live -= chunk_stash[chunk];
        }
        break;
      case sched::op::backward_weight:
        w.at_last_backward = rebuilt;
        live -= chunk_stash[chunk];
        break;
      default:
        break;
    }
  }
  return w;
}

// Each chunk's stash for one micro-batch and, under full recomputation, the most it holds while
// a layer is rebuilt (0 otherwise).
struct chunk_stashes {
  std::vector<double> stash, rebuild;
};

chunk_stashes stashes_of(const train_config& cfg, const job_plan& plan, const model_spec& model,
                         const std::vector<layer_cost>& layers, const batch_shape& s) {
  chunk_stashes out;
  for (const layer_range& r : plan.chunks) {
    double rebuild = 0, inputs_below = 0;
    for (int64_t i = r.begin; i < r.end; ++i) {
      // Full recomputation keeps only each layer's input and walks the chunk down: rebuilding
      // layer i, the stash holds the inputs below it and layer i's activations (its input among them).
      rebuild = std::max(rebuild, inputs_below + 4 * layers[static_cast<size_t>(i)].stash_floats);
      inputs_below += 4 * input_floats(model, s, i);
    }
    const bool full = cfg.recompute == recompute_mode::full;
    out.stash.push_back(full ? inputs_below : stash_of(layers, model, r.begin, r.end));
    out.rebuild.push_back(full ? rebuild : 0);
  }
  return out;
}

// Prices every chunk for one micro-batch at `sharing` (the slowdown of ranks side by side) and
// simulates the step.
job_forecast price_job(const job_plan& plan, const model_spec& model, const machine_costs& machine,
                       const std::vector<layer_cost>& layers, const batch_shape& s, double sharing) {
  const int pp = plan.mesh.pp, chunks = static_cast<int>(plan.chunks.size());
  const double scale = machine.op_scale * sharing;
  job_forecast f;
  sched::cost_model costs;
  costs.per_chunk.assign(static_cast<size_t>(pp), std::vector<sched::chunk_cost>(static_cast<size_t>(chunks / pp)));
  for (int c = 0; c < chunks; ++c) {
    const layer_range r = plan.chunks[static_cast<size_t>(c)];
    sched::chunk_cost cc{machine.action_overhead_s, 0, machine.action_overhead_s, machine.action_overhead_s};
    for (int64_t i = r.begin; i < r.end; ++i) {
      const layer_cost& l = layers[static_cast<size_t>(i)];
      cc.forward += scale * l.forward;
      cc.backward_input += scale * l.backward_input;
      cc.backward_weight += scale * l.backward_weight;
    }
    if (c == chunks - 1) {
      const double loss = loss_seconds(machine, model, s);
      cc.forward += scale * loss / 2;
      cc.backward_input += scale * loss / 2;
    }
    cc.backward = cc.backward_input + cc.backward_weight - machine.action_overhead_s;
    costs.per_chunk[static_cast<size_t>(c % pp)][static_cast<size_t>(c / pp)] = cc;
    f.chunk_costs.push_back(cc);
  }
  // Every stage reduces its own gradients and steps its own optimizer; the simulator takes one
  // figure for all, so the largest stage's (they differ by the embedding and the head).
  int64_t most_params = 0;
  for (int stage = 0; stage < pp; ++stage)
    most_params = std::max(most_params, plan.stage_params[plan.slot(stage, 0)]);
  if (plan.mesh.replicas() > 1) f.reduce_grads_seconds = all_reduce_seconds(machine, 4.0 * double(most_params));
  f.optimizer_seconds = double(most_params) * machine.optimizer_s_per_param * sharing;
  costs.reduce_grads_seconds = f.reduce_grads_seconds;
  costs.optimizer_step_seconds = f.optimizer_seconds;
  f.sim = sched::simulate(plan.schedule, costs);
  f.step_seconds = f.sim.makespan_seconds;
  return f;
}

}  // namespace

job_forecast forecast_job(const train_config& cfg, const job_plan& plan, const model_spec& model,
                          const machine_costs& machine) {
  check_modelled(cfg, model);
  const batch_shape s = shape_of(cfg, model);
  std::vector<layer_cost> layers;
  for (int64_t i = 0; i < layer_count(model); ++i)
    layers.push_back(cost_of_layer(machine, model, s, cfg.recompute, i));

  const int pp = plan.mesh.pp;
  // Every rank of the process computes on its own thread; with more than one they slow each
  // other down, and beyond the cores they take turns.
  const int ranks_here = std::max(1, plan.mesh.ranks() / std::max(1, plan.mesh.processes));
  const double queueing = std::max(1.0, double(ranks_here) / std::max(1, machine.cores));
  // The slowdown of ranks side by side applies while they compute at once: priced at the full
  // slowdown first, a two-stage pipeline's simulation says how much of a stage's busy time the
  // other overlaps (dp and tp replicas run in lockstep: all of it), and it is priced again at
  // that share.
  auto sharing = [&](double overlap) {
    return ranks_here == 1 ? 1.0 : (1 + (machine.concurrent_slowdown - 1) * overlap) * queueing;
  };
  job_forecast f = price_job(plan, model, machine, layers, s, sharing(1));
  if (pp == 2 && ranks_here > 1) {
    const sched::simulation& sim = f.sim;
    const double busy = std::max(sim.busy_seconds[0], sim.busy_seconds[1]);
    const double overlap = busy > 0 ? std::clamp((sim.busy_seconds[0] + sim.busy_seconds[1] - sim.makespan_seconds) / busy, 0.0, 1.0) : 1.0;
    f = price_job(plan, model, machine, layers, s, sharing(overlap));
  }
  const chunk_stashes stashes = stashes_of(cfg, plan, model, layers, s);

  for (int rank = 0; rank < plan.mesh.ranks(); ++rank) {
    const int stage = plan.mesh.coords_of(rank).pp;
    rank_forecast r;
    r.rank = rank;
    r.peak = predicted_model_states(cfg, plan, rank);
    const int64_t params = plan.stage_params[plan.slot(stage, plan.mesh.coords_of(rank).tp)];
    const stash_walk walk = walk_stashes(plan.schedule, stage, stashes.stash, stashes.rebuild, pp);
    r.peak.bytes[static_cast<size_t>(memory_kind::activations)] = static_cast<int64_t>(walk.peak);
    // With data parallelism the stage keeps a copy of each bucket for its collective.
    if (plan.mesh.replicas() > 1) r.peak.bytes[static_cast<size_t>(memory_kind::buffers)] = 4 * params;
    // Training runs on one copy of the parameters and of the gradients; the second copy of each
    // (memory_plan.hpp) lives only around O, when the stashes are gone.
    // A stage of several chunks copies the optimizer's answer into each chunk's own buffer, so
    // it trains beside the shard's master copy: two copies then.
    const int64_t copies = static_cast<int64_t>(plan.chunks.size()) / pp > 1 ? 2 : 1;
    // The buckets' copies are made at the stage's last backward, beside what is live then.
    const int64_t beside_buffers =
        r.peak.of(memory_kind::buffers) > 0 ? static_cast<int64_t>(walk.at_last_backward) + r.peak.of(memory_kind::buffers) : 0;
    const int64_t training = copies * 4 * params + 4 * params + r.peak.of(memory_kind::optimizer_state) +
                             std::max(r.peak.of(memory_kind::activations), beside_buffers);
    // Around O the bucket copies may still be held: in one process a rank's ring messages and
    // its peers' results share its buffer, so it goes when the slowest of them lets go. The
    // forecast says both: held (peak_total) and gone (peak_total_low).
    const int64_t stepping = r.peak.of(memory_kind::parameters) + r.peak.of(memory_kind::gradients) +
                             r.peak.of(memory_kind::optimizer_state) + r.peak.of(memory_kind::buffers);
    r.peak_total = std::max(training, stepping);
    r.peak_total_low = std::max(training, stepping - r.peak.of(memory_kind::buffers));
    f.ranks.push_back(r);
  }
  return f;
}

std::string describe(const job_forecast& f) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "predicted step %.4f s (pipeline %.4f, gradient reduction %.4f, optimizer %.4f)",
                f.step_seconds, f.sim.makespan_seconds, f.reduce_grads_seconds, f.optimizer_seconds);
  std::string out = buf;
  for (const rank_forecast& r : f.ranks) {
    std::snprintf(buf, sizeof buf, "\nrank %d: peak device memory %.2f MiB (", r.rank, double(r.peak_total) / (1 << 20));
    out += buf + r.peak.to_string() + ")";
  }
  return out;
}

}  // namespace troupe
