// pipeline_timing: reads measured pipeline timelines the way simulate() reads its own: busy and
// idle time per stage, the bubble, and a cost model calibrated from the measured action times,
// so a real run can be compared with the simulation of the same schedule. Pure functions over
// schedules/ data: no actors, no clocks.
#pragma once

#include <string>
#include <vector>

#include "schedules/simulate.hpp"

namespace troupe {

// The same accounting as sched::simulation: busy = compute, reduce, optimizer, fetch/release;
// idle = step time - busy; bubble = total idle / (P * step time).
struct bubble_stats {
  double step_seconds = 0;
  std::vector<double> busy_seconds, idle_seconds;
  double bubble_fraction = 0;
};
bubble_stats measure_bubble(const sched::timeline& t);

// Per stage and chunk, the median measured forward / backward / backward_input /
// backward_weight times over all steps given; send_seconds is the median delay between a send
// and the end of a receive that was waiting for it; reduce and optimizer times are the median
// per stage, the largest stage's taken (the simulator has one value for all stages).
sched::cost_model calibrate_costs(const sched::schedule& s, const std::vector<sched::timeline>& steps);

// Index of the step whose measured step time is the median.
size_t median_step(const std::vector<sched::timeline>& steps);

// A small table: step time, bubble fraction and idle seconds per stage, measured and simulated.
std::string compare_bubbles(const bubble_stats& measured, const sched::simulation& simulated);

}  // namespace troupe
