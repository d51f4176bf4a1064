// Held-out evaluation follows the job's memory: a GPT's evaluation forward holds no more rows than
// its training step (not a fixed 1000 sequences), and the evaluated samples, hence the test loss,
// do not depend on how they are split into forward passes.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "actors/run/training_job.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/train_step.hpp"
#include "storage/dataset.hpp"

using namespace troupe;

namespace {

const char* kCorpus = "/usr/share/games/fortunes";

train_config gpt_config(const std::string& name) {
  train_config cfg;
  cfg.model.kind = model_kind::gpt;
  cfg.model.context = 16;
  cfg.model.channels = 32;
  cfg.model.heads = 2;
  cfg.model.blocks = 2;
  cfg.batch_size = 8;
  cfg.max_steps = 3;
  cfg.progress = false;
  cfg.out_dir = (std::filesystem::temp_directory_path() / ("troupe-eval-" + name + std::to_string(::getpid()))).string();
  return cfg;
}

}  // namespace

TEST(PlanEvaluation, GptPiecesHoldNoMoreRowsThanATrainingStep) {
  train_config cfg;
  cfg.model.kind = model_kind::gpt;
  cfg.batch_size = 16;
  cfg.eval_max_batches = 2;
  const eval_plan p = plan_evaluation(cfg, 50000, 64);  // context 64: 1024 rows per step
  EXPECT_EQ(p.samples, 2000);  // the same 2 x 1000 held-out sequences as before
  EXPECT_EQ(p.piece, 16);      // 1024 rows per forward, not 64,000
  EXPECT_EQ(p.pieces(), 125);
}

TEST(PlanEvaluation, MlpPiecesStayAThousandSamples) {
  train_config cfg;  // batch 128, one row per sample: the 1000-row floor applies
  const eval_plan p = plan_evaluation(cfg, 10000, 1);
  EXPECT_EQ(p.samples, 10000);
  EXPECT_EQ(p.piece, 1000);
  cfg.eval_batch_size = 300;
  cfg.eval_max_batches = 2;
  const eval_plan q = plan_evaluation(cfg, 10000, 1);
  EXPECT_EQ(q.samples, 600);
  EXPECT_EQ(q.piece, 300);
}

TEST(PlanEvaluation, AHeldOutSetSmallerThanTheLimitIsEvaluatedWhole) {
  train_config cfg;
  cfg.eval_max_batches = 5;
  EXPECT_EQ(plan_evaluation(cfg, 1234, 1).samples, 1234);
  EXPECT_EQ(plan_evaluation(cfg, 1234, 1).pieces(), 2);
}

// The same 210 held-out sequences in pieces of 62 (the row rule) and of 7, against one forward
// pass over all 210 with the final parameters (what the old fixed batch computed).
TEST(GptEvaluation, TestLossIsTheSameForEveryPieceSizeAndMatchesOneForwardPass) {
  if (!std::filesystem::exists(kCorpus)) GTEST_SKIP() << "fortunes corpus not installed";
  train_config a = gpt_config("a");
  a.eval_batch_size = 210;
  a.eval_max_batches = 1;
  train_config b = gpt_config("b");
  b.eval_batch_size = 7;
  b.eval_max_batches = 30;
  const train_summary ra = run_training(a), rb = run_training(b);
  ASSERT_EQ(ra.test_loss.size(), 1u);
  ASSERT_EQ(rb.test_loss.size(), 1u);
  EXPECT_NEAR(ra.test_loss[0], rb.test_loss[0], 1e-5 * ra.test_loss[0]);
  EXPECT_EQ(ra.test_accuracy[0], rb.test_accuracy[0]);

  auto corpus = storage::load_text_corpus(a.corpus_path, a.model.context);
  model_spec m = a.model;
  m.vocab = static_cast<int64_t>(corpus.vocab.size());
  layer_stack stack(build_layers(m), 0, a.seed);
  stack.load_params(ra.final_params);
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < 210; ++i) idx.push_back(i);
  const step_stats whole = evaluate(stack, corpus.validation->gather(idx));
  EXPECT_NEAR(ra.test_loss[0], whole.mean_loss(), 1e-5 * whole.mean_loss());
  EXPECT_EQ(ra.test_accuracy[0], static_cast<double>(whole.correct) / static_cast<double>(whole.count));
}
