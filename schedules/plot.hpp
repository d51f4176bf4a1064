// plot: small SVG charts for the stress report and a run's curves (lines against a shared x axis,
// grouped bars). Here, below actors, so that a run can draw its own. They return strings and
// write no files. Every chart carries its mapping from data to pixels (data-x-min ... data-bottom
// on <g class="plot">) and each series its name, so a reader (the tests) can take the drawn
// points back to data; it is not a general plotting library.
#pragma once

#include <string>
#include <vector>

#include "schedules/render.hpp"

namespace troupe::plot {

struct series {
  std::string name;
  std::vector<double> x, y;  // same length; points with a non-finite y are left out
  bool dots = false;  // a dot at each point too: a line through one or two points is hard to see, or nothing
};

struct labels {
  std::string title, x, y;
};

// One <polyline class="series" data-series="NAME"> per series with at least one point, and for
// a series with dots a <circle class="dot" data-series="NAME"> at each of its points.
std::string line_chart(const labels& l, const std::vector<series>& lines);

// Grouped bars: one group per category, one <rect class="bar" data-series data-category
// data-value> per series in it; each series' y holds one value per category.
std::string bar_chart(const labels& l, const std::vector<std::string>& categories, const std::vector<series>& bars);

// Charts one above the other in one SVG document, each in a <g class="chart"> moved down below
// the ones before it; every chart keeps its own frame and attributes.
std::string stack(const std::vector<std::string>& charts);

using sched::xml_escape;

}  // namespace troupe::plot
