// The coordinator's count of a job whose batches are dispensed (parameter servers under ssp and
// asp): each replica runs its own steps, as many as it takes batches, so a step of the job is no
// one replica's step. A replica's step is done when every rank of it (pp x tp) reported it; a
// round, the job's step, when dp replica steps are done, whichever replicas did them (a fast
// replica may do several). Counting only: what a round means (loss, rate, evaluation) stays with
// the coordinator.
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "actors/observe/step_trace.hpp"
#include "schedules/mesh.hpp"

namespace troupe {

class push_rounds {
 public:
  explicit push_rounds(const sched::mesh& m) : mesh_(m) {}
  // Files one rank's report; returns its replica's step (every rank's record of it) once the
  // last of them is in, else nothing.
  std::vector<stage_step_record> add(stage_step_record r);
  // Counts a done replica step into the current round; returns the round (dp replica steps'
  // records) once it is full, else nothing.
  std::vector<stage_step_record> count(std::vector<stage_step_record> replica_step);
  int replica_of(const stage_step_record& r) const { return mesh_.coords_of(r.rank).dp; }

 private:
  sched::mesh mesh_;
  std::map<std::pair<int, int64_t>, std::vector<stage_step_record>> partial_;  // by (replica, its step)
  std::vector<stage_step_record> round_;
  int in_round_ = 0;
};

}  // namespace troupe
