// What a parameter-server job says about its servers: the consistency model and where the
// servers run, when it starts; how stale the parameters it trained on were, how often the
// staleness bound held a replica back and how the batches fell to the replicas, when it ends.
// Read from the servers' records (train_summary::server_updates), not from timing.
#pragma once

#include <string>

#include "actors/config/train_config.hpp"

namespace troupe {

// "parameter servers: ssp (...), 2 servers (...) in this process, ..."; empty without servers.
std::string describe_servers(const train_config& cfg);

// The end-of-job figures; empty without servers or records.
std::string summarize_servers(const train_config& cfg, const train_summary& sum);

}  // namespace troupe
