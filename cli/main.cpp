// The `troupe` command: one subcommand per thing a user does.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/info_command.hpp"
#include "cli/schedule_command.hpp"
#include "cli/train_command.hpp"
#include "cli/worker_command.hpp"

int main(int argc, char** argv) {
  spdlog::set_pattern("[%H:%M:%S] [%^%l%$] %v");
  CLI::App app{"troupe: an actor-model runtime for distributed deep-learning training"};
  app.require_subcommand(1);
  int exit_code = 0;
  troupe::cli::add_train_command(app, exit_code);
  troupe::cli::add_schedule_command(app, exit_code);
  troupe::cli::add_worker_command(app, exit_code);
  troupe::cli::add_info_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
