// The `troupe` command: one subcommand per thing a user does.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdlib>

#include "cli/schedule_command.hpp"
#include "cli/train_command.hpp"
#include "cli/worker_command.hpp"
#include "kernels/blas_runtime.hpp"

namespace {

// OpenBLAS picks its kernels when it loads, before main: if it fell back to generic ones on a
// CPU it does not know, start again with the right core named (kernels/blas_runtime.hpp).
void restart_with_better_blas(char** argv) {
  const std::string core = troupe::preferred_blas_coretype();
  if (core.empty() || std::getenv("TROUPE_BLAS_RESTARTED")) return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::setenv("TROUPE_BLAS_RESTARTED", troupe::blas_core_name().c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on with the slow kernels
}

}  // namespace

int main(int argc, char** argv) {
  restart_with_better_blas(argv);
  spdlog::set_pattern("[%H:%M:%S] [%^%l%$] %v");
  if (const char* was = std::getenv("TROUPE_BLAS_RESTARTED"))
    spdlog::debug("OpenBLAS chose {} on this CPU; running with OPENBLAS_CORETYPE={}", was, troupe::blas_core_name());
  CLI::App app{"troupe: an actor-model runtime for distributed deep-learning training"};
  app.require_subcommand(1);
  int exit_code = 0;
  troupe::cli::add_train_command(app, exit_code);
  troupe::cli::add_schedule_command(app, exit_code);
  troupe::cli::add_worker_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return exit_code;
}
