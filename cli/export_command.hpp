// `troupe export CHECKPOINT --format safetensors OUT`: a checkpoint's full parameters for tools
// outside troupe (storage/checkpoint_export.hpp). It starts no actor.
#pragma once

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the `export` subcommand to app; the callback writes its exit code into exit_code.
void add_export_command(CLI::App& app, int& exit_code);

}  // namespace troupe::cli
