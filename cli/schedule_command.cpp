// `troupe schedule`: sched::make_named_schedule (the same builders and checks `troupe train --pp`
// uses) or a schedule file (schedule_file.hpp, as `troupe train --schedule-file` reads it), then simulate with forward F, backward-input I and weight W of uniform cost (a full
// backward costs I + W), then the schedules/ renderers. Exit 2 for a refused request; the flags
// are checked by the same table as `troupe train`'s (tunables.hpp).
// --dispatch ready simulates the step both ways and prints them side by side, so a user sees what
// ready-first dispatch buys (or costs: it is greedy, see simulate.hpp) before paying for a run;
// --jitter-ms makes compute actions late the way `troupe train --jitter` does, averaged over
// --steps steps, since with nothing late there is little for ready dispatch to gain.
#include "schedules/named.hpp"
#include "cli/schedule_command.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "schedules/render.hpp"
#include "schedules/simulate.hpp"
#include "cli/schedule_file.hpp"
#include "cli/tunables.hpp"
#include "storage/output_file.hpp"

namespace troupe::cli {

namespace {

// Flags as text, checked by the table of tunables (tunables.hpp): --pp, --micro-batches,
// --virtual-stages and --schedule allow here what they allow for `troupe train`.
struct schedule_flags {
  std::string name = "1f1b", svg, trace, file, save;
  std::string stages = "4", microbatches = "8", virtual_stages = "2";
  std::string forward = "1", backward_input = "1", backward_weight = "1";
  std::string dispatch = "fixed", ready_stash = "0", jitter_ms = "0", steps, seed = "42";
};

// A simulated cost: finite, from 0 to a day of virtual time.
tunable cost(const char* flag, const char* help) {
  tunable t;
  t.flag = flag;
  t.help = help;
  t.kind = value_kind::number;
  t.min_num = 0;
  t.max_num = 86400;
  return t;
}
const tunable& forward_cost() { static const tunable t = cost("--forward", "Simulated forward time per chunk [1]"); return t; }
const tunable& input_cost() {
  static const tunable t = cost("--backward-input", "Simulated input-gradient time per chunk [1]");
  return t;
}
const tunable& weight_cost() {
  static const tunable t = cost("--backward-weight", "Simulated weight-gradient time per chunk [1]");
  return t;
}

const tunable& jitter_tunable() {
  static const tunable t = [] {
    tunable j = cost("--jitter-ms", "Every compute action (F, B, I, W) of every stage takes a random extra time, "
                                    "uniform in [0, MAX), seeded (--seed), as `troupe train --jitter` draws it; the "
                                    "costs are then read as milliseconds [0: none]");
    j.max_num = 60000;  // --jitter's bound
    return j;
  }();
  return t;
}
const tunable& steps_tunable() {
  static const tunable t = [] {
    tunable n;
    n.flag = "--steps";
    n.help = "Steps simulated, each with fresh jitter, for the mean step time [50 with --jitter-ms, else 1]";
    n.kind = value_kind::integer;
    n.min_int = 1;
    n.max_int = 100000;
    return n;
  }();
  return t;
}

// The flag's text through its tunable's check; the error names the flag.
value checked(const tunable& t, const std::string& text) {
  try {
    return parse_flag(t, {text});
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(t.flag + ": " + e.what());
  }
}

bool write(const std::string& path, const std::string& text) {
  try {
    storage::write_output_file(path, text);
    return true;
  } catch (const std::runtime_error& e) {
    spdlog::error("troupe schedule: {}", e.what());
    return false;
  }
}

// The builder's flags and a file both say what to draw: one of the two, never both.
const char* const builder_flags[] = {"--schedule", "--pp", "--micro-batches", "--virtual-stages"};

sched::schedule named(const schedule_flags& f) {
  const std::string name = checked(*find_flag("--schedule"), f.name).text;
  const auto stages = static_cast<int>(checked(*find_flag("--pp"), f.stages).integer);
  const auto micro = static_cast<int>(checked(*find_flag("--micro-batches"), f.microbatches).integer);
  const auto virt = static_cast<int>(checked(*find_flag("--virtual-stages"), f.virtual_stages).integer);
  return sched::make_named_schedule(name, stages, micro, virt);
}

// The command line that rebuilds s, for the comment heading a saved file.
std::string origin(const CLI::App& cmd, const schedule_flags& f) {
  if (cmd.count("--schedule-file")) return "troupe schedule --schedule-file " + f.file;
  return "troupe schedule --schedule " + f.name + " --pp " + f.stages + " --micro-batches " + f.microbatches +
         (f.name == "interleaved" ? " --virtual-stages " + f.virtual_stages : std::string());
}

// One dispatch policy's line: "fixed: step 33, bubble 27.3%, peak live activations 4 3 2 1".
void print_policy(const char* name, const sched::step_statistics& st, bool jittered) {
  if (jittered)
    std::printf("  %s: mean step %g (max %g), bubble %.1f%%, peak live activations", name, st.mean_makespan_seconds,
                st.max_makespan_seconds, st.mean_bubble_fraction * 100);
  else
    std::printf("  %s: step %g, bubble %.1f%%, peak live activations", name, st.mean_makespan_seconds,
                st.mean_bubble_fraction * 100);
  for (int a : st.peak_live_activations) std::printf(" %d", a);
}

int run(const CLI::App& cmd, const schedule_flags& f) {
  sched::schedule s;
  double fwd = 0, input = 0, weight = 0, jitter = 0;
  sched::simulate_options options;
  int steps = 1;
  try {
    fwd = checked(forward_cost(), f.forward).number;
    input = checked(input_cost(), f.backward_input).number;
    weight = checked(weight_cost(), f.backward_weight).number;
    options.dispatch = sched::parse_dispatch(checked(*find_flag("--dispatch"), f.dispatch).text);
    options.ready_stash = static_cast<int>(checked(*find_flag("--ready-stash"), f.ready_stash).integer);
    options.jitter_seed = static_cast<uint64_t>(checked(*find_flag("--seed"), f.seed).integer);
    jitter = checked(jitter_tunable(), f.jitter_ms).number;
    steps = !f.steps.empty() ? static_cast<int>(checked(steps_tunable(), f.steps).integer) : jitter > 0 ? 50 : 1;
    if (cmd.count("--schedule-file")) {
      for (const char* flag : builder_flags)
        if (cmd.count(flag))
          throw std::invalid_argument(std::string(flag) + " cannot be given with --schedule-file: the file holds the "
                                      "whole schedule (its header says P, M and v)");
      s = read_schedule_file(f.file);
    } else {
      s = named(f);
    }
  } catch (const std::exception& e) {
    spdlog::error("troupe schedule: {}", e.what());
    return 2;
  }
  const double bwd = input + weight;
  const sched::cost_model costs = sched::uniform_costs(fwd, bwd, input, weight);
  if (jitter > 0) options.jitter_max_seconds.assign(static_cast<size_t>(s.num_stages), jitter);
  // What --svg and --trace draw: the first step under the chosen dispatch.
  const sched::simulation sim = sched::simulate(s, costs, options);
  std::printf("%s", sched::render_text(s).c_str());
  const bool ready = options.dispatch == sched::dispatch_policy::ready;
  if (!ready && jitter == 0 && steps == 1) {  // the plain simulation, as it always printed
    std::printf("simulated with F=%g, B=%g (I=%g + W=%g) per chunk: step %g, bubble %.1f%%, peak live activations",
                fwd, bwd, input, weight, sim.makespan_seconds, sim.bubble_fraction * 100);
    for (int a : sim.peak_live_activations) std::printf(" %d", a);
    std::printf("\n");
  } else {
    std::printf("simulated with F=%g, B=%g (I=%g + W=%g) per chunk", fwd, bwd, input, weight);
    if (jitter > 0)
      std::printf(" (ms), each compute action up to %g ms late, over %d step%s from seed %llu", jitter, steps,
                  steps == 1 ? "" : "s", static_cast<unsigned long long>(options.jitter_seed));
    std::printf(":\n");
    sched::simulate_options fixed_options = options;
    fixed_options.dispatch = sched::dispatch_policy::fixed;
    const sched::step_statistics fixed = sched::simulate_steps(s, costs, fixed_options, steps);
    print_policy("fixed", fixed, jitter > 0);
    std::printf("\n");
    if (ready) {
      const sched::step_statistics r = sched::simulate_steps(s, costs, options, steps);
      print_policy("ready", r, jitter > 0);
      std::printf(" (stash headroom %d; %d action%s run ahead of the row's order)\n", options.ready_stash,
                  r.out_of_order, r.out_of_order == 1 ? "" : "s");
      if (r.mean_makespan_seconds > 0)
        std::printf("  ready / fixed step time: %.3f (%.3fx the fixed order's throughput)\n",
                    r.mean_makespan_seconds / fixed.mean_makespan_seconds,
                    fixed.mean_makespan_seconds / r.mean_makespan_seconds);
    }
  }
  if (!f.svg.empty() && !write(f.svg, sched::render_svg(sim.events))) return 1;
  if (!f.trace.empty() && !write(f.trace, sched::render_chrome_trace(sim.events))) return 1;
  if (!f.save.empty() && !write(f.save, schedule_file_text(s, origin(cmd, f)))) return 1;
  return 0;
}

}  // namespace

void add_schedule_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<schedule_flags>();
  auto* cmd = app.add_subcommand("schedule", "Draw a pipeline schedule: text table, SVG timeline, Chrome trace");
  cmd->add_option("--schedule", f->name, "Builder: gpipe, 1f1b, interleaved, zb-h1 [1f1b]")->type_name("TEXT");
  cmd->add_option("--pp,--stages", f->stages, "Pipeline stages P [4] {" + allowed(*find_flag("--pp")) + "}")
      ->type_name("INT");
  cmd->add_option("--micro-batches", f->microbatches,
                  "Microbatches M per step [8] {" + allowed(*find_flag("--micro-batches")) + "}")->type_name("INT");
  cmd->add_option("--virtual-stages", f->virtual_stages,
                  "Chunks per stage v, for interleaved [2] {" + allowed(*find_flag("--virtual-stages")) + "}")
      ->type_name("INT");
  for (auto [t, into] : {std::pair{&forward_cost(), &f->forward}, std::pair{&input_cost(), &f->backward_input},
                         std::pair{&weight_cost(), &f->backward_weight}})
    add_tunable_option(cmd, *t, *into);
  cmd->add_option("--dispatch", f->dispatch,
                  "Simulate each stage's row as written (fixed) or ready-first (ready: printed beside fixed) "
                  "{fixed, ready} [fixed]")
      ->type_name("TEXT");
  add_tunable_option(cmd, *find_flag("--ready-stash"), f->ready_stash);
  for (auto [t, into] : {std::pair{&jitter_tunable(), &f->jitter_ms}, std::pair{&steps_tunable(), &f->steps}})
    add_tunable_option(cmd, *t, *into);
  cmd->add_option("--seed", f->seed, "Seed of --jitter-ms's draws [42]")->type_name("INT");
  cmd->add_option("--schedule-file", f->file,
                  "Draw the schedule in this file (its text form, as --save writes it) instead of a builder's")
      ->type_name("FILE");
  cmd->add_option("--save", f->save,
                  "Write the schedule in its text form to this file, for --schedule-file here and in `troupe train`")
      ->type_name("FILE");
  cmd->add_option("--svg", f->svg, "Write the simulated timeline (the first step, under --dispatch) as SVG to this file");
  cmd->add_option("--trace", f->trace,
                  "Write the simulated timeline (the first step, under --dispatch) as Chrome trace JSON to this file");
  cmd->callback([cmd, f, &exit_code] { exit_code = run(*cmd, *f); });
}

}  // namespace troupe::cli
