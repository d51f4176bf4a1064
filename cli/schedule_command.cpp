// `troupe schedule`: sched::make_named_schedule (the same builders and checks `troupe train --pp`
// uses) or a schedule file (schedule_file.hpp, as `troupe train --schedule-file` reads it), then simulate with forward F, backward-input I and weight W of uniform cost (a full
// backward costs I + W), then the schedules/ renderers. Exit 2 for a refused request; the flags
// are checked by the same table as `troupe train`'s (tunables.hpp).
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

int run(const CLI::App& cmd, const schedule_flags& f) {
  sched::schedule s;
  double fwd = 0, input = 0, weight = 0;
  try {
    fwd = checked(forward_cost(), f.forward).number;
    input = checked(input_cost(), f.backward_input).number;
    weight = checked(weight_cost(), f.backward_weight).number;
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
  const sched::simulation sim = sched::simulate(s, sched::uniform_costs(fwd, bwd, input, weight));
  std::printf("%s", sched::render_text(s).c_str());
  std::printf("simulated with F=%g, B=%g (I=%g + W=%g) per chunk: step %g, bubble %.1f%%, peak live activations",
              fwd, bwd, input, weight, sim.makespan_seconds, sim.bubble_fraction * 100);
  for (int a : sim.peak_live_activations) std::printf(" %d", a);
  std::printf("\n");
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
  cmd->add_option("--schedule-file", f->file,
                  "Draw the schedule in this file (its text form, as --save writes it) instead of a builder's")
      ->type_name("FILE");
  cmd->add_option("--save", f->save,
                  "Write the schedule in its text form to this file, for --schedule-file here and in `troupe train`")
      ->type_name("FILE");
  cmd->add_option("--svg", f->svg, "Write the simulated timeline as SVG to this file");
  cmd->add_option("--trace", f->trace, "Write the simulated timeline as Chrome trace JSON to this file");
  cmd->callback([cmd, f, &exit_code] { exit_code = run(*cmd, *f); });
}

}  // namespace troupe::cli
