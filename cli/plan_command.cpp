// `troupe plan` (see plan_command.hpp): loads the descriptions (plan_files.hpp), builds the plan
// from the flags, prices it with schedules/plan/ and prints a report, a table of searched plans
// or JSON. Bad input exits 2 with one line naming what is wrong.
#include "cli/plan_command.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "actors/run/machine_calibration.hpp"
#include "cli/config_file.hpp"
#include "cli/plan_files.hpp"
#include "schedules/render.hpp"
#include "storage/output_file.hpp"

namespace troupe::cli {

namespace {

namespace plan = sched::plan;

struct plan_flags {
  std::string model, cluster, schedule = "1f1b", recompute = "full", optimizer = "adam", offload = "none";
  std::string precision, svg, calibrate, job, accounting = "zero-paper";  // precision "": bf16, or the published run's
  std::string cp_attention = "ring", order = "tp-cp-pp-dp";
  int dp = 0, pp = 1, tp = 1, micro_batch = 1, micro_batches = 0, global_batch = 0, virtual_stages = 2, zero = 0;
  int cp = 1, ep = 1;
  double gemm_efficiency = 0, attention_efficiency = 0;  // 0: the device's (or the published stack's)
  bool overlap_dp = false, overlap_tp = false, overlap_ep = false;
  int first_stage_layers = 0, last_stage_layers = 0;
  int nodes = 0, top = 10;
  bool search = false, json = false, sequence_parallel = false;
  double lateness = -1;  // --lateness: price ready dispatch against fixed under that much noise (-1: not)
  int ready_stash = 1;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return out;
}

std::string describe(const plan::plan_config& c) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s b%d M%d %s%s zero%d recompute=%s%s", sched::to_string(c.m).c_str(), c.micro_batch,
                c.microbatches(), c.schedule.c_str(),
                c.schedule == "interleaved" ? (" v" + std::to_string(c.virtual_stages)).c_str() : "", c.zero,
                plan::to_string(c.rc), c.sequence_parallel ? " sp" : "");
  std::string out = buf;
  if (c.cp > 1)
    out += " cp" + std::to_string(c.cp) +
           (c.cp_attention == plan::cp_kind::ring ? "" : c.cp_attention == plan::cp_kind::all_to_all ? " a2a" : " ag");
  if (c.ep > 1) out += " ep" + std::to_string(c.ep);
  if (c.order != plan::rank_order{}) out += std::string(" ") + plan::to_string(c.order);
  if (c.precision.fp8 != plan::fp8_scaling::none) out += std::string(" ") + plan::to_string(c.precision);
  if (c.first_stage_layers > 0 || c.last_stage_layers > 0)  // uneven stages (0: that end takes the even share)
    out += " first/last stage layers " + std::to_string(c.first_stage_layers) + "/" + std::to_string(c.last_stage_layers);
  return out;
}

std::string to_json(const plan::plan_result& r) {
  const plan::plan_config& c = r.config;
  std::string out = "{\"dp\":" + std::to_string(c.m.dp) + ",\"pp\":" + std::to_string(c.m.pp) +
                    ",\"tp\":" + std::to_string(c.m.tp) + ",\"micro_batch\":" + std::to_string(c.micro_batch) +
                    ",\"micro_batches\":" + std::to_string(c.microbatches()) + ",\"schedule\":\"" +
                    json_escape(c.schedule) + "\",\"virtual_stages\":" + std::to_string(c.virtual_stages) +
                    ",\"zero\":" + std::to_string(c.zero) + ",\"recompute\":\"" + plan::to_string(c.rc) + "\"" +
                    ",\"first_stage_layers\":" + std::to_string(c.first_stage_layers) +
                    ",\"last_stage_layers\":" + std::to_string(c.last_stage_layers) +
                    ",\"cp\":" + std::to_string(c.cp) + ",\"cp_attention\":\"" + plan::to_string(c.cp_attention) +
                    "\",\"ep\":" + std::to_string(c.ep) + ",\"rank_order\":\"" + plan::to_string(c.order) +
                    "\",\"precision\":\"" + plan::to_string(c.precision) + "\"";
  out += ",\"memory_bytes\":{";
  for (plan::memory_kind k : plan::all_memory_kinds)
    out += std::string("\"") + plan::to_string(k) + "\":" + std::to_string(r.memory.of(k)) + ",";
  out += "\"total\":" + std::to_string(r.memory.total()) + "},\"memory_stage\":" + std::to_string(r.memory_stage);
  out += ",\"memory_stage_parameters\":" + std::to_string(r.memory_stage_parameters) + ",\"accounting\":\"" +
         plan::to_string(c.acct) + "\"";
  out += std::string(",\"fits\":") + (r.fits ? "true" : "false");
  char buf[256];
  std::snprintf(buf, sizeof buf,
                ",\"step_seconds\":%.6g,\"pipeline_seconds\":%.6g,\"dp_seconds\":%.6g,\"optimizer_seconds\":%.6g,"
                "\"bubble_fraction\":%.6g,\"tflops_per_gpu\":%.6g,\"mfu\":%.6g}",
                r.step_seconds, r.pipeline_seconds, r.dp_seconds, r.optimizer_seconds, r.bubble_fraction,
                r.tflops_per_gpu, r.mfu);
  return out + buf;
}

