// A data-parallel job with one process per rank: run_training calls run_process_training when
// cfg.process.world > 1. Every rank derives the same data and sizes from the same config
// (prepare_job, shared with the single-process path in training_job.cpp). No CAF in this header.
#pragma once

#include <memory>
#include <string>

#include "actors/train_config.hpp"
#include "storage/dataset.hpp"

namespace troupe {

struct prepared_job {
  std::shared_ptr<const storage::dataset> train, eval;
  model_spec model;  // with the corpus's vocabulary filled in
  int64_t steps_per_epoch = 0, total_steps = 0, rows_per_sample = 1, num_params = 0;
};
// Loads the data and sizes the job (training_job.cpp). Throws std::invalid_argument.
prepared_job prepare_job(const train_config& cfg);

// What must be equal on every rank for the ranks to train one model: compared at join.
std::string describe_for_join(const train_config& cfg, const prepared_job& job);

// Rank 0 hosts the coordinator and writes metrics.jsonl; the other ranks write no metrics and
// return a summary without losses. Throws std::runtime_error with a report naming the lost rank
// and the step when the job stops early.
train_summary run_process_training(const train_config& cfg);

}  // namespace troupe
