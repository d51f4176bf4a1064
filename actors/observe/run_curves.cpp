// run_curves: the summary's vectors as plot series, the step as the x of both charts so that
// they line up one above the other.
#include "actors/observe/run_curves.hpp"

#include "schedules/plot.hpp"

namespace troupe {

namespace {

std::vector<double> steps_from(int64_t first, size_t n) {
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(first + static_cast<int64_t>(i));
  return x;
}

}  // namespace

std::string render_run_curves(int64_t first_step, const std::vector<double>& losses,
                              const std::vector<double>& samples_per_s, const std::vector<int64_t>& test_steps,
                              const std::vector<double>& test_losses) {
  plot::series train{"training loss", steps_from(first_step, losses.size()), losses};
  plot::series test{"test loss", std::vector<double>(test_steps.begin(), test_steps.end()), test_losses};
  test.dots = true;
  plot::series rate{"samples/s", steps_from(first_step, samples_per_s.size()), samples_per_s};
  return plot::stack({plot::line_chart({"Loss", "step", "loss"}, {train, test}),
                      plot::line_chart({"Throughput", "step", "samples/s"}, {rate})});
}

}  // namespace troupe
