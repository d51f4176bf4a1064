// docs/reference/flags.md, made from the table of tunables (tunables.hpp), the options `troupe
// train` has beside it and the launcher variables (comm/launch_env.hpp), so the reference cannot
// drift from what the command accepts: a test compares the file with this function's text.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace troupe::cli {

// The whole Markdown page. `train` is the `troupe train` subcommand, for its options that are
// not tunables (--config, --no-progress, --rank, ...). Machine-independent: a bound that depends
// on the machine is shown as its rule.
std::string flags_reference(const CLI::App& train);

}  // namespace troupe::cli
