// Scheduler settings, measured on the default job (MLP, 1404 steps, 2 cores):
// - CAF's default work-stealing workers poll with 50 us sleeps when idle: 54,000 context switches
//   and 42-49k samples/s. The "sharing" policy parks idle workers on a condition variable:
//   10,000 switches and 52-55k samples/s. Scheduler threads here only route messages and run
//   short handlers (compute is on detached actors), so they gain nothing from stealing.
// - Two scheduler threads: enough to route messages while the device threads compute.
#include "actors/run/runtime_config.hpp"

#include <cstdlib>
#include <string>

#include "actors/messages.hpp"

namespace troupe {

void configure_runtime(caf::actor_system_config& cfg) {
  add_message_types(cfg);
  cfg.set("scheduler.max-threads", 2);
  // TROUPE_SCHEDULER_POLICY=stealing restores CAF's default, for comparison.
  const char* policy = std::getenv("TROUPE_SCHEDULER_POLICY");
  const bool stealing = policy && std::string(policy) == "stealing";
  cfg.set("scheduler.policy", stealing ? caf::atom("stealing") : caf::atom("sharing"));
}

}  // namespace troupe
