// Step time of a mesh against the ideal and against the simulator's prediction: 1F1B and GPipe at
// P = 2 (one pinned core per stage), M = 8, data parallel and DP x PP, on an MLP 784-512x4-10
// with a global batch of 256 synthetic samples. The ideal is the sum of the first replica's
// stages' compute (forward and backward actions, measured in the same run) divided by P; the
// prediction simulates the same schedule with costs calibrated from the same run. Medians over
// the measured steps. Run by hand (bench/run_all.sh).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include <spdlog/spdlog.h>

#include "schedules/named.hpp"
#include "actors/run/training_job.hpp"
#include "actors/observe/pipeline_timing.hpp"
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

row measure(const std::string& schedule, int dp, int P, int M, int steps, train_config c) {
  c.mesh.dp = dp;
  c.mesh.pp = P;
  c.schedule = schedule;
  c.micro_batches = M;
  c.pin_threads = true;
  c.max_steps = steps + 2;
  const sched::schedule plan = sched::make_named_schedule(schedule, P, M, 1);
  const train_summary run = run_training(c);
  const std::vector<sched::timeline> kept(run.recent.end() - std::min<long>(steps, static_cast<long>(run.recent.size())),
                                          run.recent.end());
  std::vector<double> step, compute, bubble;
  for (const auto& t : kept) {
    step.push_back(sched::end_seconds(t));
    double sum = 0;
    for (const auto& lane : t.stages)
      for (const auto& e : lane)
        if (sched::is_compute(e.what.kind)) sum += e.end_seconds - e.start_seconds;
    compute.push_back(sum);
    bubble.push_back(measure_bubble(t).bubble_fraction);
  }
  const auto sim = sched::simulate(plan, calibrate_costs(plan, kept));
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
  train_config a;
  a.model.hidden = {512, 512, 512, 512};
  a.optim.kind = optimizer_kind::sgd;
  a.optim.lr = 0.01f;
  a.batch_size = 256;
  a.epochs = 1;
  a.progress = false;
  a.eval_max_batches = 1;
  a.eval_batch_size = 256;
  a.out_dir = "/tmp/troupe-bench-pipeline";
  const int64_t n = a.batch_size * (steps + 2);
  std::mt19937_64 rng(1);
  std::normal_distribution<float> px;
  std::vector<float> pixels(static_cast<size_t>(n * 784));
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 10);
  a.train_data = std::make_shared<storage::image_dataset>("synthetic", 784, std::move(pixels), std::move(labels));
  spdlog::set_level(spdlog::level::warn);

  std::printf("MLP 784-512x4-10, batch 256, M = 8, median of %d steps\n", steps);
  std::printf("%-22s %10s %10s %12s %9s %9s %10s %12s\n", "mesh, schedule", "step ms", "ideal ms", "step/ideal",
              "bubble", "sim bub.", "sim ms", "step/sim");
  struct job { std::string name; int dp, P; };
  for (const auto& j : std::vector<job>{{"gpipe", 1, 1}, {"1f1b", 1, 2}, {"gpipe", 1, 2}, {"1f1b", 2, 1}, {"1f1b", 2, 2}}) {
    const row r = measure(j.name, j.dp, j.P, 8, steps, a);
    std::printf("%-22s %10.2f %10.2f %12.3f %8.1f%% %8.1f%% %10.2f %12.3f\n",
                ("dp" + std::to_string(j.dp) + " pp" + std::to_string(j.P) + " " + j.name).c_str(), r.step * 1e3,
                r.ideal * 1e3, r.step / r.ideal, r.bubble * 100, r.simulated_bubble * 100, r.simulated_step * 1e3,
                r.step / r.simulated_step);
  }
  return 0;
}
