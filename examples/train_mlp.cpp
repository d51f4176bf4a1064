// The smallest program that trains with troupe's actor runtime from C++: describe the job in a
// train_config, call run_training, read the summary. The README quotes the part between the
// markers; CMake builds it and ctest runs it, so the quote always compiles and works.
#include <cstdio>

#include "actors/run/training_job.hpp"

int main(int argc, char** argv) {
  // [example:train_mlp]
  troupe::train_config cfg;
  cfg.model.kind = troupe::model_kind::mlp;
  cfg.model.hidden = {512, 256};        // 784-512-256-10
  cfg.optim.kind = troupe::optimizer_kind::adamw;
  cfg.optim.lr = 1e-3f;
  cfg.batch_size = 128;
  cfg.epochs = 1;
  cfg.out_dir = "runs/example";
  troupe::train_summary s = troupe::run_training(cfg);
  std::printf("%lld steps, %.0f samples/s, test accuracy %.4f\n", static_cast<long long>(s.steps),
              s.samples_per_s, s.test_accuracy.back());
  // [example:train_mlp]
  (void)argc, (void)argv;
  return s.test_accuracy.back() > 0.80 ? 0 : 1;
}
