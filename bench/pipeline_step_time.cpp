// Pipeline step time against the ideal: 1F1B and GPipe at P = 2 (one pinned core per stage),
// M = 8, on an MLP 784-512x4-10 with a global batch of 256 synthetic samples. The ideal is the
// sum of the stages' compute (forward and backward actions, measured in the same run) divided by
// P; the table also shows the bubble measured and simulated (calibrated from the same run) and
// a one-stage run of the same microbatches. Medians over the measured steps. Run by hand.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "schedules/named.hpp"
#include "actors/pipeline_job.hpp"
#include "actors/pipeline_timing.hpp"
#include "kernels/blas_runtime.hpp"
#include "storage/dataset.hpp"

namespace {

using namespace troupe;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct row {
  double step = 0, ideal = 0, compute = 0, bubble = 0, simulated_step = 0, simulated_bubble = 0;
};

row measure(const std::string& schedule, int P, int M, int steps, const pipeline_job_args& base) {
  pipeline_job_args a = base;
  a.plan = sched::make_named_schedule(schedule, P, M, 1);
  a.pin_threads = true;
  pipeline_job job(a);
  std::vector<sched::timeline> kept;
  const int warmup = 2;
  for (int s = 0; s < warmup + steps; ++s) {
    auto r = job.run_step(s);
    if (s >= warmup) kept.push_back(std::move(r.measured));
  }
  std::vector<double> step, compute, bubble;
  for (const auto& t : kept) {
    step.push_back(sched::end_seconds(t));
    double c = 0;
    for (const auto& lane : t.stages)
      for (const auto& e : lane)
        if (sched::is_compute(e.what.kind)) c += e.end_seconds - e.start_seconds;
    compute.push_back(c);
    bubble.push_back(measure_bubble(t).bubble_fraction);
  }
  const auto sim = sched::simulate(a.plan, calibrate_costs(a.plan, kept));
  row r;
  r.step = median(step);
  r.compute = median(compute);
  r.ideal = r.compute / P;
  r.bubble = median(bubble);
  r.simulated_step = sim.makespan_seconds;
  r.simulated_bubble = sim.bubble_fraction;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  set_blas_threads(1);
  std::printf("OpenBLAS core: %s\n", blas_core_name().c_str());
  pipeline_job_args a;
  a.model.hidden = {512, 512, 512, 512};
  a.optim.kind = "sgd";
  a.optim.lr = 0.01f;
  a.batch_size = 256;
  a.total_steps = steps + 2;
  const int64_t n = a.batch_size * a.total_steps;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> px;
  std::vector<float> pixels(static_cast<size_t>(n * 784));
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  a.train = std::make_shared<storage::image_dataset>("synthetic", 784, std::move(pixels), std::move(labels));

  std::printf("MLP 784-512x4-10, batch 256, M = 8, median of %d steps\n", steps);
  std::printf("%-16s %10s %10s %12s %9s %9s %10s\n", "schedule", "step ms", "ideal ms", "step/ideal", "bubble",
              "sim bub.", "sim ms");
  for (const auto& [name, P] : std::vector<std::pair<std::string, int>>{{"gpipe", 1}, {"1f1b", 2}, {"gpipe", 2}}) {
    const row r = measure(name, P, 8, steps, a);
    std::printf("%-16s %10.2f %10.2f %12.3f %8.1f%% %8.1f%% %10.2f\n",
                (name + " P=" + std::to_string(P)).c_str(), r.step * 1e3, r.ideal * 1e3, r.step / r.ideal,
                r.bubble * 100, r.simulated_bubble * 100, r.simulated_step * 1e3);
  }
  return 0;
}
