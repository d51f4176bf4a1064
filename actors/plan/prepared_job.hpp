// prepared_job: the data and the sizes of a training job, derived from its train_config alone,
// so the single-device, data-parallel, pipeline and multi-process paths (and every rank of a
// multi-process job) load and size it the same way. No CAF in this header.
#pragma once

#include <memory>

#include "actors/config/train_config.hpp"
#include "storage/dataset.hpp"

namespace troupe {

struct prepared_job {
  std::shared_ptr<const storage::dataset> train, eval;
  model_spec model;  // with the corpus's vocabulary filled in
  std::string vocabulary;  // the GPT's characters in token order (empty for the MLP and for data given in train_config)
  int64_t steps_per_epoch = 0, total_steps = 0, rows_per_sample = 1, num_params = 0;
};

// Loads the data (Fashion-MNIST for the MLP, the text corpus for the GPT) and sizes the job.
// Throws std::invalid_argument for a config that does not fit its data, std::runtime_error for a
// missing or corrupt dataset (naming the file).
prepared_job prepare_job(const train_config& cfg);

}  // namespace troupe