void print_report(const plan::model_desc& md, const plan::cluster_desc& cl, const plan::plan_result& r) {
  const std::string shape = md.describe_shape();
  std::printf("%s (%.1fB parameters%s%s) on %s: %d x %s\n", md.name.c_str(), md.parameters() / 1e9,
              shape.empty() ? "" : "; ", shape.c_str(), cl.name.c_str(), cl.gpus(), cl.device.name.c_str());
  std::printf("plan: %s, global batch %d\n", describe(r.config).c_str(), r.config.global_batch);
  std::printf("memory per device (stage %d, the most loaded; %s accounting), GiB:\n", r.memory_stage,
              plan::to_string(r.config.acct));
  for (plan::memory_kind k : plan::all_memory_kinds)
    std::printf("  %-16s %8.2f\n", plan::to_string(k), r.memory.of(k) / plan::gib);
  std::printf("  %-16s %8.2f of %.2f: %s\n", "total", r.memory.total() / plan::gib, cl.device.memory_bytes / plan::gib,
              r.fits ? "fits" : "DOES NOT FIT");
  std::printf("step time %.3f s (pipeline %.3f, dp reduction %.3f, optimizer %.3f), bubble %.1f%%\n", r.step_seconds,
              r.pipeline_seconds, r.dp_seconds, r.optimizer_seconds, r.bubble_fraction * 100);
  std::printf("%.1f TFLOP/s per GPU (hardware FLOPs, recomputation counted), MFU %.1f%%\n", r.tflops_per_gpu,
              r.mfu * 100);
  std::printf("%.0f tokens/s per GPU; the step on stage %d (the busiest), s:", r.config.global_batch * md.sequence /
              (r.step_seconds * r.config.gpus()), r.breakdown.stage);
  for (const plan::named_seconds& p : plan::parts(r.breakdown))
    if (p.seconds > 0) std::printf(" %s %.3f", p.name, p.seconds);
  std::printf("\n");
}

void print_table(const std::vector<plan::plan_result>& found) {
  std::printf("%-4s %-60s %9s %9s %7s %6s %8s\n", "rank", "plan", "step_s", "TFLOP/s", "MFU", "bubble", "mem_GiB");
  int i = 0;
  for (const auto& r : found)
    std::printf("%-4d %-60s %9.3f %9.1f %6.1f%% %5.1f%% %8.1f\n", ++i, describe(r.config).c_str(), r.step_seconds,
                r.tflops_per_gpu, r.mfu * 100, r.bubble_fraction * 100, r.memory.total() / plan::gib);
}

