// Loading plan descriptions with toml++ (see plan_files.hpp). Every table is read through one
// reader that records which keys it consumed, so a key no one asked for is an error, not a typo
// silently ignored.
#include "cli/plan_files.hpp"

#include <toml++/toml.h>

#include "storage/input_file.hpp"
#include "storage/output_file.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace troupe::cli {

namespace {

[[noreturn]] void fail(const std::string& path, const toml::node* n, const std::string& key, const std::string& what) {
  const std::string line = n ? ":" + std::to_string(n->source().begin.line) : "";
  throw std::invalid_argument(path + line + ": " + key + ": " + what);
}

toml::table parse(const std::string& path) {
  const std::string text = storage::read_input_file(path, "plan file", storage::settings_file_limit);
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
}

// One [table] of a file: typed getters that remember the keys they read; done() refuses the rest.
class reader {
 public:
  reader(const std::string& path, const toml::table& root, const std::string& name, bool required)
      : path_(path), name_(name) {
    const toml::node* n = root.get(name);
    if (!n && required) fail(path, nullptr, "[" + name + "]", "missing table");
    if (n && !(table_ = n->as_table())) fail(path, n, name, "expected a table, e.g. [" + name + "]");
  }
  bool present() const { return table_ != nullptr; }

  double number(const std::string& key, std::optional<double> fallback = std::nullopt) {
    const toml::node* n = get(key, fallback.has_value());
    if (!n) return *fallback;
    if (!n->is_number()) fail(path_, n, full(key), "expected a number");
    const double v = *n->value<double>();
    if (!(v > 0)) fail(path_, n, full(key), "must be > 0");
    return v;
  }
  double nonnegative(const std::string& key) {
    const toml::node* n = get(key, false);
    if (!n->is_number()) fail(path_, n, full(key), "expected a number");
    const double v = *n->value<double>();
    if (!(v >= 0)) fail(path_, n, full(key), "must be >= 0");
    return v;
  }
  int integer(const std::string& key, std::optional<int> fallback = std::nullopt) {
    const toml::node* n = get(key, fallback.has_value());
    if (!n) return *fallback;
    if (!n->is_integer() || *n->value<int64_t>() < 1) fail(path_, n, full(key), "expected an integer >= 1");
    return static_cast<int>(*n->value<int64_t>());
  }
  int whole(const std::string& key, int fallback) {  // an optional integer >= 0
    const toml::node* n = get(key, true);
    if (!n) return fallback;
    if (!n->is_integer() || *n->value<int64_t>() < 0 || *n->value<int64_t>() > 1000000)
      fail(path_, n, full(key), "expected an integer >= 0");
    return static_cast<int>(*n->value<int64_t>());
  }
  bool flag(const std::string& key, bool fallback) {
    const toml::node* n = get(key, true);
    if (!n) return fallback;
    if (!n->is_boolean()) fail(path_, n, full(key), "expected true or false");
    return *n->value<bool>();
  }
  std::string text(const std::string& key, std::optional<std::string> fallback = std::nullopt) {
    const toml::node* n = get(key, fallback.has_value());
    if (!n) return *fallback;
    if (!n->is_string()) fail(path_, n, full(key), "expected a string");
    return *n->value<std::string>();
  }
  // Refuses every key not read: names it and lists the known ones.
  void done() const {
    if (!table_) return;
    for (const auto& [k, n] : *table_) {
      const std::string key(k.str());
      if (read_.count(key)) continue;
      std::string known;
      for (const auto& r : read_) known += (known.empty() ? "" : ", ") + r;
      fail(path_, &n, full(key), "unknown key (known in [" + name_ + "]: " + known + ")");
    }
  }

