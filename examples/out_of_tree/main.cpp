// A program outside troupe's tree, built against its installed package (CMakeLists.txt here):
// trains a small MLP for a few steps on rows it makes up, so it needs no data set, and prints
// each step's loss. Built in the tree too, so the install test can compare the two runs.
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "actors/run/training_job.hpp"
#include "storage/dataset.hpp"

int main(int argc, char** argv) {
  // Two classes of 8 features: the sign of the first feature decides.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> rows(256 * 8);
  std::vector<int32_t> labels(256);
  for (size_t i = 0; i < labels.size(); ++i) {
    for (size_t j = 0; j < 8; ++j) rows[i * 8 + j] = normal(rng);
    labels[i] = rows[i * 8] > 0 ? 1 : 0;
  }
  troupe::train_config cfg;
  cfg.model.inputs = 8;
  cfg.model.hidden = {16};
  cfg.model.classes = 2;
  cfg.optim.lr = 1e-2f;
  cfg.batch_size = 32;
  cfg.max_steps = 5;
  cfg.eval_batch_size = 64;
  cfg.eval_max_batches = 1;
  cfg.progress = false;
  cfg.out_dir = argc > 1 ? argv[1] : "runs/out_of_tree";
  cfg.train_data = std::make_shared<troupe::storage::image_dataset>("synthetic", 8, std::move(rows), std::move(labels));
  const troupe::train_summary s = troupe::run_training(cfg);
  for (size_t i = 0; i < s.losses.size(); ++i) std::printf("step %zu loss %.6f\n", i, s.losses[i]);
  return !s.losses.empty() && s.losses.back() < s.losses.front() ? 0 : 1;
}