// The search's choice beside the configuration the model file's paper ran (its t and p, the rest
// of the cluster as dp), priced as the paper ran it ([published]'s micro-batch, schedule,
// recomputation, sequence parallelism and ZeRO stage) and as the search priced its plans.
void explain_against_published(const model_file& mf, const plan::cluster_desc& cl, int batch,
                               const plan::plan_result& chosen) {
  const published_run& pub = *mf.published;
  plan::plan_config c = as_plan_config(pub);
  c.m.dp = cl.gpus() / (pub.tp * pub.pp * pub.cp);  // on the cluster asked about
  c.global_batch = batch;
  c.acct = chosen.config.acct;  // priced as the search priced its plans
  c.precision = chosen.config.precision;
  c.stack = chosen.config.stack;
  if (!plan::has_stage(c.acct, c.zero)) {
    std::printf("\nthe published configuration (ZeRO %d) has no price under %s accounting: no comparison\n", c.zero,
                plan::to_string(c.acct));
    return;
  }
  if (cl.gpus() % (pub.tp * pub.pp * pub.cp) != 0 || !plan::check(mf.model, cl, c).empty()) {
    std::printf("\nthe published configuration (t %d, p %d, %s) does not fit %d GPUs: no comparison\n", pub.tp, pub.pp,
                pub.source.c_str(), cl.gpus());
    return;
  }
  const plan::plan_result ref = plan::evaluate(mf.model, cl, c);
  std::printf("\nagainst the published configuration (%s: t %d, p %d, %.0f TFLOP/s per GPU measured)\n",
              pub.source.c_str(), pub.tp, pub.pp, pub.tflops_per_gpu);
  std::printf("     %-60s %9.3f %9.1f %6.1f%% %5.1f%% %8.1f %s\n", describe(ref.config).c_str(), ref.step_seconds,
              ref.tflops_per_gpu, ref.mfu * 100, ref.bubble_fraction * 100, ref.memory.total() / plan::gib,
              ref.fits ? "" : "(does not fit)");
  std::printf("why plan 1:\n");
  for (const std::string& line : plan::explain(chosen, ref)) std::printf("  %s\n", line.c_str());
  if (!(c.precision == pub.precision) || !(c.stack == pub.stack))
    std::printf("note: priced at %s on the stack the flags give, not as the published run ran (%s)\n",
                plan::to_string(c.precision), plan::to_string(pub.precision));
  // A run measured faster than the search's best prediction says the model underrates it, and
  // the reader should know before trusting the ranking. Per GPU, in tokens, so FLOP counting
  // conventions do not enter.
  const double s = mf.model.sequence;
  const double measured =
      pub.global_batch * s / (pub.step_seconds(s, mf.model.hardware_flops_per_sequence(c.rc)) * pub.gpus());
  const double predicted = chosen.config.global_batch * s / (chosen.step_seconds * chosen.config.gpus());
  if (measured > predicted)
    std::printf("note: the published run measured %.0f tokens/s per GPU, more than plan 1's predicted %.0f: the model "
                "underrates that run, so plan 1 is not shown to beat it\n",
                measured, predicted);
}

plan::accounting accounting_of(const plan_flags& f) {
  try {
    return plan::parse_accounting(f.accounting);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--") + e.what());
  }
}

// The precision and software stack plans are priced on: the flags', else (for a search against
// a published run) the published run's, else bf16 on the device's own GEMM efficiency.
void precision_and_stack(const plan_flags& f, const published_run* pub, plan::gemm_precision& p, plan::stack_desc& st) {
  if (pub) {
    p = pub->precision;
    st = pub->stack;
  }
  if (!f.precision.empty() && !plan::parse_precision(f.precision, p))
    throw std::invalid_argument("--precision \"" + f.precision + "\": expected fp32, tf32, fp16, bf16, fp8 or fp8-block");
  if (f.gemm_efficiency > 0) st.gemm_efficiency = f.gemm_efficiency;
  if (f.gemm_efficiency > 1) throw std::invalid_argument("--gemm-efficiency must be <= 1");
  if (f.attention_efficiency > 0) st.attention_efficiency = f.attention_efficiency;
  if (f.attention_efficiency > 1) throw std::invalid_argument("--attention-efficiency must be <= 1");
  st.overlap_dp = st.overlap_dp || f.overlap_dp;
  st.overlap_tp = st.overlap_tp || f.overlap_tp;
  st.overlap_ep = st.overlap_ep || f.overlap_ep;
}

