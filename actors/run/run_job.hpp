// run_job: the one body that runs a process's part of a job. What differs between the job held in
// one process, process 0 of a job over several, a worker process and a parameter-server process
// is a placement: which actors this process spawns, what it waits for, how it stops them. The
// actor system, the teardown guard and the failure path (guard armed, group waits ended, every
// actor stopped, the reason thrown) exist here once.
#pragma once

#include <caf/all.hpp>

#include <string>
#include <vector>

#include "actors/config/train_config.hpp"

namespace troupe {

class placement {
 public:
  virtual ~placement() = default;
  // Before the actor system exists: its settings (a worker reaches process 0's gate here, since
  // the interface that reaches it is the host its links serve on).
  virtual void configure(caf::actor_system_config& sys_cfg) = 0;
  // Spawns this process's actors and starts its part of the job. If it throws, stop still runs.
  virtual void start(caf::actor_system& sys) = 0;
  // Blocks until the job ends here; the reason it failed, empty when it trained.
  virtual std::string wait(caf::actor_system& sys) = 0;
  // After stop, of a part that ended without a failure: an elastic job that stopped to change
  // its membership (membership.hpp) plans the next one, from the state the last one left in
  // memory, and returns true; run_job starts it in a new actor system. Else false: it is over.
  virtual bool next_membership() { return false; }
  // After a failure, before the actors are stopped: ends their waits on a peer that is gone
  // (in-process tensor-parallel groups, device engines), where no message reaches them.
  virtual void abort_waits(const std::string& why) = 0;
  // Stops every actor start made, however far it got, and drops every handle into the system:
  // the placement outlives it.
  virtual void stop(caf::actor_system& sys) = 0;
  // Once the actor system is gone, of a job that trained: what it did.
  virtual train_summary summary() = 0;
};

// Runs `where`'s part of the job to its end, membership after membership. Throws std::runtime_error with the reason when the
// job failed; a process whose actors do not stop within failed_job_grace of that ends with exit
// code 1 (teardown_guard).
train_summary run_job(placement& where);

// Stops the actors, waits until they are gone, and drops the registry entries the middleman made
// when their handles crossed to another process (see the definition).
void stop_all(caf::actor_system& sys, const std::vector<caf::actor>& actors);

}  // namespace troupe
