// What a job saves and resumes, in the checkpoint's terms (storage/checkpoint.hpp): where each
// rank's values sit in the global layout (the unsplit model's flat parameters in layer order),
// the manifest's fields a job fills in, and the checkpoint a job resumes from, checked against
// the job before anything starts. No CAF: the stage, the optimizer shard and the coordinator use it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/config/train_config.hpp"
#include "actors/plan/dp_buckets.hpp"
#include "kernels/layer.hpp"
#include "kernels/partition.hpp"
#include "storage/checkpoint.hpp"

namespace troupe {

// The runs of layers r of `layers` (this rank's tp share of the whole model) whose parameters sit
// at `local_at` of a buffer, layer after layer: a split layer's runs land where its values sit in
// the unsplit layer, so every tp rank maps into the same global layout.
std::vector<storage::value_run> chunk_runs(const layer_list& layers, const layer_range& r, int64_t local_at);

// A ZeRO shard's runs: piece p (dp_buckets.hpp) holds chunk p.chunk's floats from bucket offset +
// in_bucket, chunk c's floats sit at chunk_at[c] of the stage's runs `stage`.
std::vector<storage::value_run> shard_runs(const std::vector<shard_piece>& pieces,
                                           const std::vector<std::vector<grad_bucket>>& buckets,
                                           const std::vector<int64_t>& chunk_at,
                                           const std::vector<storage::value_run>& stage);

// Floats of each global array: the unsplit model's parameters.
int64_t global_floats(const model_spec& model);

std::vector<int64_t> flatten(const std::vector<storage::value_run>& runs);     // (local, global, count) triples
std::vector<storage::value_run> unflatten(const std::vector<int64_t>& triples);  // throws std::invalid_argument

// A job's checkpoints: the manifest's fields that do not come from the shards' files.
storage::checkpoint_manifest checkpoint_base(const train_config& cfg, const model_spec& model, int64_t steps_per_epoch,
                                             const std::string& vocabulary);

// The checkpoint a job continues from: resolved (a root's latest, a step directory, or "latest"
// for checkpoint_dir), its manifest read and its files checked, and refused (std::runtime_error
// naming the checkpoint) when its model or optimizer is not the job's, its state arrays are not
// the ones this optimizer keeps, a GPT's characters are not its corpus's, or it is at or past the
// job's last step.
// An elastic job's regroup (membership.hpp) continues from an image instead: the global arrays
// gathered from the live optimizer shards, in memory, read through the same runs.
struct resume_point {
  std::string dir;  // the checkpoint; empty for an image
  storage::checkpoint_manifest manifest;  // an image's: its step, optimizer steps and arrays, no files
  // The image's arrays back to back, global_floats values each, in manifest.arrays's order;
  // frozen, so a job_end carries it to the other processes without a copy. Empty: a checkpoint.
  tensor image;
  // `array`'s values at `wanted`'s global places into out (at their local places).
  void read(const std::string& array, const std::vector<storage::value_run>& wanted, float* out) const;
  std::string where() const;  // the checkpoint's folder, or "the image of step N in memory"
};
std::shared_ptr<const resume_point> open_resume(const train_config& cfg, const model_spec& model, int64_t total_steps,
                                                const std::string& vocabulary);

}  // namespace troupe
