// Checkpoints on disk: raw shard files, each written by its owner through an io_uring store and
// fsync'd, and a Cap'n Proto manifest (checkpoint.capnp) written last. Layout under a root:
//   ROOT/step-00000012/manifest.capnp + shard files   a committed checkpoint
//   ROOT/step-00000012.partial/                        one being written (never loaded)
//   ROOT/latest                                        the name of the newest committed one
// A checkpoint becomes visible by the fsync'd rename of its directory, and `latest` moves by an
// fsync'd rename too, so a crash at any moment leaves every committed checkpoint loadable.
// Values are in the job's global layout (checkpoint_plan.hpp), so any mesh loads any checkpoint.
// No CAF: the actors call these from their own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/model.hpp"
#include "storage/checkpoint_plan.hpp"
#include "storage/uring_store.hpp"

namespace troupe::storage {

inline constexpr uint32_t checkpoint_format_version = 1;

struct checkpoint_section {
  std::string array;
  int64_t byte_offset = 0;
  int64_t floats = 0;
  uint32_t crc32 = 0;
  std::string dtype = "f32";
};

struct checkpoint_file {
  std::string name;    // relative to the checkpoint's directory
  int64_t bytes = 0;   // the file's size
  std::string writer;  // e.g. "rank 3 (dp 1, pp 1)"
  std::vector<checkpoint_section> sections;
  std::vector<value_run> runs;  // the same for every section
};

struct checkpoint_manifest {
  uint32_t format_version = checkpoint_format_version;
  model_spec model;
  std::string mesh;
  int zero = 0;
  std::string offload = "none";
  int64_t step = 0;             // steps completed
  int64_t optimizer_steps = 0;
  std::string optimizer;        // "adamw" or "sgd"
  std::string optimizer_config;
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t steps_per_epoch = 0;
  int64_t global_floats = 0;
  std::vector<std::string> arrays;  // "params", then the optimizer's state arrays
  std::vector<checkpoint_file> files;
  // The GPT's characters in token order (text_corpus::vocab), so an exported model's outputs can be
  // decoded and a resume on another corpus refused; empty for the MLP (and in a GPT checkpoint written
  // before troupe saved it).
  std::string vocabulary;
};

// A manifest that contradicts itself or the model it names (edited, damaged, or not written by
// troupe): refused before any value is read. `troupe export` exits 2 on it.
struct bad_manifest : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The names of an optimizer's state arrays, PyTorch's: AdamW exp_avg, exp_avg_sq; SGD
// momentum_buffer (state_floats 1) or none.
std::vector<std::string> optimizer_state_arrays(const std::string& optimizer, int state_floats);

// Where the I/O goes, and a hook the crash tests use: called with the name of each point after
// which a crash must leave the previous checkpoint loadable ("shard written", "manifest synced", ...).
struct checkpoint_io {
  uring_options uring;
  std::function<void(const std::string& point)> at_write_point;
};

std::string checkpoint_dir_name(int64_t step);  // "step-00000012"

// Makes ROOT/step-N.partial (and ROOT), removing a stale one a crash left; returns its path.
std::string begin_checkpoint(const std::string& root, int64_t step);

// Writes one shard file into the partial directory `dir`: arrays[j] points at `floats` values
// (section j, named names[j]), each at a 4096-aligned offset; fsyncs it. Returns its manifest
// entry with the sections' CRC-32. Throws std::runtime_error naming the file (a full disk).
checkpoint_file write_shard_file(const std::string& dir, const std::string& name, const std::string& writer,
                                 const std::vector<std::string>& names, const std::vector<const float*>& arrays,
                                 int64_t floats, std::vector<value_run> runs, const checkpoint_io& io = {});

// Commits: checks that the files cover every array's global floats, writes and fsyncs the
// manifest, renames ROOT/step-N.partial to ROOT/step-N, fsyncs ROOT, points `latest` at it, and
// then (keep > 0) removes the oldest committed checkpoints beyond `keep`. Returns the directory.
// Throws std::runtime_error (the partial directory stays; nothing committed is touched).
std::string commit_checkpoint(const std::string& root, const checkpoint_manifest& m, int keep,
                              const checkpoint_io& io = {});

// A committed checkpoint's directory from ROOT (its `latest`), ROOT/step-N, or a path to a
// manifest. Throws std::runtime_error naming what is missing.
std::string resolve_checkpoint(const std::string& path);
// The committed checkpoints under ROOT, oldest first (by step).
std::vector<std::string> committed_checkpoints(const std::string& root);

// Reads and checks a manifest: its format version (a newer one is refused, naming both), its
// fields, and that every shard file exists with the size it was written with. Throws
// std::runtime_error naming the file and the problem.
checkpoint_manifest read_manifest(const std::string& dir);

// Refuses (std::runtime_error naming the checkpoint and both values) a manifest whose model is
// not `model`, or whose optimizer is another kind.
void check_compatible(const checkpoint_manifest& m, const std::string& dir, const model_spec& model,
                      const std::string& optimizer);

// Fills out[r.local + i] with global float r.global + i of `array`, for every wanted run, from the
// files plan_reads picks. Every section it reads from is read whole and its CRC-32 checked; a
// mismatch throws std::runtime_error naming the file and the array.
void read_values(const std::string& dir, const checkpoint_manifest& m, const std::string& array,
                 const std::vector<value_run>& wanted, float* out, const checkpoint_io& io = {});

}  // namespace troupe::storage
