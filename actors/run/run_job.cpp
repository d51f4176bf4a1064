#include "actors/run/run_job.hpp"

#include <exception>

#include "actors/run/teardown_guard.hpp"

namespace troupe {

train_summary run_job(placement& where) {
  teardown_guard guard;  // declared before the actor system: it outlives the system's destructor
  std::string failure;
  do {
    caf::actor_system_config sys_cfg;
    where.configure(sys_cfg);
    caf::actor_system sys{sys_cfg};
    // A stage wedged in a computation (what the watchdog reports) never returns to its mailbox,
    // so neither stop nor ~actor_system would end: after a failure the guard ends the process.
    const auto fail = [&](const std::string& why) {
      guard.arm(why, failed_job_grace);
      where.abort_waits(why);
    };
    try {
      where.start(sys);
      failure = where.wait(sys);
    } catch (const std::exception& e) {
      fail(e.what());
      where.stop(sys);
      throw;
    }
    if (!failure.empty()) fail(failure);
    where.stop(sys);
  } while (failure.empty() && where.next_membership());
  if (!failure.empty()) throw std::runtime_error(failure);
  return where.summary();
}

// A detached actor still referenced from the middleman's registry is never destroyed, and
// ~actor_system would wait for its thread forever (seen as a worker that finished its job but
// did not exit).
void stop_all(caf::actor_system& sys, const std::vector<caf::actor>& actors) {
  for (const auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::scoped_actor self{sys};
  for (const auto& a : actors) {
    if (!a) continue;
    self->wait_for(a);
    sys.registry().erase(a.id());
  }
}

}  // namespace troupe
