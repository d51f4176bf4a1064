// run_curves: curves.svg draws exactly the numbers it was given, and a job's curves.svg exactly
// the numbers of its metrics.jsonl. Every drawn point is taken back to data through the chart's
// own data-to-pixel attributes, so a wrong scale, a shifted step or a dropped point fails.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "actors/observe/run_curves.hpp"
#include "actors/run/training_job.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

namespace {

struct point {
  double x, y;
};

// One chart of the SVG, its series' points already mapped back to data.
struct chart {
  std::map<std::string, std::vector<point>> lines;  // polylines by data-series
  std::map<std::string, std::vector<point>> dots;   // circles by data-series
};

double attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\""))) ADD_FAILURE() << "no " << name << " in " << tag;
  return m.empty() ? NAN : std::stod(m[1]);
}

std::string text_attr(const std::string& tag, const std::string& name) {
  std::smatch m;
  return std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\"")) ? m[1].str() : std::string();
}

std::vector<chart> read_charts(const std::string& svg) {
  std::vector<chart> out;
  const std::string open = "<g class=\"chart\"";
  for (size_t at = svg.find(open); at != std::string::npos;) {
    const size_t next = svg.find(open, at + 1);
    const std::string part = svg.substr(at, next == std::string::npos ? std::string::npos : next - at);
    at = next;
    std::smatch m;
    if (!std::regex_search(part, m, std::regex("<g class=\"plot\"[^>]*>"))) {
      ADD_FAILURE() << "a chart without <g class=\"plot\">";
      continue;
    }
    const std::string g = m[0];
    const double x0 = attr(g, "data-x-min"), x1 = attr(g, "data-x-max"), y0 = attr(g, "data-y-min"),
                 y1 = attr(g, "data-y-max"), left = attr(g, "data-left"), right = attr(g, "data-right"),
                 top = attr(g, "data-top"), bottom = attr(g, "data-bottom");
    auto back = [&](double px, double py) {
      return point{x0 + (px - left) / (right - left) * (x1 - x0), y0 + (bottom - py) / (bottom - top) * (y1 - y0)};
    };
    chart c;
    const std::regex polyline("<polyline[^>]*>"), circle("<circle class=\"dot\"[^>]*>");
    for (auto it = std::sregex_iterator(part.begin(), part.end(), polyline); it != std::sregex_iterator(); ++it) {
      const std::string tag = (*it)[0];
      std::istringstream pts(text_attr(tag, "points"));
      auto& line = c.lines[text_attr(tag, "data-series")];
      double px, py;
      char comma;
      while (pts >> px >> comma >> py) line.push_back(back(px, py));
    }
    for (auto it = std::sregex_iterator(part.begin(), part.end(), circle); it != std::sregex_iterator(); ++it) {
      const std::string tag = (*it)[0];
      c.dots[text_attr(tag, "data-series")].push_back(back(attr(tag, "cx"), attr(tag, "cy")));
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The drawn points against the numbers: same count, same steps, values to 1e-2 relative (a
// floor of a thousandth of the span, for a zero such as the first step's samples/s).
void expect_drawn(const std::vector<point>& drawn, const std::vector<double>& xs, const std::vector<double>& ys,
                  const std::string& what) {
  ASSERT_EQ(drawn.size(), ys.size()) << what;
  double lo = INFINITY, hi = -INFINITY;
  for (double y : ys) lo = std::min(lo, y), hi = std::max(hi, y);
  for (size_t i = 0; i < ys.size(); ++i) {
    EXPECT_NEAR(drawn[i].x, xs[i], 1e-3) << what << " point " << i;
    EXPECT_NEAR(drawn[i].y, ys[i], 1e-2 * std::max(std::abs(ys[i]), 1e-3 * (hi - lo))) << what << " point " << i;
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double field(const std::string& line, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("\"" + name + "\": ([-+0-9.eE]+)"))) ADD_FAILURE() << name << " in " << line;
  return m.empty() ? NAN : std::stod(m[1]);
}

}  // namespace

TEST(RunCurves, DrawExactlyTheLoggedLossesAndThroughput) {
  // A resumed run (first step 100), a loss spike, a test loss per epoch, and a rate that varies.
  const std::vector<double> losses{2.31, 1.92, 1.40, 3.05, 0.87, 0.66, 0.52};
  const std::vector<double> rates{0.0, 31250.5, 32800.0, 29900.25, 33333.0, 34000.0, 12000.0};
  const std::vector<int64_t> test_steps{103, 107};
  const std::vector<double> test_losses{1.21, 0.58};
  const auto charts = read_charts(troupe::render_run_curves(100, losses, rates, test_steps, test_losses));
  ASSERT_EQ(charts.size(), 2u) << "the loss chart, then the throughput chart";
  const std::vector<double> steps{100, 101, 102, 103, 104, 105, 106};
  expect_drawn(charts[0].lines.at("training loss"), steps, losses, "training loss");
  expect_drawn(charts[0].lines.at("test loss"), {103, 107}, test_losses, "test loss line");
  expect_drawn(charts[0].dots.at("test loss"), {103, 107}, test_losses, "test loss dots");
  EXPECT_EQ(charts[0].lines.size(), 2u);
  expect_drawn(charts[1].lines.at("samples/s"), steps, rates, "samples/s");
  EXPECT_EQ(charts[1].lines.size(), 1u);
}

TEST(RunCurves, ATinyJobsCurvesSvgDrawsEveryStepAndEvaluationLineOfItsMetricsJsonl) {
  troupe::train_config cfg = troupe::test::tiny_config(troupe::test::mlp_setup(), "sgd");
  const std::filesystem::path dir = troupe::test_support::scratch_dir("run-curves");
  std::filesystem::remove_all(dir);
  cfg.out_dir = dir.string();
  const troupe::train_summary s = troupe::run_training(cfg);
  EXPECT_EQ(s.curves_path, (dir / "curves.svg").string());
  ASSERT_TRUE(std::filesystem::exists(dir / "curves.svg"));

  std::vector<double> steps, losses, rates, test_steps, test_losses;
  std::istringstream metrics(slurp((dir / "metrics.jsonl").string()));
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"test_loss\"") != std::string::npos) {
      test_steps.push_back(field(line, "step"));
      test_losses.push_back(field(line, "test_loss"));
    } else {
      steps.push_back(field(line, "step"));
      losses.push_back(field(line, "loss"));
      rates.push_back(field(line, "samples_per_s"));
    }
  }
  ASSERT_EQ(steps.size(), static_cast<size_t>(troupe::test::kSteps));
  ASSERT_FALSE(test_losses.empty());

  const auto charts = read_charts(slurp((dir / "curves.svg").string()));
  ASSERT_EQ(charts.size(), 2u);
  expect_drawn(charts[0].lines.at("training loss"), steps, losses, "training loss");
  expect_drawn(charts[0].dots.at("test loss"), test_steps, test_losses, "test loss");
  expect_drawn(charts[1].lines.at("samples/s"), steps, rates, "samples/s");
  std::filesystem::remove_all(dir);
}
