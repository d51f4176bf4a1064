// An actor of your own in a job's flow: it hears every rank's reduced gradients every step (here
// of a dp 2 x tp 2 MLP) and prints the gradient norm of the first replica's tp shards. The README
// quotes the part between the markers; ctest runs it.
#include <caf/all.hpp>

#include <cmath>
#include <cstdio>
#include <map>

#include "actors/run/training_job.hpp"
#include "actors/messages.hpp"

int main() {
  // [example:observe_gradients]
  auto norm_printer = [](caf::event_based_actor*) -> caf::behavior {
    auto seen = std::make_shared<std::map<int64_t, std::pair<double, int>>>();  // step -> (sum of squares, shards)
    return {[seen](const troupe::observed_gradients& g) {
      if (g.rank > 1) return;  // ranks 0 and 1: replica 0's two tp shards, in either order
      auto& [sum, shards] = (*seen)[g.step];
      for (int64_t i = 0; i < g.grads.numel(); ++i) sum += g.grads[i] * g.grads[i];
      if (++shards == 2) std::printf("step %lld: |grad| = %.4f\n", static_cast<long long>(g.step), std::sqrt(sum));
    }};
  };
  troupe::train_config cfg;
  cfg.mesh = {2, 1, 2};  // dp 2 x tp 2
  cfg.max_steps = 5;
  cfg.out_dir = "runs/example-observe";
  troupe::job_extras extras;
  extras.gradient_observers.push_back([&](caf::actor_system& sys) { return sys.spawn(norm_printer); });
  troupe::run_training(cfg, extras);
  // [example:observe_gradients]
}