plan::plan_config build_config(const plan_flags& f, const model_file& mf, const plan::cluster_desc& cl) {
  plan::plan_config c;
  c.m = {f.dp, f.pp, f.tp, 1};
  c.cp = f.cp;
  c.ep = f.ep;
  if (f.dp == 0) {
    if (cl.gpus() % (f.pp * f.tp * f.cp) != 0)
      throw std::invalid_argument("--pp " + std::to_string(f.pp) + " x --tp " + std::to_string(f.tp) + " x --cp " +
                                  std::to_string(f.cp) + " does not divide the " + std::to_string(cl.gpus()) +
                                  " GPUs of " + cl.name);
    c.m.dp = cl.gpus() / (f.pp * f.tp * f.cp);
  }
  const auto kind = plan::parse_cp_kind(f.cp_attention);
  if (!kind) throw std::invalid_argument("--cp-attention \"" + f.cp_attention + "\": expected ring, all-to-all or all-gather");
  c.cp_attention = *kind;
  const auto order = plan::parse_rank_order(f.order);
  if (!order) throw std::invalid_argument("--rank-order \"" + f.order + "\": expected tp-cp-pp-dp or tp-cp-dp-pp");
  c.order = *order;
  c.micro_batch = f.micro_batch;
  c.global_batch = f.global_batch ? f.global_batch : f.micro_batches ? f.micro_batches * c.m.dp * f.micro_batch : mf.global_batch;
  if (c.global_batch < 1)
    throw std::invalid_argument(f.model + " gives no [train] global_batch: pass --global-batch or --micro-batches");
  c.schedule = f.schedule;
  c.virtual_stages = f.schedule == "interleaved" ? f.virtual_stages : 1;
  c.first_stage_layers = f.first_stage_layers;
  c.last_stage_layers = f.last_stage_layers;
  c.zero = f.zero;
  c.sequence_parallel = f.sequence_parallel;
  try {
    c.rc = parse_recompute_mode(f.recompute);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("--recompute \"" + f.recompute + "\": expected none, selective or full");
  }
  precision_and_stack(f, nullptr, c.precision, c.stack);
  if (f.optimizer == "adam" || f.optimizer == "adamw") c.opt = plan::optimizer::adam;
  else if (f.optimizer == "sgd") c.opt = plan::optimizer::sgd;
  else throw std::invalid_argument("--optimizer \"" + f.optimizer + "\": expected adam, adamw or sgd");
  if (f.offload == "optimizer") c.where.optimizer = true;
  else if (f.offload == "all") c.where = {true, true};
  else if (f.offload != "none") throw std::invalid_argument("--offload \"" + f.offload + "\": expected none, optimizer or all");
  c.acct = accounting_of(f);
  plan::accounted_bytes(c.acct, c.opt, c.zero);  // throws naming the framework when it has no such stage
  return c;
}

// The plan's simulated pipeline timeline (for --search, plan 1's); nothing without --svg.
int write_svg(const std::string& path, const plan::plan_result& r) {
  if (path.empty()) return 0;
  try {
    storage::write_output_file(path, sched::render_svg(r.sim.events));
  } catch (const std::runtime_error& e) {
    spdlog::error("troupe plan: {}", e.what());
    return 1;
  }
  return 0;
}

// `--calibrate FILE`: measures this machine on the job's model and writes the description that
// `troupe train --forecast FILE` reads.
int calibrate(const plan_flags& f) {
  train_config cfg;
  try {
    if (!f.job.empty()) cfg = load_config_file(f.job, cfg);
    validate(cfg);
  } catch (const std::invalid_argument& e) {
    spdlog::error("troupe plan --calibrate: {}", e.what());
    return 2;
  }
  try {
    spdlog::info("calibrating this machine on {} ({}): a few seconds", f.job.empty() ? "the default job" : f.job,
                 to_string(cfg.model.kind));
    const machine_costs m = calibrate_machine(cfg, [](const std::string& what) { spdlog::info("measuring {}", what); });
    write_machine_file(f.calibrate, m);
    spdlog::info("{}: GEMM {:.1f} GFLOP/s, elementwise {:.1f} GB/s, attention {:.2f} ns per unit forward, "
                 "all-reduce {:.1f} GB/s + {:.1f} us, optimizer {:.2f} ns per parameter, {} ranks at once {:.2f}x slower each, "
                 "ops x {:.3f} + {:.3f} ms per action",
                 f.calibrate, m.gemm_flops_per_s / 1e9, m.elementwise_bytes_per_s / 1e9, m.attention_forward_s * 1e9,
                 m.all_reduce_bytes_per_s / 1e9, m.all_reduce_latency_s * 1e6, m.optimizer_s_per_param * 1e9, m.cores,
                 m.concurrent_slowdown, m.op_scale,
                 m.action_overhead_s * 1e3);
    spdlog::info("use it: troupe train {}--forecast {} [--dp N --pp N --tp N ...] [--forecast-only]",
                 f.job.empty() ? "" : "--config " + f.job + " ", f.calibrate);
  } catch (const std::exception& e) {
    spdlog::error("troupe plan --calibrate: {}", e.what());
    return 1;
  }
  return 0;
}

