// The coordinator's state and what the files of its implementation share: coordinator.cpp
// (its messages, the job's start and end), step_clock.cpp (ordering runs of steps, each step's
// loss in rank order), checkpoint_commit.cpp, evaluation_gather.cpp, watchdog.cpp and, for
// dispensed batches, push_rounds.hpp. Include only from actors/coordinator/*.cpp.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/observe/slow_link.hpp"
#include "actors/observe/slow_rank.hpp"
#include "actors/actors.hpp"
#include "actors/coordinator/push_rounds.hpp"

namespace troupe::coordinator_detail {

using clock_type = std::chrono::steady_clock;

struct coordinator_state {
  coordinator_args args;
  std::vector<caf::actor> stages;  // by mesh rank
  caf::actor evaluator;
  std::vector<caf::actor> members;
  std::map<int64_t, std::vector<stage_step_record>> reports;  // by step: the ranks reported so far
  clock_type::time_point step_start;
  std::deque<clock_type::time_point> recent;  // when the last few steps ended (rate window)
  clock_type::time_point last_progress = clock_type::now();
  int64_t polled = -1;  // actions completed over all stages at the watchdog's last poll (-1: none since a step)
  bool polling = false;
  std::vector<caf::actor> collectives;  // dumped into a watchdog report
  std::unique_ptr<slow_rank_detector> slow;  // collectives' data parallelism: who the others wait for
  std::unique_ptr<slow_link_detector> slow_link;  // and which of their ring links is slow
  bool finishing = false;
  int64_t until = 0;            // the end of the run of steps last ordered
  int checkpoints_writing = 0;  // ordered, not yet committed
  bool finish_when_saved = false;
  // A checkpoint due while the previous one is still being written waits for its commit, with
  // what follows it (the next run of steps, or an evaluation): at most one is written at a time,
  // so a disk holds at most one checkpoint in progress beside the committed ones.
  std::function<void()> after_commit;
  std::unique_ptr<push_rounds> rounds;  // dispensed batches: replica steps counted into rounds
  std::vector<stage_step_record> latest;  // dispensed batches: each rank's traced step, by rank
  int64_t stop_at = -1;    // an elastic job's next membership change given in advance (-1: none)
  bool regrouping = false;  // its state is being gathered for a membership change
  int lost_replica = -1;    // the replica that change drops (-1: a change given in advance)
  bool admit_pending = false;  // a process asked to join before the job started
  int64_t committed = 0;    // steps whose updates were committed (elastic): what every live shard holds
  std::function<void()> when_steps_done;  // an image waiting for the records of the steps it holds
  // By step, the ranks that have their gradients and their shares of its loss (elastic).
  std::map<int64_t, std::map<int, troupe::update_ready>> shares;
  std::string symptom;  // a member that died of asking a dead actor: reported unless the cause comes soon
  static inline const char* name = "coordinator";
};

using self_ptr = caf::stateful_actor<coordinator_state>*;

// coordinator.cpp: the members are told to stop (and the coordinator quits: finish). The first
// reason the job stopped is the one reported; later ones are consequences.
void stop_members(self_ptr self);
void finish(self_ptr self);
void fail(self_ptr self, const std::string& why, bool own);

// step_clock.cpp.
void order_steps(self_ptr self, int64_t step);
void stage_reported(self_ptr self, stage_step_record& r);
void replica_reported(self_ptr self, stage_step_record& r);

// checkpoint_commit.cpp.
bool saves_after(const coordinator_state& s, int64_t steps_done);
void finish_when_saved(self_ptr self);
void checkpoint(self_ptr self, int64_t step);

// membership_change.cpp: an elastic job's membership changes.
void change_membership(self_ptr self, int64_t step);  // the events given for this boundary
bool lose_replica(self_ptr self, const caf::down_msg& dm);  // false: not a replica it can go on without
void ready_to_update(self_ptr self, const update_ready& r);  // commits the step once every rank is
void step_failed_on(self_ptr self, const step_failed& f);     // a live rank's collective failed
void admit_replica(self_ptr self);  // a process asks to join: taken in at the next step boundary

// evaluation_gather.cpp: the first replica's parameters to the evaluator, which evaluates epoch.
void evaluate(self_ptr self, int64_t epoch);

// watchdog.cpp.
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
using settle_atom = caf::atom_constant<caf::atom("settle")>;  // the grace after a symptom is over
std::chrono::milliseconds watchdog_period(double seconds);
void watch(self_ptr self);

}  // namespace troupe::coordinator_detail