 private:
  std::string full(const std::string& key) const { return name_ + "." + key; }
  const toml::node* get(const std::string& key, bool optional) {
    read_.insert(key);
    const toml::node* n = table_ ? table_->get(key) : nullptr;
    if (!n && !optional) fail(path_, table_, full(key), "missing key");
    return n;
  }
  std::string path_, name_;
  const toml::table* table_ = nullptr;
  std::set<std::string> read_;
};

void only_tables(const std::string& path, const toml::table& root, const std::set<std::string>& known) {
  for (const auto& [k, n] : root) {
    if (known.count(std::string(k.str()))) continue;
    std::string list;
    for (const auto& t : known) list += (list.empty() ? "[" : ", [") + t + "]";
    fail(path, &n, std::string(k.str()), "unknown table (known: " + list + ")");
  }
}

sched::plan::link_class read_link(reader& r) {
  sched::plan::link_class l;
  l.alpha_seconds = r.number("latency_us") * 1e-6;
  l.bus_bytes_per_second = r.number("bus_bandwidth_gb_per_s") * 1e9;
  r.done();
  return l;
}

}  // namespace

double published_run::step_seconds(double sequence, double flops_per_sequence) const {
  if (tokens_per_gpu_per_s > 0) return global_batch * sequence / (tokens_per_gpu_per_s * gpus());
  return global_batch * flops_per_sequence / (tflops_per_gpu * 1e12 * gpus());
}

sched::plan::plan_config as_plan_config(const published_run& run) {
  sched::plan::plan_config c;
  c.m = {run.dp, run.pp, run.tp, 1};
  c.cp = run.cp;
  c.ep = run.ep;
  c.cp_attention = run.cp_attention;
  c.order = run.order;
  c.precision = run.precision;
  c.stack = run.stack;
  c.global_batch = run.global_batch;
  c.micro_batch = run.micro_batch;
  c.schedule = run.schedule;
  c.virtual_stages = run.virtual_stages;
  c.rc = parse_recompute_mode(run.recompute);  // load_model_file admits only the three names
  c.sequence_parallel = run.sequence_parallel;
  c.zero = run.zero;
  c.first_stage_layers = run.first_stage_layers;
  c.last_stage_layers = run.last_stage_layers;
  return c;
}

