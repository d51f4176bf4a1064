// Pricing and searching plans (see plan.hpp). Per-layer costs count the GEMMs of Megatron-LM's
// layer (QKV, attention scores and context, projection, two MLP GEMMs), the elementwise passes
// between them at memory bandwidth, and tensor parallelism's two all-reduces each way.
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

const char* to_string(activation_kind a) { return a == activation_kind::swiglu ? "swiglu" : "gelu"; }

std::optional<activation_kind> parse_activation(const std::string& text) {
  for (activation_kind a : {activation_kind::gelu, activation_kind::swiglu})
    if (text == to_string(a)) return a;
  return std::nullopt;
}

double model_desc::layer_gemm_parameters() const {
  const double h = hidden, mlp_matrices = activation == activation_kind::swiglu ? 3 : 2;
  return 2 * h * h + 2 * h * h * kv_share() + mlp_matrices * h * ffn();
}

double model_desc::model_flops_per_sequence() const {
  const double s = sequence, h = hidden, l = layers;
  return 3 * (2 * s * l * layer_gemm_parameters() + 4 * s * s * h * l + 2 * s * h * vocab);
}

double model_desc::hardware_flops_per_sequence(recompute_mode r) const {
  const double s = sequence, h = hidden, l = layers;
  switch (r) {
    case recompute_mode::none:
      return model_flops_per_sequence();
    case recompute_mode::selective:  // the two attention GEMMs run again: 4s^2h per layer
      return model_flops_per_sequence() + 4 * s * s * h * l;
    case recompute_mode::full:  // the layers' forward again, not the logits
      return 4 * (2 * s * l * layer_gemm_parameters() + 4 * s * s * h * l) + 3 * 2 * s * h * vocab;
  }
  return 0;
}

