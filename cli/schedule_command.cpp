// `troupe schedule`: make_pipeline_schedule (the same builders and checks `troupe train --pp`
// uses), then simulate with forward F, backward-input I and weight W of uniform cost (a full
// backward costs I + W), then the schedules/ renderers. Exit 2 for a refused request.
#include "cli/schedule_command.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "actors/pipeline_job.hpp"
#include "schedules/render.hpp"
#include "schedules/simulate.hpp"

namespace troupe::cli {

namespace {

struct schedule_flags {
  std::string name = "1f1b", svg, trace;
  int stages = 4, microbatches = 8, virtual_stages = 2;
  double forward = 1, backward_input = 1, backward_weight = 1;
};

bool write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) spdlog::error("troupe schedule: cannot write {}", path);
  return static_cast<bool>(out);
}

int run(const schedule_flags& f) {
  sched::schedule s;
  try {
    s = make_pipeline_schedule(f.name, f.stages, f.microbatches, f.virtual_stages);
  } catch (const std::exception& e) {
    spdlog::error("troupe schedule: {}", e.what());
    return 2;
  }
  const double bwd = f.backward_input + f.backward_weight;
  const sched::simulation sim =
      sched::simulate(s, sched::uniform_costs(f.forward, bwd, f.backward_input, f.backward_weight));
  std::printf("%s", sched::render_text(s).c_str());
  std::printf("simulated with F=%g, B=%g (I=%g + W=%g) per chunk: step %g, bubble %.1f%%, peak live activations",
              f.forward, bwd, f.backward_input, f.backward_weight, sim.makespan_seconds, sim.bubble_fraction * 100);
  for (int a : sim.peak_live_activations) std::printf(" %d", a);
  std::printf("\n");
  if (!f.svg.empty() && !write(f.svg, sched::render_svg(sim.events))) return 1;
  if (!f.trace.empty() && !write(f.trace, sched::render_chrome_trace(sim.events))) return 1;
  return 0;
}

}  // namespace

void add_schedule_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<schedule_flags>();
  auto* cmd = app.add_subcommand("schedule", "Draw a pipeline schedule: text table, SVG timeline, Chrome trace");
  cmd->add_option("--schedule", f->name, "Builder: gpipe, 1f1b, interleaved, zb-h1 [1f1b]")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--pp,--stages", f->stages, "Pipeline stages P [4]")->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batches", f->microbatches, "Microbatches M per step [8]")->check(CLI::PositiveNumber);
  cmd->add_option("--virtual-stages", f->virtual_stages, "Chunks per stage v, for interleaved [2]")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--forward", f->forward, "Simulated forward time per chunk [1]")->check(CLI::NonNegativeNumber);
  cmd->add_option("--backward-input", f->backward_input, "Simulated input-gradient time per chunk [1]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--backward-weight", f->backward_weight, "Simulated weight-gradient time per chunk [1]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--svg", f->svg, "Write the simulated timeline as SVG to this file");
  cmd->add_option("--trace", f->trace, "Write the simulated timeline as Chrome trace JSON to this file");
  cmd->callback([f, &exit_code] { exit_code = run(*f); });
}

}  // namespace troupe::cli
