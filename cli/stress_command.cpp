// `troupe stress` (see stress_command.hpp). A run that fails by its scenario's design (a killed
// server) is a row of the report, not a failure of the command.
#include "cli/stress_command.hpp"

#include <spdlog/spdlog.h>

#include <memory>

#include "cli/stress_file.hpp"
#include "stress/stress_report.hpp"

namespace troupe::cli {

namespace {

struct stress_flags {
  std::string file, out;
};

int run(const stress_flags& f) {
  stress::stress_plan plan;
  try {
    plan = load_stress_file(f.file);
    if (!f.out.empty()) plan.out_dir = f.out;
  } catch (const std::exception& e) {
    spdlog::error("troupe stress: {}", e.what());
    return 2;
  }
  size_t runs = 0;
  for (const auto& s : plan.scenarios)
    for (const auto& m : plan.modes) runs += s.kill_server >= 0 && m.consistency == consistency_model::none ? 0 : 1;
  spdlog::info("troupe stress {}: {} modes x {} scenarios, {} runs, report in {}", f.file, plan.modes.size(),
               plan.scenarios.size(), runs, plan.out_dir);
  try {
    const int failed = stress::run_and_report(plan);
    // Every run failing is no comparison at all; some failing is what a fault scenario may do.
    return failed > 0 && static_cast<size_t>(failed) == runs ? 1 : 0;
  } catch (const std::exception& e) {
    spdlog::error("troupe stress: {}", e.what());
    return 1;
  }
}

}  // namespace

void add_stress_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<stress_flags>();
  auto* cmd = app.add_subcommand(
      "stress", "Run one job under several training modes and injected faults, and write a report comparing them");
  cmd->add_option("scenario", f->file, "Scenario file (TOML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", f->out, "Report folder (default: the file's stress.out, else runs/stress)");
  cmd->footer(stress_file_help);
  cmd->callback([f, &exit_code] { exit_code = run(*f); });
}

}  // namespace troupe::cli