std::string model_desc::describe_shape() const {
  std::vector<std::string> parts;
  if (kv() != heads) parts.push_back("GQA " + std::to_string(kv()) + " kv heads");
  if (activation != activation_kind::gelu || ffn() != 4 * hidden)
    parts.push_back(std::string(activation == activation_kind::swiglu ? "SwiGLU " : "GELU ") +
                    std::to_string(static_cast<long long>(ffn())));
  if (!tied_embeddings) parts.push_back("untied");
  if (fused_attention) parts.push_back("fused attention");
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

double stage_layers(const model_desc& md, const plan_config& c, int d) {
  const int pp = c.m.pp;
  if (c.first_stage_layers <= 0 && c.last_stage_layers <= 0) return double(md.layers) / pp;
  if (d == 0 && c.first_stage_layers > 0) return c.first_stage_layers;
  if (d == pp - 1 && c.last_stage_layers > 0) return c.last_stage_layers;
  const int ends = (c.first_stage_layers > 0) + (c.last_stage_layers > 0);
  return double(md.layers - c.first_stage_layers - c.last_stage_layers) / (pp - ends);
}

std::string check(const model_desc& model, const cluster_desc& cl, const plan_config& c) {
  const mesh& m = c.m;
  if (m.dp < 1 || m.pp < 1 || m.tp < 1) return "mesh " + to_string(m) + ": every axis must be >= 1";
  if (m.ranks() != cl.gpus())
    return "mesh " + to_string(m) + " has " + std::to_string(m.ranks()) + " ranks but cluster " + cl.name + " has " +
           std::to_string(cl.gpus()) + " GPUs (" + std::to_string(cl.nodes) + " nodes x " +
           std::to_string(cl.gpus_per_node) + "): dp x pp x tp must equal the GPUs";
  if (model.heads % m.tp != 0)
    return "--tp " + std::to_string(m.tp) + " does not divide the " + std::to_string(model.heads) + " heads of " + model.name;
  if (model.heads % model.kv() != 0)
    return "kv_heads " + std::to_string(model.kv()) + " does not divide the " + std::to_string(model.heads) +
           " heads of " + model.name;
  // Megatron splits the query groups over tp: each rank needs whole k and v heads.
  if (model.kv() % m.tp != 0)
    return "--tp " + std::to_string(m.tp) + " does not divide the " + std::to_string(model.kv()) + " kv_heads of " +
           model.name;
  if (std::fmod(model.ffn(), m.tp) != 0)
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
      if (static_cast<int>(stage_layers(model, c, d)) % c.virtual_stages != 0)
        return "virtual stages " + std::to_string(c.virtual_stages) + " do not divide stage " + std::to_string(d) +
               "'s " + std::to_string(static_cast<int>(stage_layers(model, c, d))) + " layers";
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
  double compute = 0, tensor_parallel = 0, recompute = 0, zero3 = 0;  // zero3: per chunk
  double head = 0, embedding_tp = 0;                                   // once per micro-batch
};

struct priced {
  cost_model costs;
  layer_parts parts;
  double dp_seconds = 0, optimizer_seconds = 0;
};

layer_shape shape_of(const model_desc& md, int micro_batch) {
  layer_shape s{md.sequence, double(micro_batch), md.hidden, double(md.heads)};
  s.kv_share = md.kv_share();
  s.ffn = md.ffn();
  s.swiglu = md.activation == activation_kind::swiglu;
  s.fused_attention = md.fused_attention;
  return s;
}

// Parameters stage d holds on one GPU: its layers, plus the (vocabulary-parallel) embedding on
// the first stage and its tied copy on the last; positions are not split over tp.
double stage_parameters(const model_desc& md, const plan_config& c, int d) {
  const mesh& m = c.m;
  double p = stage_layers(md, c, d) * md.layer_parameters() / m.tp;
  if (d == 0) p += md.vocab * md.hidden / m.tp + md.sequence * md.hidden;
  if (d == m.pp - 1 && m.pp > 1) p += md.vocab * md.hidden / m.tp;
  return p;
}

priced price(const model_desc& md, const cluster_desc& cl, const plan_config& c) {
  const device_desc& dev = cl.device;
  const mesh& m = c.m;
  const published_device hw(dev, c.precision.tf32);
  const dtype dt = c.precision.operands;
  const double t = m.tp, b = c.micro_batch, s = md.sequence, h = md.hidden, a = md.heads, V = md.vocab;
  const double rows = b * s, sbh = s * b * h;
  // q, k and v in one product (k and v narrower under GQA), the output projection, the MLP's
  // up (SwiGLU: gate and up, 2f wide) and down projections.
  const double f = md.ffn(), up = md.activation == activation_kind::swiglu ? 2 * f : f;
  const double linear_gemms = hw.gemm_seconds(dt, rows, (1 + 2 * md.kv_share()) * h / t, h, 1) +
                              hw.gemm_seconds(dt, rows, h, h / t, 1) + hw.gemm_seconds(dt, rows, up / t, h, 1) +
                              hw.gemm_seconds(dt, rows, h, f / t, 1);
  const double heads = b * a / t;
  const double attention_gemms = hw.gemm_seconds(dt, s, s, h / a, heads) + hw.gemm_seconds(dt, s, h / a, s, heads);
  // Bytes read plus written by the unfused passes: two layer norms (4sbh each), two
  // bias-dropout-adds (7sbh each: two inputs, output, mask), bias+GeLU on the MLP (16sbh/t at
  // 4h: f in, f out; SwiGLU reads 2f and writes f), scale-mask-softmax and dropout on the scores
  // (9as^2b/t; none when the attention is fused). Without sequence parallelism the norms and
  // dropouts repeat on every tp rank.
  const double mlp_bytes = (md.activation == activation_kind::swiglu ? 6 : 4) * f / h * sbh / t;
  const double linear_bytes = (c.sequence_parallel ? 22 / t : 22) * sbh + mlp_bytes;
  const double attention_bytes = md.fused_attention ? 0 : 9 * a * s * s * b / t;
  const double tp_collective = group_collective_seconds(collective::all_reduce, 2 * sbh, m, axis::tp, cl);
  const double forward = linear_gemms + attention_gemms + memory_seconds(dev, linear_bytes + attention_bytes) +
                         2 * tp_collective;
  // Backward: the input gradients of every GEMM (attention's two GEMMs have two inputs each and
  // no weights), the elementwise passes twice over, two all-reduces; the weight gradients apart.
  double input = linear_gemms + 2 * attention_gemms + memory_seconds(dev, 2 * (linear_bytes + attention_bytes)) +
                 2 * tp_collective;
  const double weight = linear_gemms;
  priced out;
  out.parts.compute = forward + input + weight - 4 * tp_collective;
  out.parts.tensor_parallel = 4 * tp_collective;
  if (c.rc == recompute_mode::full) out.parts.recompute = forward;
  if (c.rc == recompute_mode::selective) out.parts.recompute = attention_gemms + memory_seconds(dev, attention_bytes);
  input += out.parts.recompute;

  const int chunks = m.pp * c.virtual_stages;
  // A chunk of n layers. ZeRO-3 gathers its parameters for its forward and again for its
  // backward, and reduce-scatters its gradients, for every micro-batch.
  const auto chunk_of = [&](double n, double& z3) {
    const double chunk_params = n * md.layer_parameters() / t;
    double z3_forward = 0, z3_backward = 0;
    if (c.zero == 3) {
      z3_forward = group_collective_seconds(collective::all_gather, 2 * chunk_params, m, axis::dp, cl);
      z3_backward = z3_forward + group_collective_seconds(collective::reduce_scatter, 2 * chunk_params, m, axis::dp, cl);
    }
    z3 = z3_forward + z3_backward;
    return chunk_cost{n * forward + z3_forward, n * (input + weight) + z3_backward, n * input + z3_backward,
                      n * weight};
  };
  out.costs.uniform = chunk_of(double(md.layers) / chunks, out.parts.zero3);
  out.costs.per_chunk.resize(m.pp);
  for (int d = 0; d < m.pp; ++d) {
    double z3 = 0;
    out.costs.per_chunk[d].assign(c.virtual_stages, chunk_of(stage_layers(md, c, d) / c.virtual_stages, z3));
  }
  // The logits GEMM and the cross-entropy passes (fp16 logits in, fp32 probabilities out) sit on
  // the model's last chunk; the vocabulary-parallel embedding's all-reduce on its first.
  const double logits = hw.gemm_seconds(dt, rows, V / t, h, 1), ce_bytes = 6 * b * s * V / t;
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
  const link_class p2p = pipeline_crosses_nodes(m, cl) ? inter_node_link(cl, pipeline_span(m, cl)) : cl.intra_node;
  out.costs.activation_bytes = out.costs.grad_bytes = 2 * sbh / t;
  out.costs.link_bytes_per_second = p2p.bus_bytes_per_second;
  out.costs.send_seconds = p2p.alpha_seconds + (t > 1 ? group_collective_seconds(collective::all_gather, 2 * sbh, m, axis::tp, cl) : 0);

  // Per step: the gradients' reduction over dp (ZeRO 1-2: reduce-scatter then all-gather of the
  // parameters, the same bytes), a tied embedding's all-reduce between first and last stage,
  // and the optimizer step at memory bandwidth over the device's shard of the fp32 state.
  const double params = stage_parameters(md, c, 0);
  if (c.zero < 3) out.dp_seconds = group_collective_seconds(collective::all_reduce, 2 * params, m, axis::dp, cl);
  if (m.pp > 1 && md.tied_embeddings) {
    const link_class l = pipeline_crosses_nodes(m, cl) ? inter_node_link(cl, pipeline_span(m, cl)) : cl.intra_node;
    out.dp_seconds += ring_seconds(collective::all_reduce, 2 * V * h / t, 2, l);
  }
  const double shard = c.zero >= 1 ? params / m.dp : params;
  const state_bytes bytes = mixed_precision(c.opt);
  // Read and write the fp32 state, read the gradient, write the 16-bit parameters.
  const double step_bytes = shard * (2 * bytes.optimizer_state + bytes.gradients + bytes.parameters);
  out.optimizer_seconds = c.where.optimizer ? 0 : memory_seconds(dev, step_bytes);
  out.costs.reduce_grads_seconds = out.dp_seconds;
  out.costs.optimizer_step_seconds = out.optimizer_seconds;
  return out;
}

void size_memory(const model_desc& md, const cluster_desc& cl, const plan_config& c, const std::vector<int>& peak,
                 plan_result& r) {
  const mesh& m = c.m;
  const layer_shape shape = shape_of(md, c.micro_batch);
  const double per_layer = activation_bytes_per_layer(shape, m.tp, c.sequence_parallel, c.rc);
  const double sbh = md.sequence * c.micro_batch * md.hidden;
  r.memory = {};
  for (int d = 0; d < m.pp; ++d) {
    const double layers_per_chunk = stage_layers(md, c, d) / c.virtual_stages;
    memory_by_kind mem = model_states(stage_parameters(md, c, d), m.dp, c.zero, accounted_bytes(c.acct, c.opt, c.zero), c.where,
                                      md.layer_parameters() / m.tp);
    mem.activations = peak[d] * layers_per_chunk * per_layer;
    // Recomputing a layer in backward rebuilds all of its activations at once.
    if (c.rc != recompute_mode::none)
      mem.activations += activation_bytes_per_layer(shape, m.tp, c.sequence_parallel, recompute_mode::none) - per_layer;
    // The last stage's fp32 logits for a micro-batch; every stage a send and a receive buffer.
    if (d == m.pp - 1) mem.buffers += 4 * c.micro_batch * md.sequence * md.vocab / m.tp;
    if (m.pp > 1) mem.buffers += 2 * 2 * sbh;
    if (d == 0 || mem.total() > r.memory.total()) {
      r.memory = mem;
      r.memory_stage = d;
      r.memory_stage_parameters = stage_parameters(md, c, d);
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
  b.zero3_gathers = M * v * p.parts.zero3;
  b.dp_reduction = p.dp_seconds;
  b.optimizer = p.optimizer_seconds;
  b.pipeline_idle = 0;
  b.pipeline_idle = std::max(0.0, sim.makespan_seconds - b.total());
  return b;
}

plan_result finish(const model_desc& md, const cluster_desc& cl, const plan_config& c, const schedule& s) {
  plan_result r;
  r.config = c;
  const priced p = price(md, cl, c);
  r.sim = simulate(s, p.costs);
  r.breakdown = break_down(md, c, p, r.sim);
  r.pipeline_seconds = r.sim.makespan_seconds - p.dp_seconds - p.optimizer_seconds;
  r.dp_seconds = p.dp_seconds;
  r.optimizer_seconds = p.optimizer_seconds;
  r.step_seconds = r.sim.makespan_seconds;
  r.bubble_fraction = r.sim.bubble_fraction;
  size_memory(md, cl, c, r.sim.peak_live_activations, r);
  const double gpus = c.m.ranks(), seqs = c.global_batch;
  r.tflops_per_gpu = md.hardware_flops_per_sequence(c.rc) * seqs / (r.step_seconds * gpus) / 1e12;
  r.mfu = md.model_flops_per_sequence() * seqs / (r.step_seconds * gpus * cl.device.peak(c.precision));
  return r;
}

}  // namespace

plan_result evaluate(const model_desc& md, const cluster_desc& cl, const plan_config& c) {
  if (const std::string err = check(md, cl, c); !err.empty()) throw std::invalid_argument(err);
  const schedule s = make_named_schedule(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages);
  return finish(md, cl, c, s);
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

std::vector<named_seconds> parts(const step_breakdown& b) {
  return {{"compute", b.compute},           {"recompute", b.recompute},
          {"tensor_parallel", b.tensor_parallel}, {"zero3_gathers", b.zero3_gathers},
          {"pipeline_idle", b.pipeline_idle}, {"dp_reduction", b.dp_reduction},
          {"optimizer", b.optimizer}};
}

namespace {

// The plan choices that move a part of the step, for the explanation's lines.
std::string why(const std::string& part, const plan_config& x, const plan_config& y) {
  auto changed = [](const char* what, const std::string& a, const std::string& b) {
    return a == b ? std::string() : std::string(what) + " " + a + " -> " + b;
  };
  auto join = [](std::vector<std::string> items) {
    std::string out;
    for (const auto& i : items)
      if (!i.empty()) out += (out.empty() ? "" : ", ") + i;
    return out.empty() ? std::string("the same choices, other sizes") : out;
  };
  const std::string mb = changed("micro-batch", std::to_string(x.micro_batch), std::to_string(y.micro_batch));
  const std::string tp = changed("tp", std::to_string(x.m.tp), std::to_string(y.m.tp));
  const std::string pp = changed("pp", std::to_string(x.m.pp), std::to_string(y.m.pp));
  const std::string dp = changed("dp", std::to_string(x.m.dp), std::to_string(y.m.dp));
  const std::string rc = changed("recomputation", to_string(x.rc), to_string(y.rc));
  const std::string sched = changed("schedule", x.schedule + (x.virtual_stages > 1 ? " v" + std::to_string(x.virtual_stages) : ""),
                                    y.schedule + (y.virtual_stages > 1 ? " v" + std::to_string(y.virtual_stages) : ""));
  const std::string zero = changed("zero", std::to_string(x.zero), std::to_string(y.zero));
  if (part == "recompute") return join({rc});
  if (part == "tensor_parallel") return join({tp, mb, pp});
  if (part == "pipeline_idle") return join({sched, pp, changed("micro-batches", std::to_string(x.microbatches()), std::to_string(y.microbatches()))});
  if (part == "dp_reduction") return join({dp, pp, tp, zero});
  if (part == "optimizer") return join({zero, dp, pp, tp});
  if (part == "zero3_gathers") return join({zero});
  return join({tp, pp, mb});  // compute: each GEMM's size and how work splits over devices
}

}  // namespace

std::vector<std::string> explain(const plan_result& chosen, const plan_result& reference) {
  const auto a = parts(chosen.breakdown), b = parts(reference.breakdown);
  std::vector<std::pair<double, std::string>> lines;
  for (size_t i = 0; i < a.size(); ++i) {
    const double saved = b[i].seconds - a[i].seconds;
    if (std::abs(saved) <= 0.005 * reference.step_seconds) continue;
    char buf[320];
    std::snprintf(buf, sizeof buf, "%s %.3f s -> %.3f s (%s %.3f s, %.1f%% of the reference step): %s", a[i].name,
                  b[i].seconds, a[i].seconds, saved > 0 ? "saves" : "costs", std::abs(saved),
                  100 * std::abs(saved) / reference.step_seconds,
                  why(a[i].name, reference.config, chosen.config).c_str());
    lines.emplace_back(-saved, buf);
  }
  std::sort(lines.begin(), lines.end());
  std::vector<std::string> out;
  char head[200];
  std::snprintf(head, sizeof head, "step %.3f s against %.3f s: %.2fx the reference's throughput", chosen.step_seconds,
                reference.step_seconds, reference.step_seconds / chosen.step_seconds);
  out.emplace_back(head);
  for (auto& l : lines) out.push_back(std::move(l.second));
  char mem[200];
  std::snprintf(mem, sizeof mem, "memory %.1f GiB against %.1f GiB per device (stage %d against %d)",
                chosen.memory.total() / gib, reference.memory.total() / gib, chosen.memory_stage,
                reference.memory_stage);
  out.emplace_back(mem);
  return out;
}

std::vector<plan_result> search(const model_desc& md, const cluster_desc& cl, int global_batch,
                                const search_space& space, int top) {
  std::vector<plan_result> found;
  std::map<std::tuple<std::string, int, int, int>, schedule> schedules;
  // One mesh, micro-batch, schedule and interleave degree: every recomputation and sequence
  // parallelism at the lowest ZeRO stage that fits.
  auto try_plans = [&](plan_config c) {
    if (!check(md, cl, c).empty()) return;
    const auto key = std::make_tuple(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages);
    auto it = schedules.find(key);
    if (it == schedules.end()) {
      try {
        it = schedules.emplace(key, make_named_schedule(c.schedule, c.m.pp, c.microbatches(), c.virtual_stages)).first;
      } catch (const std::invalid_argument&) {
        return;  // e.g. interleaved with M not a multiple of P
      }
    }
    const std::vector<int> peak = validate(it->second).peak_live_activations;
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
        if (any) found.push_back(finish(md, cl, c, it->second));
      }
  };
  for (int tp : space.tp)
    for (int pp = 1; pp <= std::min(space.max_pp, md.layers); ++pp) {
      if (cl.gpus() % (tp * pp) != 0) continue;
      // Where pp does not divide the layers, the middle stages take ceil(L / pp) and the first
      // and last share what is left, as Llama 3 405B's run split them.
      int ends = 0;
      if (md.layers % pp != 0) {
        const int middle = (md.layers + pp - 1) / pp, rest = md.layers - (pp - 2) * middle;
        if (pp < 3 || rest < 2 || rest % 2 != 0) continue;
        ends = rest / 2;
      }
      for (int b : space.micro_batch)
        for (const std::string& name : space.schedules) {
          if (pp == 1 && name != space.schedules.front()) continue;  // without a pipeline they are one
          for (int v : name == "interleaved" ? space.interleave : std::vector<int>{1}) {
            plan_config c;
            c.m = {cl.gpus() / (tp * pp), pp, tp, 1};
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
  std::sort(found.begin(), found.end(),
            [](const plan_result& x, const plan_result& y) { return x.step_seconds < y.step_seconds; });
  if (static_cast<int>(found.size()) > top) found.resize(top);
  return found;
}

}  // namespace troupe::sched::plan