int run(const plan_flags& f) {
  if (!f.calibrate.empty()) return calibrate(f);
  if (f.model.empty() || f.cluster.empty()) {
    spdlog::error("troupe plan: give MODEL and CLUSTER description files (examples/plan/), or --calibrate FILE");
    return 2;
  }
  model_file mf;
  plan::cluster_desc cl;
  plan::plan_config c;
  try {
    mf = load_model_file(f.model);
    cl = load_cluster_file(f.cluster);
    if (f.nodes) cl.nodes = f.nodes;
    c.acct = accounting_of(f);
    if (!f.search) {
      c = build_config(f, mf, cl);
      if (const std::string err = plan::check(mf.model, cl, c); !err.empty()) throw std::invalid_argument(err);
    }
  } catch (const std::invalid_argument& e) {
    spdlog::error("troupe plan: {}", e.what());
    return 2;
  }
  try {
    if (f.search) {
      const int batch = f.global_batch ? f.global_batch : mf.global_batch;
      if (batch < 1) throw std::invalid_argument(f.model + " gives no [train] global_batch: pass --global-batch");
      plan::search_space space;
      space.acct = c.acct;
      precision_and_stack(f, mf.published ? &*mf.published : nullptr, space.precision, space.stack);
      const auto found = plan::search(mf.model, cl, batch, space, f.top);
      if (f.json) {
        std::printf("[");
        for (size_t i = 0; i < found.size(); ++i) std::printf("%s%s", i ? "," : "", to_json(found[i]).c_str());
        std::printf("]\n");
      } else {
        std::printf("%s on %d x %s, global batch %d: the %zu fastest plans that fit\n", mf.model.name.c_str(),
                    cl.gpus(), cl.device.name.c_str(), batch, found.size());
        print_table(found);
      }
      if (found.empty()) {
        spdlog::error("troupe plan: no plan of the search space fits {} on {}", mf.model.name, cl.name);
        return 1;
      }
      if (!f.json && mf.published) explain_against_published(mf, cl, batch, found.front());
      return write_svg(f.svg, found.front());
    }
    const plan::plan_result r = plan::evaluate(mf.model, cl, c);
    if (f.json) std::printf("%s\n", to_json(r).c_str());
    else print_report(mf.model, cl, r);
    if (f.lateness >= 0) {
      const plan::dispatch_price d = plan::price_dispatch(mf.model, cl, c, f.lateness, f.ready_stash);
      const std::string line = fmt::format(
          "under per-action lateness up to {:.0f}% of an action's cost ({} steps simulated): the pipeline takes {:.4g} s "
          "with fixed dispatch, {:.4g} s with --dispatch ready --ready-stash {} (ready {:.3f}x as fast; {} actions out "
          "of row order)",
          100 * d.lateness, d.steps, d.fixed_seconds, d.ready_seconds, d.headroom, d.fixed_seconds / d.ready_seconds,
          d.out_of_order);
      if (f.json) spdlog::info("{}", line);  // stdout stays one JSON document
      else std::printf("\n%s\n", line.c_str());
    }
    if (int rc = write_svg(f.svg, r)) return rc;
  } catch (const std::invalid_argument& e) {
    spdlog::error("troupe plan: {}", e.what());
    return 2;
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<plan_flags>();
  auto* cmd = app.add_subcommand("plan", "Predict memory and step time of a training plan on a cluster, or search plans");
  cmd->add_option("MODEL", f->model, "Model description (examples/plan/gpt3-175b.toml)");
  cmd->add_option("CLUSTER", f->cluster, "Cluster description (examples/plan/dgx-a100-1024.toml)");
  cmd->add_option("--calibrate", f->calibrate,
                  "Measure this machine for troupe's own jobs and write its description to this file (for troupe train --forecast)");
  cmd->add_option("--job", f->job, "With --calibrate: the job config whose model to measure [the default MLP]")
      ->check(CLI::ExistingFile);
  cmd->add_option("--dp", f->dp, "Data-parallel replicas [the GPUs left by pp x tp x cp]");
  cmd->add_option("--pp", f->pp, "Pipeline stages [1]")->check(CLI::PositiveNumber);
  cmd->add_option("--tp", f->tp, "Tensor-parallel ranks [1]")->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batch-size", f->micro_batch, "Sequences per micro-batch [1]")->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batches", f->micro_batches, "Micro-batches per step; sets the global batch");
  cmd->add_option("--global-batch", f->global_batch, "Sequences per step [the model file's]");
  cmd->add_option("--schedule", f->schedule, "gpipe, 1f1b, interleaved, zb-h1 [1f1b]");
  cmd->add_option("--virtual-stages", f->virtual_stages, "Chunks per stage for interleaved [2]");
  cmd->add_option("--first-stage-layers", f->first_stage_layers,
                  "Layers of the first pipeline stage, the others splitting the rest evenly [0: the even share]");
  cmd->add_option("--last-stage-layers", f->last_stage_layers,
                  "Layers of the last pipeline stage, the others splitting the rest evenly [0: the even share]");
  cmd->add_option("--cp", f->cp, "Context-parallel ranks: each sequence split over them [1]")->check(CLI::PositiveNumber);
  cmd->add_option("--cp-attention", f->cp_attention, "Context parallelism's attention: ring, all-to-all, all-gather [ring]");
  cmd->add_option("--ep", f->ep, "Expert-parallel ranks a mixture of experts spreads its experts over [1]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--rank-order", f->order,
                  "Rank layout: tp-cp-pp-dp (troupe's mesh), tp-cp-dp-pp (Megatron-LM's) [tp-cp-pp-dp]");
  cmd->add_option("--gemm-efficiency", f->gemm_efficiency,
                  "The software stack's share of peak for a large GEMM [the device file's; a search against a "
                  "published run: the run's]");
  cmd->add_option("--attention-efficiency", f->attention_efficiency,
                  "The stack's fused attention's share of the 16-bit peak (FlashAttention-2 on H100: 0.35) "
                  "[the GEMM efficiency]");
  cmd->add_flag("--overlap-dp", f->overlap_dp, "The stack hides gradient reduction under backward (--overlap-grad-reduce)");
  cmd->add_flag("--overlap-tp", f->overlap_tp, "The stack hides tp collectives under GEMMs (--tp-comm-overlap)");
  cmd->add_flag("--overlap-ep", f->overlap_ep,
                "The stack runs expert all-to-alls under another micro-batch's compute (--overlap-moe-expert-parallel-comm)");
  cmd->add_option("--zero", f->zero, "ZeRO stage 0-3 [0]")->check(CLI::Range(0, 3));
  cmd->add_option("--recompute", f->recompute, "none, selective, full [full]");
  cmd->add_flag("--sequence-parallel", f->sequence_parallel, "Split norms and dropouts over tp (Korthikanti 2022)");
  cmd->add_option("--optimizer", f->optimizer, "adam, adamw, sgd [adam]");
  cmd->add_option("--offload", f->offload, "none, optimizer, all [none]");
  cmd->add_option("--accounting", f->accounting,
                  "Whose byte counts the model states follow: zero-paper (16-bit parameters and gradients, K = 12), "
                  "deepspeed (its estimator; ZeRO 1-3), megatron (bf16 with fp32 gradients; ZeRO 0-1), fsdp (FSDP2 full "
                  "sharding; ZeRO 3) [zero-paper]");
  cmd->add_option("--precision", f->precision,
                  "GEMM precision: bf16, fp16, tf32, fp32, fp8 (per tensor), fp8-block [bf16; a search against a "
                  "published run: the run's]");
  cmd->add_option("--nodes", f->nodes, "Resize the cluster to this many nodes")->check(CLI::PositiveNumber);
  cmd->add_flag("--search", f->search, "Search meshes (with cp and ep), micro-batches, schedules, ZeRO and recomputation");
  cmd->add_option("--top", f->top, "Plans --search prints [10]")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", f->json, "Print JSON instead of text");
  cmd->add_option("--lateness", f->lateness,
                  "Also price --dispatch ready against fixed when each action runs late by up to this fraction of "
                  "its cost (0.2: 20%)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--ready-stash", f->ready_stash, "With --lateness: ready dispatch's stash headroom [1]")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--svg", f->svg, "Write the simulated pipeline timeline as SVG to this file (with --search: plan 1's)");
  cmd->callback([f, &exit_code] { exit_code = run(*f); });
}

}  // namespace troupe::cli