model_file load_model_file(const std::string& path) {
  const toml::table root = parse(path);
  only_tables(path, root, {"model", "train", "published"});
  model_file f;
  reader m(path, root, "model", true);
  f.model.name = m.text("name");
  f.model.layers = m.integer("layers");
  f.model.hidden = m.integer("hidden");
  f.model.heads = m.integer("heads");
  f.model.sequence = m.integer("sequence");
  f.model.vocab = m.integer("vocab");
  f.model.kv_heads = m.integer("kv_heads", f.model.heads);
  f.model.head_dim = m.number("head_dim", f.model.hidden / f.model.heads);
  f.model.ffn_hidden = m.integer("ffn_hidden", static_cast<int>(4 * f.model.hidden));
  f.model.experts = m.whole("experts", 0);
  f.model.top_k = m.integer("top_k", 1);
  f.model.moe_ffn_hidden = m.integer("moe_ffn_hidden", static_cast<int>(f.model.ffn_hidden));
  if (f.model.experts > 0 && f.model.top_k > f.model.experts)
    fail(path, nullptr, "model.top_k",
         std::to_string(f.model.top_k) + " exceeds the " + std::to_string(f.model.experts) + " experts");
  if (f.model.experts == 0 && f.model.top_k != 1)
    fail(path, nullptr, "model.top_k", "needs experts (a dense model routes nowhere)");
  const std::string activation = m.text("activation", std::string("gelu"));
  const std::optional<sched::plan::activation_kind> a = sched::plan::parse_activation(activation);
  if (!a) fail(path, nullptr, "model.activation", "\"" + activation + "\": expected gelu or swiglu");
  f.model.activation = *a;
  f.model.tied_embeddings = m.flag("tied_embeddings", true);
  f.model.fused_attention = m.flag("fused_attention", false);
  f.model.dropout = m.flag("dropout", true);
  if (f.model.heads % f.model.kv_heads != 0)
    fail(path, nullptr, "model.kv_heads",
         std::to_string(f.model.kv_heads) + " does not divide heads " + std::to_string(f.model.heads));
  m.done();
  reader t(path, root, "train", false);
  if (t.present()) f.global_batch = t.integer("global_batch");
  t.done();
  reader p(path, root, "published", false);
  if (p.present()) {
    published_run run;
    run.tp = p.integer("tp");
    run.pp = p.integer("pp");
    run.dp = p.integer("dp");
    run.global_batch = p.integer("global_batch");
    run.tflops_per_gpu = p.number("tflops_per_gpu");
    run.percent_of_peak = p.number("percent_of_peak", 0.0);
    run.tokens_per_gpu_per_s = p.number("tokens_per_gpu_per_s", 0.0);
    run.source = p.text("source");
    run.micro_batch = p.integer("micro_batch", 1);
    run.schedule = p.text("schedule", std::string("1f1b"));
    if (run.schedule != "gpipe" && run.schedule != "1f1b" && run.schedule != "interleaved" && run.schedule != "zb-h1")
      fail(path, nullptr, "published.schedule", "\"" + run.schedule + "\": expected gpipe, 1f1b, interleaved or zb-h1");
    run.virtual_stages = p.integer("virtual_stages", run.schedule == "interleaved" ? 2 : 1);
    run.recompute = p.text("recompute", std::string("full"));
    if (run.recompute != "none" && run.recompute != "selective" && run.recompute != "full")
      fail(path, nullptr, "published.recompute", "\"" + run.recompute + "\": expected none, selective or full");
    run.sequence_parallel = p.flag("sequence_parallel", false);
    run.zero = p.whole("zero", 0);
    if (run.zero > 3) fail(path, nullptr, "published.zero", "expected 0, 1, 2 or 3");
    run.first_stage_layers = p.whole("first_stage_layers", 0);
    run.last_stage_layers = p.whole("last_stage_layers", 0);
    run.cp = p.integer("cp", 1);
    run.ep = p.integer("ep", 1);
    const std::string cp_attention = p.text("cp_attention", std::string("ring"));
    const auto kind = sched::plan::parse_cp_kind(cp_attention);
    if (!kind) fail(path, nullptr, "published.cp_attention", "\"" + cp_attention + "\": expected ring, all-to-all or all-gather");
    run.cp_attention = *kind;
    const std::string order = p.text("rank_order", std::string("tp-cp-pp-dp"));
    const auto o = sched::plan::parse_rank_order(order);
    if (!o) fail(path, nullptr, "published.rank_order", "\"" + order + "\": expected tp-cp-pp-dp or tp-cp-dp-pp");
    run.order = *o;
    const std::string precision = p.text("precision", std::string("bf16"));
    if (!sched::plan::parse_precision(precision, run.precision))
      fail(path, nullptr, "published.precision", "\"" + precision + "\": expected fp32, tf32, fp16, bf16, fp8 or fp8-block");
    run.stack.gemm_efficiency = p.number("gemm_efficiency", 0.0);
    if (run.stack.gemm_efficiency > 1) fail(path, nullptr, "published.gemm_efficiency", "must be <= 1");
    run.stack.attention_efficiency = p.number("attention_efficiency", 0.0);
    if (run.stack.attention_efficiency > 1) fail(path, nullptr, "published.attention_efficiency", "must be <= 1");
    run.stack.overlap_dp = p.flag("overlap_dp", false);
    run.stack.overlap_tp = p.flag("overlap_tp", false);
    run.stack.overlap_ep = p.flag("overlap_ep", false);
    f.published = run;
  }
  p.done();
  return f;
}

sched::plan::device_desc load_device_file(const std::string& path) {
  const toml::table root = parse(path);
  only_tables(path, root, {"device", "peak_tflops"});
  sched::plan::device_desc d;
  reader r(path, root, "device", true);
  d.name = r.text("name");
  d.memory_bytes = r.number("memory_gib") * sched::plan::gib;
  d.memory_bandwidth = r.number("memory_bandwidth_gb_per_s") * 1e9;
  d.gemm_efficiency = r.number("gemm_efficiency");
  if (d.gemm_efficiency > 1) fail(path, nullptr, "device.gemm_efficiency", "must be <= 1");
  d.sms = r.integer("sms");
  d.tile_m = r.integer("tile_m", 128);
  d.tile_n = r.integer("tile_n", 128);
  r.done();
  reader p(path, root, "peak_tflops", true);
  for (size_t i = 0; i < std::size(sched::plan::peak_names); ++i)
    d.peak_flops[i] = p.number(sched::plan::peak_names[i], 0.0) * 1e12;
  p.done();
  return d;
}

