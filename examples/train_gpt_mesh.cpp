// A GPT trained over a dp x pp x tp mesh from C++: 8 ranks in this process (2 replicas, each a
// 2-stage 1F1B pipeline whose stages are split over 2 tensor-parallel ranks). The README quotes
// the part between the markers; ctest runs it, and it fails unless the loss went down.
#include <cstdio>

#include "actors/run/training_job.hpp"

int main() {
  // [example:train_gpt_mesh]
  troupe::train_config cfg;
  cfg.model.kind = troupe::model_kind::gpt;  // character level, on the default corpus
  cfg.model.context = 32;
  cfg.model.channels = 64;
  cfg.model.heads = 4;
  cfg.mesh = {2, 2, 2};    // dp 2 x pp 2 x tp 2
  cfg.schedule = "1f1b";
  cfg.micro_batches = 4;
  cfg.optim.kind = troupe::optimizer_kind::adamw;
  cfg.optim.lr = 3e-3f;
  cfg.batch_size = 16;
  cfg.max_steps = 40;
  cfg.out_dir = "runs/example-gpt-mesh";
  troupe::train_summary s = troupe::run_training(cfg);
  std::printf("loss %.3f -> %.3f over %lld steps\n", s.losses.front(), s.losses.back(),
              static_cast<long long>(s.steps));
  // [example:train_gpt_mesh]
  return s.losses.back() < s.losses.front() ? 0 : 1;
}
