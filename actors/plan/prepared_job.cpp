// prepare_job: dataset loading, job sizing and the BLAS set-up shared by every training path.
#include "actors/plan/prepared_job.hpp"

#include <filesystem>

#include <spdlog/spdlog.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <stdexcept>

#include "kernels/blas_runtime.hpp"
#include "kernels/gemm_library.hpp"
#include "kernels/parallel.hpp"
#include "storage/output_file.hpp"

namespace troupe {

namespace {

void load_data(const train_config& cfg, prepared_job& p) {
  if (cfg.train_data) {
    p.train = cfg.train_data;
    p.eval = cfg.eval_data ? cfg.eval_data : cfg.train_data;
  } else if (cfg.model.kind == model_kind::mlp) {
    auto fm = storage::load_fashion_mnist(cfg.fashion_mnist_dir);
    if (p.model.inputs != fm.train->features())
      throw std::invalid_argument("model.inputs is " + std::to_string(p.model.inputs) +
                                  " but Fashion-MNIST images have " + std::to_string(fm.train->features()) + " pixels");
    p.train = fm.train;
    p.eval = fm.test;
  } else {
    auto corpus = storage::load_text_corpus(cfg.corpus_path, cfg.model.context);
    const auto vocab = static_cast<int64_t>(corpus.vocab.size());
    if (p.model.vocab != 0 && p.model.vocab != vocab)
      throw std::invalid_argument("model.vocab is " + std::to_string(p.model.vocab) + " but the corpus has " +
                                  std::to_string(vocab) + " distinct characters (leave it 0 to take the corpus's)");
    p.model.vocab = vocab;
    p.vocabulary = corpus.vocab;
    p.train = corpus.train;
    p.eval = corpus.validation;
  }
  validate(p.model);
}

int64_t count_params(const model_spec& spec) {
  int64_t n = 0;
  for (const auto& l : build_layers(spec)) n += l->num_params();
  return n;
}

}  // namespace

prepared_job prepare_job(const train_config& cfg) {
  const gemm_choice& gemm = chosen_gemm_library();  // a bad TROUPE_GEMM stops the job here, named
  // Every process writes its shard of a checkpoint: a folder it cannot write is bad input, found
  // now rather than at the first save, steps into training.
  if (!cfg.checkpoint_dir.empty()) storage::check_writable_folder(cfg.checkpoint_dir, "--checkpoint-dir");
  // A file flag's folder is the user's to make: a missing one is refused, never created.
  if (!cfg.metrics_prom.empty()) storage::check_output_path(cfg.metrics_prom, "--metrics-prom");
  prepared_job p;
  p.model = cfg.model;
  load_data(cfg, p);
  p.steps_per_epoch = p.train->size() / cfg.batch_size;
  if (p.steps_per_epoch == 0)
    throw std::invalid_argument("batch_size " + std::to_string(cfg.batch_size) + " is larger than the " +
                                std::to_string(p.train->size()) + " training samples");
  p.total_steps = p.steps_per_epoch * cfg.epochs;
  if (cfg.max_steps > 0) p.total_steps = std::min(p.total_steps, cfg.max_steps);
  p.rows_per_sample = cfg.model.kind == model_kind::gpt ? p.model.context : 1;
  p.num_params = count_params(p.model);
  const blas_kernels& k = ensure_blas_kernels();
#if defined(__GLIBC__)
  // Every step frees its activations and allocates the same sizes again (MiBs each). glibc gave
  // them back to the kernel (mmap above its threshold, heap trimming below), so every step
  // faulted them in afresh: a quarter of a GPT step's time was the kernel zeroing pages. Blocks
  // up to 4 MiB (a GPT's activations) now come from the heap, and freed heap stays in the process
  // for the next step; larger ones (ZeRO's and offload's buffers) are still mapped and returned,
  // so offloading still lowers the resident memory (tests/cli/offload_memory.test.sh).
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
  // Each rank's stage (and optimizer shard) computes on cfg.threads threads of its own, GEMMs
  // included (kernels/parallel.hpp); OpenBLAS's own threads would split a GEMM by their count.
  set_blas_threads(1);
  set_kernel_threads(cfg.threads);
  if (k.loaded != k.running)
    spdlog::info("OpenBLAS kernels {} (OpenBLAS chose {} on this CPU), {} thread(s); GEMMs on {} ({})", k.running,
                 k.loaded, cfg.threads, describe_gemm_library(gemm_library_in_use()), gemm.reason);
  else
    spdlog::info("OpenBLAS kernels {}, {} thread(s); GEMMs on {} ({})", k.running, cfg.threads,
                 describe_gemm_library(gemm_library_in_use()), gemm.reason);
  return p;
}

}  // namespace troupe
