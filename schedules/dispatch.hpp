// dispatch: in which order a stage may run its row. `fixed` runs it as written. `ready` treats the
// row as a priority order and runs, whenever the stage is idle, the first action of its row that
// may run now, under three rules that keep every bit of the fixed order's results:
//   * lanes: forward-side actions (F, RA, SA) and backward-side actions (B, I, W, RG, SG) each run
//     in their row order, and the two lanes interleave by readiness. Weight gradients therefore
//     accumulate in the row's microbatch order, and the loss sums in its forward order;
//   * barriers: R, O, FP and RP run in their place: nothing after one runs before it, and it runs
//     once everything before it has;
//   * a backward-side action of (microbatch, chunk) waits for that forward (its stash), and a
//     forward that would run ahead of an earlier backward-side action may do so only while the
//     stage holds fewer stashed activations than the bound: the fixed order's peak for the row,
//     plus any headroom the job grants (--ready-stash). At the fixed peak alone a 1F1B stage's
//     stash is full in its steady state, so only backwards (and receives) can move; one more
//     activation lets a forward run while a backward's gradient is late.
// Why this adds no deadlock (validate's check of the fixed order covers ready dispatch too): a
// stage's earliest pending action is never held by the bound (every action before it ran, so the
// stash is at most the fixed order's at that point) nor by the F-before-B rule (its forward came
// earlier in the row). In a state where every stage waits, each stage's earliest pending action
// waits for a message whose send is pending on another stage, at or after that stage's earliest
// pending action in row order; following these waits gives a cycle of row-order and message edges,
// a cycle the fixed order's dependency graph would have, and validate refuses such a schedule.
// Plain data: the stage (actors/stage) and the simulator both follow it.
#pragma once

#include <string>
#include <vector>

#include "schedules/action.hpp"

namespace troupe::sched {

enum class dispatch_policy { fixed, ready };
const char* to_string(dispatch_policy d);        // "fixed", "ready"
dispatch_policy parse_dispatch(const std::string& text);  // throws std::invalid_argument

enum class lane { forward, backward, barrier };
lane lane_of(op kind);

// What ready dispatch needs to know of one stage's row, computed once.
struct ready_row {
  std::vector<lane> lanes;       // per action
  std::vector<int> forward_of;   // per backward-side compute action: the index of its F; else -1
  int stash_bound = 0;           // the fixed order's peak stashed activations on this row, plus headroom
};
ready_row plan_ready_row(const std::vector<action>& row, int headroom = 0);

// The state of a row in progress: which actions ran.
struct row_progress {
  std::vector<bool> done;
  size_t earliest = 0;  // the first action not done (row size: all done)
  void reset(size_t n);
  void mark(size_t i);
};

// The actions that may run next, in priority order (row order): the earliest pending action, and
// under ready dispatch the head of the other lane when no barrier lies between them, provided its
// forward ran (a backward-side compute) and, for a forward overtaking, `stashed` < the bound.
// At most two; empty when everything ran. A fixed pair, not a vector: the stage asks once per
// action it runs.
struct candidates {
  size_t at[2] = {0, 0};
  size_t count = 0;
  const size_t* begin() const { return at; }
  const size_t* end() const { return at + count; }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  size_t operator[](size_t k) const { return at[k]; }
  void push_back(size_t i) { at[count++] = i; }
};
candidates next_candidates(const ready_row& plan, const std::vector<action>& row, const row_progress& p,
                                    dispatch_policy d, int stashed);

}  // namespace troupe::sched
