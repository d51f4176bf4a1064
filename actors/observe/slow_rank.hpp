// Which rank the others wait for, while the job runs (issue 43's live straggler detection, from
// the records every step already carries). In a data-parallel group a rank's gradients are ready
// when its backward hands in its last bucket; the group's all-reduce cannot finish before the last
// of them, so the rank that hands in last, step after step, is the one the others wait for. Over a
// window of recent steps the detector names a rank that was last in nearly all of them by more than a
// threshold (a fraction of the step time), and says whether its own compute is slower than its
// peers' (a slow device) or not (it was held up before its backward: its input, its thread).
// Pure data: the coordinator feeds it each step's records and logs what it says.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "actors/observe/step_trace.hpp"
#include "schedules/mesh.hpp"

namespace troupe {

struct slow_rank_options {
  int window = 10;          // steps looked at (0: off)
  // Last in at least this share of them: on a loaded machine a rank's thread can be descheduled
  // for milliseconds in 15 of 20 steps (seen in CI); a straggler is last in nearly all.
  double share = 0.9;
  double threshold = 0.1;   // by at least this fraction of the median step time, on median
  // And by at least this much: a thread on a loaded machine loses time slices of a millisecond or
  // more (rank 1 of an undisturbed 2.4 ms step was seen 1.1 ms late in 19 of 20 steps on 2 busy
  // cores); a straggler worth naming costs more than the scheduler's noise.
  double min_late_ms = 2;
  // Steps not looked at, from the job's first: a job's first steps (threads starting, first touches
  // of memory) made rank 0 last in each of them by half a step with no straggler (seen in CI).
  int warmup = 10;
};

struct slow_rank_finding {
  int rank = -1;            // -1: none
  int last_in = 0, steps = 0;
  double late_ms = 0;       // median lateness behind the median hand-in of the group's others
  double step_ms = 0;       // median step time
  double compute_ms = 0, peers_compute_ms = 0;  // its median compute, its group's others'
  bool device_slower() const { return compute_ms > 1.1 * peers_compute_ms; }
  std::string describe() const;
};

class slow_rank_detector {
 public:
  slow_rank_detector(sched::mesh mesh, slow_rank_options o) : mesh_(mesh), o_(o) {}
  // One step's records (every rank's). Returns a line to log when the finding changed (a rank is
  // named, another is, or none is any more), else "".
  std::string add(const std::vector<stage_step_record>& ranks);
  const slow_rank_finding& current() const { return current_; }

 private:
  struct sample {
    std::map<int, double> late;     // rank -> hand-in behind its group's others' median (seconds; only each group's last)
    std::map<int, double> compute;  // rank -> compute seconds
    double step = 0;
  };
  slow_rank_finding judge() const;
  sched::mesh mesh_;
  slow_rank_options o_;
  std::deque<sample> window_;
  int seen_ = 0;  // steps given, warm-up included
  slow_rank_finding current_;
};

}  // namespace troupe
