// The TOML config file of `troupe train`: read into a train_config over the defaults. Unknown
// tables or keys and values of the wrong type or range are refused, naming the key and line.
#pragma once

#include <set>
#include <string>

#include "actors/config/train_config.hpp"

namespace troupe::cli {

// Applies the file's settings on top of `base`. Throws std::invalid_argument
// ("<file>:<line>: <key>: <problem>"). `given`, when set, receives every key the file set
// ("process.master_port"): the CLI needs to know what the file said and what it left alone.
// `foreign` names tables that another reader of the same file owns (troupe stress's [stress]):
// skipped here, not refused.
train_config load_config_file(const std::string& path, train_config base, std::set<std::string>* given = nullptr,
                              const std::set<std::string>& foreign = {});

// Parses "256,256,128" into layer widths; throws std::invalid_argument on a bad list.
std::vector<int64_t> parse_widths(const std::string& text);

}  // namespace troupe::cli
