// slow_link: names, while the job runs, a data-parallel ring link that is slower than its group's
// others, from the rate at which each rank's collectives' first hop came in from its left rank
// (stage_step_record::bucket_left_rate, measured by the TCP ring). The first hop waits on nothing
// but the left rank's start, so a link capped by the network (or by --slow-link) shows there, at
// the rank to its right, however late the ranks start: a slow rank does not look like a slow link
// (slow_rank.hpp names those). A link is named once its rate is under `ratio` of its group's other
// links' median in `share` of the last `window` steps, after the warm-up; again when it is not any
// more. Only links whose rate is measured: the TCP ring's (a job across processes); MPI, Gloo and
// NCCL report none. Added latency alone does not change a rate and is not named.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "actors/observe/slow_rank.hpp"
#include "actors/observe/step_trace.hpp"
#include "schedules/mesh.hpp"

namespace troupe {

struct slow_link_finding {
  int from = -1, to = -1;   // -1: none
  int slow_in = 0, steps = 0;
  double rate = 0;          // bytes/s, median over the steps it was slow in
  double others_rate = 0;   // bytes/s, its group's other links, median over the same steps
  std::string describe() const;
};

class slow_link_detector {
 public:
  // The window, share and warm-up of slow_rank_options; `ratio` is how much slower than the
  // group's others a link must be.
  slow_link_detector(sched::mesh mesh, slow_rank_options o, double ratio = 0.25) : mesh_(mesh), o_(o), ratio_(ratio) {}
  // One step's records (every rank's). Returns a line to log when the finding changed, else "".
  std::string add(const std::vector<stage_step_record>& ranks);
  const slow_link_finding& current() const { return current_; }

 private:
  struct slow {
    int from = -1;
    double rate = 0, others = 0;
  };
  slow_link_finding judge() const;
  sched::mesh mesh_;
  slow_rank_options o_;
  double ratio_;
  std::deque<std::map<int, slow>> window_;  // per step: receiving rank -> its slow incoming link
  int seen_ = 0;
  slow_link_finding current_;
};

}  // namespace troupe
