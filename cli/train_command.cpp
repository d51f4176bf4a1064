// `troupe train`. Precedence: built-in defaults, then --config FILE, then flags.
#include "schedules/named.hpp"
#include "cli/train_command.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <set>

#include "actors/plan/job_forecast.hpp"
#include "actors/run/machine_calibration.hpp"
#include "actors/run/membership_plan.hpp"
#include "actors/plan/prepared_job.hpp"
#include "actors/run/training_job.hpp"
#include "cli/plan_files.hpp"
#include "cli/config_file.hpp"
#include "cli/tunables.hpp"
#include "cli/worker_command.hpp"
#include "storage/folder_lock.hpp"
#include "storage/output_file.hpp"

namespace troupe::cli {

namespace {

// Every tunable's flag is bound as text and checked by the table (tunables.hpp), so CLI11 never
// converts a number itself: a flag and a config key get the same check and the same message.
struct train_flags {
  std::string config;
  bool no_progress = false;
  bool sequence_parallel = false;
  bool elastic = false;
  std::map<std::string, std::string> text;                // flag -> its text
  std::map<std::string, std::vector<std::string>> texts;  // repeatable flag -> its texts
  process_flags process;  // launcher flags (worker_command.hpp)
  bool worker = false;
  std::string forecast;   // a machine file (troupe plan --calibrate)
  bool forecast_only = false;
};

// --forecast: the job's predicted step time and peak memory per rank, from the machine file,
// logged before it runs; after it, beside what it measured.
struct forecast_check {
  job_forecast predicted;
  bool on = false;

