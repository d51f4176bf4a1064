// The next membership of an elastic job (membership_plan.hpp).
#include "actors/run/membership_plan.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>

namespace troupe {

membership_plan plan_membership(const train_config& cfg, const std::vector<membership_event>& at) {
  membership_plan out;
  out.cfg = cfg;
  out.cfg.mesh.dp = replicas_after(at, cfg.mesh.dp);
  for (const auto& e : at)  // the injected loss happened: it is not made again
    if (e.change == membership_change::lose && e.replica == cfg.kill_replica) out.cfg.kill_replica = -1;
  if (cfg.mesh.processes <= 1) return out;
  // One replica per process: the replicas, in order, are the processes.
  std::vector<int> order;
  for (int p = 0; p < cfg.mesh.processes; ++p) order.push_back(p);
  int newcomer = cfg.mesh.processes;  // an admitted process asked to join as the next index
  for (const auto& e : at) {
    if (e.change == membership_change::admit) order.push_back(newcomer++);
    else order.erase(order.begin() + e.replica);
  }
  if (order.empty() || order.front() != 0)
    throw std::invalid_argument("process 0 holds the job's coordinator: it cannot leave the job");
  out.processes = order;
  out.cfg.mesh.processes = static_cast<int>(order.size());
  const auto me = std::find(order.begin(), order.end(), cfg.process.index);
  out.member = me != order.end();
  out.cfg.process.index = out.member ? static_cast<int>(me - order.begin()) : -1;
  return out;
}

std::vector<int> processes_left(const std::vector<membership_event>& events, int processes) {
  std::vector<int> now, left;  // now: each process's index at the start by its place (-1: admitted since)
  for (int p = 0; p < processes; ++p) now.push_back(p);
  for (const auto& e : events) {
    if (e.change == membership_change::admit) {
      now.push_back(-1);
      continue;
    }
    if (e.replica < 0 || e.replica >= static_cast<int>(now.size())) continue;
    if (now[static_cast<size_t>(e.replica)] >= 0) left.push_back(now[static_cast<size_t>(e.replica)]);
    now.erase(now.begin() + e.replica);
  }
  return left;
}

void log_membership(metrics_log* log, int64_t step, const std::vector<membership_event>& at, const train_config& before,
                    const train_config& after) {
  std::string what;
  for (const auto& e : at) {
    const std::string text = to_string(e).substr(to_string(e).find(": ") + 2);
    what += (what.empty() ? "" : ", ") + text;
    if (log) log->membership(step, text, after.mesh.dp);
  }
  spdlog::warn("membership change after step {}: {}; the job goes on with {} data-parallel replicas (was {}){}, each on "
               "1/{} of the {}-sample batch, from the state in memory",
               step, what, after.mesh.dp, before.mesh.dp,
               before.mesh.processes > 1 ? fmt::format(" in {} processes", after.mesh.processes) : std::string(),
               after.mesh.dp, after.batch_size);
}

}  // namespace troupe