sched::plan::cluster_desc load_cluster_file(const std::string& path) {
  const toml::table root = parse(path);
  only_tables(path, root, {"cluster", "intra_node", "inter_node"});
  sched::plan::cluster_desc c;
  reader r(path, root, "cluster", true);
  c.name = r.text("name");
  c.nodes = r.integer("nodes");
  c.gpus_per_node = r.integer("gpus_per_node");
  const std::string device = r.text("device");
  c.nodes_per_leaf = r.whole("nodes_per_leaf", 0);
  c.oversubscription = r.number("oversubscription", 1.0);
  if (c.oversubscription < 1) fail(path, nullptr, "cluster.oversubscription", "expected a number >= 1 (1: non-blocking)");
  r.done();
  reader intra(path, root, "intra_node", true);
  c.intra_node = read_link(intra);
  reader inter(path, root, "inter_node", true);
  c.gpus_per_nic = inter.integer("gpus_per_nic", 1);
  c.inter_node = read_link(inter);
  if (c.gpus_per_node % c.gpus_per_nic != 0)
    fail(path, nullptr, "inter_node.gpus_per_nic",
         std::to_string(c.gpus_per_nic) + " does not divide gpus_per_node " + std::to_string(c.gpus_per_node));
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  c.device = load_device_file((dir / device).string());
  return c;
}

namespace {

// The machine file's keys, in the order it is written, with the unit each is stored in.
struct machine_key {
  const char* key;
  double machine_costs::*field;
  bool positive;  // else >= 0 (an MLP has no attention; a run may show no overhead)
};
constexpr machine_key machine_keys[] = {
    {"gemm_flops_per_s", &machine_costs::gemm_flops_per_s, true},
    {"gemm_bytes_per_s", &machine_costs::gemm_bytes_per_s, false},
    {"attention_forward_s_per_unit", &machine_costs::attention_forward_s, false},
    {"attention_backward_s_per_unit", &machine_costs::attention_backward_s, false},
    {"blockwise_attention_forward_s_per_unit", &machine_costs::blockwise_attention_forward_s, false},
    {"blockwise_attention_backward_s_per_unit", &machine_costs::blockwise_attention_backward_s, false},
    {"elementwise_bytes_per_s", &machine_costs::elementwise_bytes_per_s, true},
    {"optimizer_s_per_param", &machine_costs::optimizer_s_per_param, true},
    {"all_reduce_latency_s", &machine_costs::all_reduce_latency_s, false},
    {"all_reduce_bytes_per_s", &machine_costs::all_reduce_bytes_per_s, true},
    {"concurrent_slowdown", &machine_costs::concurrent_slowdown, true},
    {"op_scale", &machine_costs::op_scale, true},
    {"action_overhead_s", &machine_costs::action_overhead_s, false},
};

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

}  // namespace

machine_costs load_machine_file(const std::string& path) {
  const toml::table root = parse(path);
  only_tables(path, root, {"machine"});
  reader r(path, root, "machine", true);
  machine_costs m;
  m.name = r.text("name");
  m.calibrated_with = r.text("calibrated_with");
  for (const machine_key& k : machine_keys) m.*k.field = k.positive ? r.number(k.key) : r.nonnegative(k.key);
  m.cores = r.integer("cores");
  r.done();
  return m;
}

void write_machine_file(const std::string& path, const machine_costs& m) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);  // runs/cpu.toml on a fresh checkout
  std::ostringstream out;
  {
    out << "# This machine's costs for troupe's kernels on one thread, measured by `troupe plan --calibrate`;\n"
           "# `troupe train --forecast " << path << "` predicts a job's step time and memory from them.\n"
           "[machine]\nname = " << quoted(m.name) << "\ncalibrated_with = " << quoted(m.calibrated_with) << "\n";
    char buf[64];
    for (const machine_key& k : machine_keys) {
      std::snprintf(buf, sizeof buf, "%.9g", m.*k.field);
      out << k.key << " = " << (std::string(buf).find_first_of(".e") == std::string::npos ? std::string(buf) + ".0" : buf)
          << "\n";
    }
    out << "cores = " << m.cores << "\n";
  }
  storage::write_output_file(path, out.str());  // a reader never sees half a file
}

}  // namespace troupe::cli
