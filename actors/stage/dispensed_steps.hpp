// A stage's view of the batches dispensed to its replica (parameter servers under ssp and asp,
// batch_dispenser.cpp): which of its own steps it asked the dispenser about in the current run,
// and which unit each got (-1: none left, the run is over for the replica). Plain data, no CAF:
// the stage sends the requests and feeds the answers in.
#pragma once

#include <cstdint>
#include <map>
#include <set>

namespace troupe {

class dispensed_steps {
 public:
  // A new run of rounds [run, until): what was granted for the last one is void.
  void begin_run(int64_t run, int64_t until) {
    run_ = run;
    until_ = until;
    units_.clear();
    asked_.clear();
  }
  int64_t run() const { return run_; }
  int64_t until() const { return until_; }
  // True the first time: the caller asks the dispenser now.
  bool ask(int64_t step) { return asked_.insert(step).second; }
  // False for an answer about an earlier run (the replica has moved on).
  bool grant(int64_t run, int64_t step, int64_t unit) {
    if (run != run_) return false;
    units_[step] = unit;
    return true;
  }
  bool answered(int64_t step) const { return units_.count(step) > 0; }
  int64_t unit(int64_t step) const { return units_.at(step); }
  // The step is done: what it held is no longer needed.
  void done(int64_t step) {
    units_.erase(step);
    asked_.erase(step);
  }

 private:
  int64_t run_ = -1, until_ = 0;
  std::map<int64_t, int64_t> units_;
  std::set<int64_t> asked_;
};

}  // namespace troupe
