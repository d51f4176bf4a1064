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
};

struct timeline {
  std::string name;                              // e.g. the schedule's name
  std::vector<std::vector<timed_action>> stages;  // stages[d]: device d's actions in order
};

// The latest end time over all stages (0 for an empty timeline).
inline double end_seconds(const timeline& t) {
  double end = 0;
  for (const auto& lane : t.stages)
    for (const timed_action& e : lane)
      if (e.end_seconds > end) end = e.end_seconds;
  return end;
}

}  // namespace troupe::sched
