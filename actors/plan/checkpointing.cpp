// Runs from layers and ZeRO pieces, a job's manifest fields, and the checks a resumed job makes
// before it starts.
#include "actors/plan/checkpointing.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"

namespace troupe {

std::vector<storage::value_run> chunk_runs(const layer_list& layers, const layer_range& r, int64_t local_at) {
  std::vector<storage::value_run> runs;
  int64_t global_at = 0;
  for (int64_t l = 0; l < r.begin; ++l) global_at += layers.at(static_cast<size_t>(l))->full_params();
  int64_t local = local_at;
  for (int64_t l = r.begin; l < r.end; ++l) {
    const layer& lay = *layers.at(static_cast<size_t>(l));
    if (lay.num_params() > 0)
      for (const param_run& run : lay.full_runs()) {
        runs.push_back({local, global_at + run.offset, run.count});
        local += run.count;
      }
    global_at += lay.full_params();
  }
  return storage::merge_runs(std::move(runs));
}

std::vector<storage::value_run> shard_runs(const std::vector<shard_piece>& pieces,
                                           const std::vector<std::vector<grad_bucket>>& buckets,
                                           const std::vector<int64_t>& chunk_at,
                                           const std::vector<storage::value_run>& stage) {
  std::vector<storage::value_run> to_stage;
  for (const shard_piece& p : pieces) {
    if (p.count == 0) continue;
    const grad_bucket& b = buckets.at(static_cast<size_t>(p.chunk)).at(p.bucket);
    to_stage.push_back({p.at_shard, chunk_at.at(static_cast<size_t>(p.chunk)) + b.offset + p.in_bucket, p.count});
  }
  return storage::compose_runs(to_stage, stage);
}

int64_t global_floats(const model_spec& model) {
  int64_t n = 0;
  for (const auto& l : build_layers(model)) n += l->full_params();
  return n;
}

std::vector<int64_t> flatten(const std::vector<storage::value_run>& runs) {
  std::vector<int64_t> out;
  out.reserve(runs.size() * 3);
  for (const auto& r : runs) out.insert(out.end(), {r.local, r.global, r.count});
  return out;
}

std::vector<storage::value_run> unflatten(const std::vector<int64_t>& t) {
  if (t.size() % 3 != 0) throw std::invalid_argument("runs: " + std::to_string(t.size()) + " numbers, not triples");
  std::vector<storage::value_run> out;
  for (size_t i = 0; i < t.size(); i += 3) out.push_back({t[i], t[i + 1], t[i + 2]});
  return out;
}

storage::checkpoint_manifest checkpoint_base(const train_config& cfg, const model_spec& model, int64_t steps_per_epoch,
                                             const std::string& vocabulary) {
  storage::checkpoint_manifest m;
  m.model = model;
  m.vocabulary = vocabulary;
  m.mesh = sched::to_string(cfg.mesh);
  m.zero = cfg.zero;
  m.offload = to_string(optimizer_offload(cfg));
  m.optimizer = to_string(cfg.optim.kind);
  const optimizer_config& o = cfg.optim;
  m.optimizer_config = fmt::format("lr {} weight_decay {} momentum {} beta1 {} beta2 {} eps {}", o.lr, o.weight_decay,
                                   o.momentum, o.beta1, o.beta2, o.eps);
  m.seed = cfg.seed;
  m.batch_size = cfg.batch_size;
  m.steps_per_epoch = steps_per_epoch;
  m.global_floats = global_floats(model);
  m.arrays = {"params"};
  for (auto& a : storage::optimizer_state_arrays(to_string(cfg.optim.kind), make_optimizer(cfg.optim, 0)->state_floats()))
    m.arrays.push_back(a);
  return m;
}

void resume_point::read(const std::string& array, const std::vector<storage::value_run>& wanted, float* out) const {
  if (image.empty()) return storage::read_values(dir, manifest, array, wanted, out);
  const auto at = std::find(manifest.arrays.begin(), manifest.arrays.end(), array);
  if (at == manifest.arrays.end()) throw std::runtime_error(where() + " holds no array \"" + array + "\"");
  const int64_t n = manifest.global_floats;
  if (image.numel() != n * static_cast<int64_t>(manifest.arrays.size()))
    throw std::runtime_error(fmt::format("{}: {} values for {} arrays of {}", where(), image.numel(), manifest.arrays.size(), n));
  const float* values = image.data() + (at - manifest.arrays.begin()) * n;
  for (const storage::value_run& r : wanted) {
    if (r.global < 0 || r.global + r.count > n)
      throw std::runtime_error(fmt::format("{}: run [{}, +{}) outside its {} values", where(), r.global, r.count, n));
    std::copy(values + r.global, values + r.global + r.count, out + r.local);
  }
}

std::string resume_point::where() const {
  return !image.empty() ? "the image of step " + std::to_string(manifest.step) + " in memory" : dir;
}

std::shared_ptr<const resume_point> open_resume(const train_config& cfg, const model_spec& model, int64_t total_steps,
                                                const std::string& vocabulary) {
  if (cfg.resume.empty()) return nullptr;
  if (cfg.resume == "auto") {  // a launcher's restart: the latest checkpoint when there is one
    std::error_code ec;
    if (!std::filesystem::is_directory(cfg.checkpoint_dir, ec) || storage::committed_checkpoints(cfg.checkpoint_dir).empty())
      return nullptr;
  }
  auto r = std::make_shared<resume_point>();
  const bool latest = cfg.resume == "latest" || cfg.resume == "auto";
  r->dir = storage::resolve_checkpoint(latest ? cfg.checkpoint_dir : cfg.resume);
  r->manifest = storage::read_manifest(r->dir);
  const storage::checkpoint_manifest& m = r->manifest;
  storage::check_compatible(m, r->dir, model, to_string(cfg.optim.kind));
  const storage::checkpoint_manifest job = checkpoint_base(cfg, model, 1, vocabulary);
  // The same number of characters from another corpus would train on as if nothing had changed,
  // every token id now another character.
  if (!m.vocabulary.empty() && !vocabulary.empty() && m.vocabulary != vocabulary) {
    auto shown = [](const std::string& chars) {  // one line: the newline character as \n
      std::string out;
      for (char c : chars) out += c == '\n' ? std::string("\\n") : std::string(1, c);
      return "\"" + out + "\"";
    };
    throw std::runtime_error(r->dir + ": saved with the characters " + shown(m.vocabulary) + " and this corpus has " +
                             shown(vocabulary) + ": each token would stand for another character (resume on the corpus "
                             "it was trained on)");
  }
  if (m.arrays != job.arrays)
    throw std::runtime_error(r->dir + ": it holds " + fmt::format("{}", fmt::join(m.arrays, ", ")) + "; this job's " +
                             to_string(cfg.optim.kind) + " keeps " + fmt::format("{}", fmt::join(job.arrays, ", ")) +
                             " (momentum on or off changes the state)");
  if (m.global_floats != job.global_floats)
    throw std::runtime_error(r->dir + ": " + std::to_string(m.global_floats) + " parameters, this job's model has " +
                             std::to_string(job.global_floats));
  if (m.batch_size != cfg.batch_size || m.seed != cfg.seed)
    spdlog::warn("{}: saved with batch {} and seed {}, resumed with batch {} and seed {}: the sampler goes on from step "
                 "{} in another order than the saved run's",
                 r->dir, m.batch_size, m.seed, cfg.batch_size, cfg.seed, m.step);
  if (m.step >= total_steps)
    throw std::runtime_error(r->dir + ": saved after step " + std::to_string(m.step) + ", and this job ends at step " +
                             std::to_string(total_steps) + ": nothing left to train (raise --epochs or --max-steps)");
  if (cfg.process.index == 0)
    spdlog::info("resumed from {}: steps {} to {} are left to train", r->dir, m.step, total_steps - 1);
  return r;
}

}  // namespace troupe
