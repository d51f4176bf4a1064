// run_curves: <out>/curves.svg, what metrics.jsonl holds, drawn for a reader who would rather look
// than read. Two charts in one SVG (plot::stack): the training loss of every step ("training
// loss") and the test loss of every evaluation ("test loss", dotted: a run of one epoch has one)
// against the step; below, the samples/s logged with every step ("samples/s"). Each chart carries
// plot's data-to-pixel attributes, so its points can be read back as the logged numbers. No I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

// losses[i] and samples_per_s[i] are of step first_step + i; test_losses[k] was taken when
// test_steps[k] steps were done (the "step" of metrics.jsonl's evaluation line).
std::string render_run_curves(int64_t first_step, const std::vector<double>& losses,
                              const std::vector<double>& samples_per_s, const std::vector<int64_t>& test_steps,
                              const std::vector<double>& test_losses);

}  // namespace troupe