  // Throws std::invalid_argument for a bad file or a job the forecast does not model.
  void make(const train_config& cfg, const std::string& machine_file) {
    const machine_costs m = load_machine_file(machine_file);
    const prepared_job data = prepare_job(cfg);
    predicted = forecast_job(cfg, plan_job(cfg, data), data.model, m);
    on = true;
    spdlog::info("forecast ({}, calibrated with {}): {}", m.name, m.calibrated_with, describe(predicted));
  }
  void compare(const train_summary& s) const {
    if (!on) return;
    const double measured = measured_step_seconds(s);
    spdlog::info("forecast against the run: step {:.4f} s predicted, {:.4f} s measured (median; {:+.1f}%)",
                 predicted.step_seconds, measured, measured > 0 ? 100 * (predicted.step_seconds / measured - 1) : 0.0);
    for (const rank_forecast& r : predicted.ranks) {
      if (static_cast<size_t>(r.rank) >= s.peak_memory_total.size()) break;
      const double got = double(s.peak_memory_total[static_cast<size_t>(r.rank)]);
      spdlog::info("forecast against the run: rank {} peak device memory {:.2f} MiB predicted{}, {:.2f} MiB measured ({:+.1f}%)",
                   r.rank, double(r.peak_total) / (1 << 20),
                   r.peak_total_low != r.peak_total ? fmt::format(" (or {:.2f} without the bucket copies)", double(r.peak_total_low) / (1 << 20)) : std::string(),
                   got / (1 << 20), got > 0 ? 100 * (double(r.peak_total) / got - 1) : 0.0);
    }
  }
};

// A schedule file and a schedule name answer one question: a flag beats the config file (the
// usual precedence), both in one place are refused. The file then sets P, M and v; a value
// given for them must be the file's, since a silent override would run another schedule than
// the one asked for.
void adopt_schedule_file(train_config& c, const train_flags& f, const std::set<std::string>& flagged,
                         const std::set<std::string>& in_file) {
  const bool file_flag = flagged.count("--schedule-file") > 0, file_key = in_file.count("pipeline.schedule_file") > 0;
  if (!file_flag && !file_key) return;
  const bool name_flag = flagged.count("--schedule") > 0, name_key = in_file.count("pipeline.schedule") > 0;
  if (file_flag && name_flag)
    throw std::invalid_argument("--schedule and --schedule-file both choose the schedule: give one of them");
  if (name_flag) {
    c.user_schedule = sched::schedule{};
    return;
  }
  if (!file_flag && name_key)
    throw std::invalid_argument(f.config + ": pipeline.schedule and pipeline.schedule_file both choose the "
                                "schedule: keep one of them");
  const std::string source = file_flag ? f.text.at("--schedule-file") : "pipeline.schedule_file of " + f.config;
  const sched::schedule& s = c.user_schedule;
  struct count {
    const char* flag;
    const char* key;
    int* field;
    int in_schedule;
    const char* what;
  };
  const count counts[] = {{"--pp", "pipeline.stages", &c.mesh.pp, s.num_stages, "stages"},
                          {"--micro-batches", "pipeline.micro_batches", &c.micro_batches, s.num_microbatches,
                           "microbatches"},
                          {"--virtual-stages", "pipeline.virtual_stages", &c.virtual_stages, s.virtual_stages,
                           "chunks per stage"}};
  for (const count& n : counts) {
    const bool by_flag = flagged.count(n.flag) > 0;
    if ((by_flag || in_file.count(n.key)) && *n.field != n.in_schedule)
      throw std::invalid_argument((by_flag ? std::string(n.flag) + " " : f.config + ": " + n.key + " = ") +
                                  std::to_string(*n.field) + " contradicts the schedule in " + source + ", which has " +
                                  std::to_string(n.in_schedule) + " " + n.what + " (leave it out to take the file's)");
    *n.field = n.in_schedule;
  }
  for (int d = 0; d < s.num_stages; ++d) {
    bool steps = false;
    for (const auto& a : s.stages[static_cast<size_t>(d)]) steps = steps || a.kind == sched::op::optimizer_step;
    if (!steps)
      throw std::invalid_argument("the schedule in " + source + " has no optimizer step (O) on stage " +
                                  std::to_string(d) + ": its parameters would never be trained");
  }
}

// The pipeline's own settings mean nothing without a pipeline: refused rather than ignored.
void check_pipeline_only(const train_config& c, const std::set<std::string>& flagged,
                         const std::set<std::string>& in_file, const std::string& file) {
  static const char* const only[][2] = {{"--schedule", "pipeline.schedule"},
                                        {"--micro-batches", "pipeline.micro_batches"},
                                        {"--virtual-stages", "pipeline.virtual_stages"},
                                        {"--cuts", "pipeline.cuts"}};
  for (const auto& [flag, key] : only) {
    if (c.mesh.pp <= 1 && flagged.count(flag))
      throw std::invalid_argument(std::string(flag) + " needs a pipeline: add --pp N with N > 1");
    if (c.mesh.pp <= 1 && in_file.count(key))
      throw std::invalid_argument(file + ": " + key + " needs a pipeline: set pipeline.stages > 1 (or --pp)");
  }
  if (c.user_schedule.stages.empty() && c.schedule != "interleaved" && (flagged.count("--virtual-stages") || in_file.count("pipeline.virtual_stages")))
    throw std::invalid_argument("--virtual-stages (pipeline.virtual_stages) is for --schedule interleaved only, "
                                "not " + c.schedule);
}

// Refuses a pipeline the model or batch cannot carry before any data is loaded.
void check_pipeline_flags(const train_config& c) {
  const bool from_file = !c.user_schedule.stages.empty();
  const sched::schedule s = from_file ? c.user_schedule
                                      : sched::make_named_schedule(c.schedule, c.mesh.pp, c.micro_batches,
                                                                   c.virtual_stages);
  const int chunks = c.mesh.pp * s.virtual_stages;
  const int64_t layers = c.model.kind == model_kind::mlp ? 2 * static_cast<int64_t>(c.model.hidden.size()) + 1
                                               : c.model.blocks + 3;
  if (c.cuts.empty() && layers < chunks)
    throw std::invalid_argument("--pp " + std::to_string(c.mesh.pp) + (s.virtual_stages > 1 ? " x --virtual-stages " +
                                std::to_string(s.virtual_stages) : std::string()) + " needs " +
                                std::to_string(chunks) + " model chunks, but the " + to_string(c.model.kind) + " has only " +
                                std::to_string(layers) + " layers (" +
                                (c.model.kind == model_kind::mlp ? "add hidden layers, e.g. --hidden 256,256,256"
                                                       : "add --blocks") + ")");
  if (c.batch_size % s.num_microbatches != 0)
    throw std::invalid_argument("--batch-size " + std::to_string(c.batch_size) + " is not divisible by " +
                                (from_file ? "the schedule file's " + std::to_string(s.num_microbatches) + " microbatches"
                                           : "--micro-batches " + std::to_string(s.num_microbatches)));
}

node_processes spawn_;  // set by resolve: --nodes N without a launcher, or a Kubeflow node's others

train_config resolve(const CLI::App& cmd, const train_flags& f) {
  train_config c;
  std::set<std::string> in_file, flagged;
  if (!f.config.empty()) c = load_config_file(f.config, c, &in_file);
  for (const auto& t : tunables()) {
    if (t.flag.empty() || cmd.count(t.flag) == 0) continue;
    try {
      const std::vector<std::string> given =
          t.kind == value_kind::texts ? f.texts.at(t.flag) : std::vector<std::string>{f.text.at(t.flag)};
      t.apply(c, parse_flag(t, given));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(t.flag + ": " + e.what());
    }
    flagged.insert(t.flag);
  }
  if (f.no_progress) c.progress = false;
  if (f.sequence_parallel) c.sequence_parallel = true;
  if (f.elastic || in_file.count("elastic.min_replicas") || in_file.count("elastic.membership_events")) c.elastic = true;
  if (c.model.kind == model_kind::gpt && !flagged.count("--lr") && f.config.empty()) c.optim.lr = 3e-3f;
  adopt_schedule_file(c, f, flagged, in_file);
  check_pipeline_only(c, flagged, in_file, f.config);
  process_sources src;
  if (cmd.count("--rank")) src.rank = f.process.rank;
  if (cmd.count("--world-size")) src.world_size = f.process.world_size;
  src.addr_flag = flagged.count("--master-addr") > 0;
  src.port_flag = flagged.count("--master-port") > 0;
  src.addr_file = in_file.count("process.master_addr") > 0;
  src.port_file = in_file.count("process.master_port") > 0;
  spawn_ = resolve_process(src, c, f.worker);
  // Several processes and no --dp: as many replicas as the processes hold whole pipelines (one
  // stage per process for --nodes P --pp P), else one replica per process.
  if (c.mesh.processes > 1 && !flagged.count("--dp") && !in_file.count("data_parallel.ranks"))
    c.mesh.dp = c.mesh.processes % (c.mesh.pp * c.mesh.tp * c.mesh.cp) == 0
                    ? c.mesh.processes / (c.mesh.pp * c.mesh.tp * c.mesh.cp)
                    : c.mesh.processes;
  validate(c);
  if (c.mesh.pp > 1 || !c.user_schedule.stages.empty()) check_pipeline_flags(c);
  return c;
}

int run(const CLI::App& cmd, const train_flags& f) {
  train_config cfg;
  try {
    cfg = resolve(cmd, f);
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", f.worker ? "troupe worker" : "troupe train", e.what());
    return 2;
  }
  // One job per checkpoint folder, held by process 0 (whose coordinator commits and prunes) for
  // as long as it lives, restarts included; its workers write shards under its lock.
  std::optional<storage::folder_lock> checkpoint_lock;
  if (!cfg.checkpoint_dir.empty() && cfg.process.index == 0 && !f.worker) {
    try {
      storage::check_writable_folder(cfg.checkpoint_dir, "--checkpoint-dir");
      checkpoint_lock.emplace(cfg.checkpoint_dir, "--checkpoint-dir");
    } catch (const std::exception& e) {
      spdlog::error("troupe train: {}", e.what());
      return 2;
    }
  }
  if ((cfg.zero == 1 || cfg.zero == 2) && cfg.mesh.dp == 1 && cfg.process.index == 0)
    spdlog::warn("--zero {} partitions optimizer state{} over data-parallel ranks; with --dp 1 each rank holds "
                 "all of it, as without ZeRO (add --dp 2 or more)",
                 cfg.zero, cfg.zero == 2 ? " and gradients" : "");
  if (cfg.threads > static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)))
    spdlog::warn("--threads {} exceeds the {} cores of this machine: the run will be oversubscribed", cfg.threads,
                 sysconf(_SC_NPROCESSORS_ONLN));
  forecast_check forecast;
  if (!f.forecast.empty() && cfg.process.index == 0) {
    try {
      forecast.make(cfg, f.forecast);
    } catch (const std::exception& e) {
      spdlog::error("{} --forecast: {}", f.worker ? "troupe worker" : "troupe train", e.what());
      return 2;
    }
    if (f.forecast_only) return 0;
  }
  std::unique_ptr<local_workers> workers;
  if (spawn_.count > 0) {
    workers = std::make_unique<local_workers>(cfg, spawn_);
    for (int p = spawn_.first; p < spawn_.first + spawn_.count; ++p) cfg.process.started_here.push_back(p);
    cfg.process.exited_process = [w = workers.get()] { return w->exited(); };
    if (spawn_.after_listening) {
      cfg.process.on_listening = [w = workers.get()](uint16_t port) { w->start(port); };
      cfg.process.on_restart = [w = workers.get()](const std::string& resume) { w->restart(resume); };
      cfg.process.on_training_start = [w = workers.get()] { w->training_started(); };
    } else {
      workers->start(cfg.process.master_port);  // a launcher's node: its port is known and fixed
    }
  }
  const char* who = f.worker ? "troupe worker" : "troupe train";
  try {
    train_summary s = run_training(cfg);
    if (workers && workers->wait(30000, processes_left(s.membership, cfg.mesh.processes)) > 0) {
      spdlog::error("{}: a worker process failed (see its log above)", who);
      return 1;
    }
    if (cfg.process.index != 0) {
      spdlog::info("process {}: done", cfg.process.index);
      return 0;
    }
    const double acc = s.test_accuracy.empty() ? 0.0 : s.test_accuracy.back();
    // A resumed run says how many steps it ran itself, beside where the job now stands.
    const std::string steps = s.first_step > 0 ? fmt::format("{} steps ({} in this run, resumed at step {})", s.steps,
                                                             s.steps - s.first_step, s.first_step)
                                               : fmt::format("{} steps", s.steps);
    spdlog::info("done: {}, {:.0f} samples/s, {:.1f} s training, final loss {:.4f}, test accuracy {:.4f}", steps,
                 s.samples_per_s, s.train_seconds, s.losses.empty() ? 0.0 : s.losses.back(), acc);
    // Per rank: ranks that share the process overlap in time, and their sum (what used to be
    // shown) passed 100% on any job of several ranks.
    const double busiest = s.rank_compute_seconds.empty()
                               ? 0.0
                               : *std::max_element(s.rank_compute_seconds.begin(), s.rank_compute_seconds.end());
    if (s.train_seconds > 0)
      spdlog::info("the busiest rank's compute device was busy {:.0f}% of the training time", 100.0 * busiest / s.train_seconds);
    spdlog::info("metrics: {}{}", s.metrics_path, s.curves_path.empty() ? "" : ", drawn: " + s.curves_path);
    forecast.compare(s);
    return 0;
  } catch (const std::invalid_argument& e) {  // refused before it started (a plan that cannot run): bad input
    spdlog::error("{}: {}", who, e.what());
    if (workers) workers->wait(10000);
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("{}: {}", who, e.what());
    if (workers) workers->wait(10000);
    return 1;
  }
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code, const char* name, bool worker) {
  auto f = std::make_shared<train_flags>();
  f->worker = worker;
  auto* cmd = app.add_subcommand(name, worker ? "Join a multi-process job as rank >= 1 (the same flags as train)"
                                              : "Train a model (default: MLP 784-256-256-10 on Fashion-MNIST, AdamW)");
  cmd->add_option("--config", f->config, "TOML config file; flags given here override it")->check(CLI::ExistingFile);
  for (const auto& t : tunables()) {
    if (t.flag.empty()) continue;
    if (t.kind == value_kind::texts) cmd->add_option(t.flag, f->texts[t.flag], t.help)->type_name("TEXT");
    else add_tunable_option(cmd, t, f->text[t.flag]);
  }
  cmd->add_flag("--no-progress", f->no_progress, "No progress bar (log lines only)");
  cmd->add_flag("--sequence-parallel", f->sequence_parallel,
                "With --tp: layernorms and residuals on each tp rank's share of the sequences (GPT)");
  cmd->add_flag("--elastic", f->elastic,
                "A lost data-parallel replica is dropped at the step boundary and the job goes on with the others, "
                "from their state in memory, the global batch kept (see --min-replicas, --membership-events)");
  cmd->add_option("--forecast", f->forecast,
                  "Predict the job's step time and peak memory per rank from this machine file (troupe plan --calibrate) "
                  "and compare them with the run")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--forecast-only", f->forecast_only, "With --forecast: print the forecast and do not train");
  add_process_options(cmd, f->process);
  cmd->callback([cmd, f, &exit_code] { exit_code = run(*cmd, *f); });
}

}  // namespace troupe::cli
