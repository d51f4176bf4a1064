// The parameter servers' log lines (server_report.hpp).
#include "actors/observe/server_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace troupe {

std::string describe_servers(const train_config& cfg) {
  if (cfg.consistency == consistency_model::none) return "";
  const int slots = cfg.mesh.pp * cfg.mesh.tp, servers = slots * cfg.server_shards;
  std::string rule;
  switch (cfg.consistency) {
    case consistency_model::bsp:
      rule = fmt::format("bsp: each step waits for all {} replicas' gradients, summed in replica order", cfg.mesh.dp);
      break;
    case consistency_model::ssp:
      rule = fmt::format("ssp: a replica's parameters may miss at most the last {} rounds' updates, each push applied "
                         "at once; batches handed out on demand",
                         cfg.staleness);
      break;
    default:
      rule = "asp: each push applied and answered at once, no bound; batches handed out on demand";
      break;
  }
  const std::string where = cfg.server_processes > 0
                                ? cfg.server_processes == 1 ? std::string("in a process of their own")
                                                              : fmt::format("in {} processes of their own", cfg.server_processes)
                                : cfg.mesh.processes > 1 ? "in process 0" : "in this process";
  return fmt::format("parameter servers: {}; {} server{} ({} per pipeline stage and tp rank, each a key range) {}, "
                     "no all-reduce",
                     rule, servers, servers == 1 ? "" : "s", cfg.server_shards, where);
}

std::string summarize_servers(const train_config& cfg, const train_summary& sum) {
  if (cfg.consistency == consistency_model::none || sum.server_updates.empty()) return "";
  std::set<int32_t> servers;
  int64_t lead = 0, stale = 0, stale_sum = 0, held = 0;
  for (const auto& u : sum.server_updates) {
    servers.insert(u.server);
    lead = std::max(lead, u.step - u.slowest);  // rounds ahead of the rounds complete
    const int64_t missed = u.version_applied - u.version_read;  // other updates applied meanwhile
    stale = std::max(stale, missed);
    stale_sum += missed;
    held += u.held ? 1 : 0;
  }
  const auto n = static_cast<double>(sum.server_updates.size());
  auto plural = [](int64_t k, const char* word) { return fmt::format("{} {}{}", k, word, k == 1 ? "" : "s"); };
  std::string out = fmt::format("parameter servers: {} pushes applied by {} server{}; a push's parameters were up to {} old "
                                "(mean {:.1f}) and up to {} ahead of the rounds complete",
                                sum.server_updates.size(), servers.size(),
                                servers.size() == 1 ? "" : "s", plural(stale, "update"), static_cast<double>(stale_sum) / n,
                                plural(lead, "round"));
  if (cfg.consistency == consistency_model::ssp)
    out += fmt::format(" (bound {}); {} held back by the bound", cfg.staleness, plural(held, "answer"));
  if (!sum.dispensed.empty()) {
    std::map<int32_t, int64_t> per_replica;
    for (const auto& b : sum.dispensed) ++per_replica[b.replica];
    std::string counts;
    for (const auto& [replica, batches] : per_replica) counts += fmt::format("{}{}", counts.empty() ? "" : ", ", batches);
    out += fmt::format("; batches per replica: {}", counts);
  }
  return out;
}

}  // namespace troupe
