// timeline: what each stage did and when, as plain data. The simulator fills it in virtual
// time; a real run can fill it from measured timings, and the same renderers draw both.
// It holds no cost model, no statistics and no drawing code.
#pragma once

#include <string>
#include <vector>

#include "schedules/action.hpp"

namespace troupe::sched {

// One executed action. A compute action's interval is when the device ran it; a receive's is
// the time the stage spent waiting for it (zero when it had already arrived); a send's is
// zero-length at the moment it was issued (transfers run beside compute, on the link).
struct timed_action {
  action what;
  double start_seconds = 0;
  double end_seconds = 0;
  bool out_of_order = false;  // ready dispatch ran it away from its place in the row: drawn outlined
};

// Who a lane is: `who` groups lanes (a rank: a Perfetto process), `what` names the lane in it
// (its compute, its all-reduces: a thread).
struct lane_name {
  std::string who, what;
};

struct timeline {
  std::string name;                              // e.g. the schedule's name
  std::vector<std::vector<timed_action>> stages;  // stages[d]: device d's actions in order
  std::vector<lane_name> lanes;                  // lanes[d] names stages[d]; none given: "stage d"
};

// The name of lane d: lanes[d], or {"stage d", ""} for a timeline that names none.
inline lane_name name_of_lane(const timeline& t, std::size_t d) {
  if (d < t.lanes.size()) return t.lanes[d];
  return {"stage " + std::to_string(d), ""};
}

// The latest end time over all stages (0 for an empty timeline).
inline double end_seconds(const timeline& t) {
  double end = 0;
  for (const auto& lane : t.stages)
    for (const timed_action& e : lane)
      if (e.end_seconds > end) end = e.end_seconds;
  return end;
}

}  // namespace troupe::sched
