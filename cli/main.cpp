// The `troupe` command: one subcommand per thing a user does. Bad input, whatever finds it (CLI11
// for an unknown flag or a missing value, the table of tunables for a range, a config file), exits
// 2 with one short line; help exits 0.
#include <CLI/CLI.hpp>
#include <spdlog/cfg/env.h>
#include <spdlog/spdlog.h>

#include <string>

#include "cli/export_command.hpp"
#include "cli/info_command.hpp"
#include "cli/plan_command.hpp"
#include "cli/schedule_command.hpp"
#include "cli/stop_signals.hpp"
#include "cli/stress_command.hpp"
#include "cli/train_command.hpp"
#include "cli/worker_command.hpp"

int main(int argc, char** argv) {
  troupe::cli::handle_stop_signals();  // before any thread, so every thread inherits the mask
  spdlog::set_pattern("[%H:%M:%S] [%^%l%$] %v");
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug shows the runtime's debug lines
  CLI::App app{"troupe: an actor-model runtime for distributed deep-learning training"};
  app.set_version_flag("--version", std::string("troupe ") + TROUPE_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  troupe::cli::add_train_command(app, exit_code);
  troupe::cli::add_schedule_command(app, exit_code);
  troupe::cli::add_worker_command(app, exit_code);
  troupe::cli::add_info_command(app, exit_code);
  troupe::cli::add_plan_command(app, exit_code);
  troupe::cli::add_export_command(app, exit_code);
  troupe::cli::add_stress_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::string where = "troupe";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    spdlog::error("{}: {} (see `{} --help`)", where, e.what(), where);
    return 2;
  }
  return exit_code;
}
