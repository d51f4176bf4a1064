// validate: proves a schedule finishes before anything runs, by dry-running it symbolically.
// Sends never block; a receive blocks until its matching send has run. It checks operands,
// send/recv matching, data dependencies, deadlock and live activations; it knows no timing.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedules/schedule.hpp"

namespace troupe::sched {

// Either ok, or the first offending instruction and why, e.g.
//   "stage 1, action 4 (RA3<0): receive has no matching send"
//   "deadlock: stage 0 waits at action 1 (RG0<1), stage 1 waits at action 0 (RA0<0)"
//   "stage 0, action 2 (B1): backward of microbatch 1 on chunk 0 before its forward"
//   "stage 0, action 5 (F4): 5 live activations exceed the bound of 4"
// Checks run in this order, each scanning stages 0..P-1 and their actions in order: metadata,
// operands (stage field, ranges, the peer the chunk layout demands), send/recv matching, then
// the dry run (dependencies, memory, parameter residency, deadlock), then completeness (every
// microbatch forwarded on every chunk, and, when the schedule has any backward, every activation
// freed), then residency at the end of the step (every fetch released).
//
// Parameter residency (ZeRO-3, passes.hpp add_param_fetches): fetch_params(m, c) makes chunk c's
// parameters resident for microbatch m, release_params(m, c) ends that; a fetch without a
// microbatch (FP, FP.c1) covers every microbatch of its chunk until its release (RP, RP.c1).
// On a stage that fetches chunk c at all, a forward, backward or backward_input of (m, c) needs
// a fetch covering m; backward_weight needs none (it reads no weights). Refused: a fetch while
// one covering the same microbatch is held ("fetched twice without a release"), a release with
// no fetch of exactly its (microbatch, chunk), and a fetch still held when the stage's list ends
// (named by that fetch action). A stage that never fetches a chunk is not checked for it, so
// schedules without fetch_params validate as they always did.
struct validation {
  std::string error;       // empty when the schedule is valid
  int stage = -1;          // stage of the offending action; -1 for whole-schedule errors
  int action_index = -1;   // its index in that stage's list; -1 when no single action is at fault
  // Per stage, the most activations stashed at once (a forward stashes one for its microbatch
  // and chunk; backward or backward_weight frees it). Filled as far as the dry run got.
  std::vector<int> peak_live_activations;
  // Per stage, the most (chunk, microbatch) fetches held at once (0 without fetch_params; one
  // without a microbatch counts once). Filled as far as the dry run got.
  std::vector<int> peak_fetched;

  bool ok() const { return error.empty(); }
};

// `max_live_activations`: when given, a forward that makes a stage hold more stashed
// activations than this is refused.
validation validate(const schedule& s, std::optional<int> max_live_activations = std::nullopt);

}  // namespace troupe::sched
