// A user-written pipeline schedule running through validate -> simulate -> execute with no
// change to the runtime: "two-wave GPipe", a GPipe whose warm-up is half the microbatches (each
// wave of M/2 is a full GPipe), so every stage holds M/2 activations instead of M. The README
// quotes the part between the markers; ctest runs it, and it fails if the pipeline's losses
// differ from plain GPipe's on the same data (they must be the same numbers).
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "actors/run/training_job.hpp"
#include "schedules/builders.hpp"
#include "schedules/passes.hpp"
#include "schedules/render.hpp"
#include "schedules/simulate.hpp"
#include "schedules/validate.hpp"
#include "storage/dataset.hpp"

namespace {

// [example:custom_schedule]
// A schedule is plain data: per stage, the ordered compute actions (forward, backward).
troupe::sched::schedule two_wave_gpipe(int stages, int microbatches) {
  using namespace troupe::sched;
  schedule s;
  s.name = "two_wave_gpipe";
  s.num_stages = stages;
  s.num_microbatches = microbatches;
  s.stages.resize(static_cast<size_t>(stages));
  const int half = (microbatches + 1) / 2;
  for (int d = 0; d < stages; ++d)
    for (int begin : {0, half}) {  // two waves, each a GPipe: all forwards, then all backwards
      const int end = begin == 0 ? half : microbatches;
      for (int m = begin; m < end; ++m) s.stages[d].push_back(action{d, op::forward, m});
      for (int m = begin; m < end; ++m) s.stages[d].push_back(action{d, op::backward, m});
    }
  return s;
}

// validate -> simulate -> execute, as for the built-in schedules: the job runs it on a
// dp x pp mesh like any named schedule.
std::vector<double> run(const troupe::sched::schedule& compute_only, troupe::train_config job) {
  using namespace troupe;
  job.user_schedule = sched::complete(compute_only);  // add send/recv and the optimizer step
  const sched::validation check = sched::validate(job.user_schedule);
  if (!check.ok()) throw std::invalid_argument(check.error);
  const sched::simulation sim = sched::simulate(job.user_schedule, sched::uniform_costs(1, 2, 1, 1));
  std::printf("%s: simulated bubble %.1f%%, peak live activations per stage:", job.user_schedule.name.c_str(),
              sim.bubble_fraction * 100);
  for (int a : sim.peak_live_activations) std::printf(" %d", a);
  std::printf("\n");
  job.mesh.pp = compute_only.num_stages;
  return run_training(job).losses;
}
// [example:custom_schedule]

std::shared_ptr<const troupe::storage::dataset> synthetic_images(int64_t n, int64_t features) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> px;
  std::vector<float> pixels(static_cast<size_t>(n * features));
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(i % 4);
  return std::make_shared<troupe::storage::image_dataset>("synthetic", features, std::move(pixels), std::move(labels));
}

}  // namespace

int main() {
  troupe::train_config job;
  job.model.inputs = 16;
  job.model.hidden = {32, 32, 32};
  job.model.classes = 4;
  job.optim.kind = troupe::optimizer_kind::adamw;
  job.optim.lr = 1e-2f;
  job.batch_size = 32;
  job.epochs = 1;
  job.max_steps = 10;
  job.train_data = synthetic_images(job.batch_size * job.max_steps, job.model.inputs);
  job.eval_max_batches = 1;
  job.eval_batch_size = 32;
  job.progress = false;
  job.mesh.dp = 2;  // two replicas of the 4-stage pipeline: 8 ranks
  job.out_dir = "/tmp/troupe-custom-schedule";
  try {
    const auto custom = run(two_wave_gpipe(4, 8), job);
    const auto gpipe = run(troupe::sched::gpipe(4, 8), job);
    double worst = 0;
    for (size_t i = 0; i < custom.size(); ++i) worst = std::max(worst, std::abs(custom[i] - gpipe[i]));
    std::printf("loss after %zu steps: %.5f (two-wave) vs %.5f (gpipe), largest difference %.2g\n", custom.size(),
                custom.back(), gpipe.back(), worst);
    return worst <= 1e-6 * std::abs(gpipe.front()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_schedule: %s\n", e.what());
    return 1;
  }
}
