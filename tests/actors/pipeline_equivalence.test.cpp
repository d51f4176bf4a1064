// Pipeline training equals single-device training with gradient accumulation over the same M
// microbatches: every builder, P in {2, 4}, M in {4, 8}, an MLP and a GPT, 20 steps. Each run
// also shows the runtime executed exactly its schedule's lists and held exactly the live
// activations validate() predicts. Models and data are tiny and synthetic to keep CI fast.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "schedules/named.hpp"
#include "actors/pipeline_job.hpp"
#include "kernels/train_step.hpp"
#include "schedules/validate.hpp"
#include "storage/dataset.hpp"
#include "storage/sampler.hpp"

using namespace troupe;

namespace {

constexpr int64_t kSteps = 20;

struct setup {
  model_spec model;
  std::shared_ptr<const storage::dataset> data;
  int64_t batch = 0;
  int64_t rows_per_sample = 1;
};

// 9 layers each, so P = 4 with 2 virtual stages still gets one layer per chunk.
setup mlp_setup() {
  setup s;
  s.model.kind = "mlp";
  s.model.inputs = 12;
  s.model.hidden = {16, 16, 16, 16};
  s.model.classes = 5;
  s.batch = 16;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> px;
  std::uniform_int_distribution<int32_t> label(0, 4);
  const int64_t n = s.batch * kSteps;
  std::vector<float> pixels(static_cast<size_t>(n * s.model.inputs));
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (auto& l : labels) l = label(rng);
  s.data = std::make_shared<storage::image_dataset>("synthetic", s.model.inputs, std::move(pixels), std::move(labels));
  return s;
}

setup gpt_setup() {
  setup s;
  s.model.kind = "gpt";
  s.model.vocab = 11;
  s.model.context = 6;
  s.model.channels = 8;
  s.model.heads = 2;
  s.model.blocks = 6;
  s.batch = 8;
  s.rows_per_sample = s.model.context;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> tok(0, 10);
  std::vector<int32_t> tokens(static_cast<size_t>(s.batch * kSteps * (s.model.context + 1) + 1));
  for (auto& t : tokens) t = tok(rng);
  s.data = std::make_shared<storage::text_dataset>("synthetic", std::move(tokens), s.model.context);
  return s;
}

optimizer_config adamw() {
  optimizer_config o;
  o.kind = "adamw";
  o.lr = 1e-2f;
  return o;
}

struct reference {
  std::vector<double> losses;
  tensor params;
};

// One stack, M microbatches per step with gradients accumulated, then the optimizer.
reference train_single_device(const setup& s, int M) {
  layer_stack stack(build_layers(s.model), 0, 42);
  auto opt = make_optimizer(adamw(), stack.num_params());
  storage::sampler sampler(s.data->size(), s.batch, 42);
  const float scale = 1.0f / static_cast<float>(s.batch * s.rows_per_sample);
  reference r;
  for (int64_t step = 0; step < kSteps; ++step) {
    const int64_t per_epoch = sampler.batches_per_epoch();
    batch b = s.data->gather(sampler.indices(step / per_epoch, step % per_epoch));
    stack.zero_grads();
    step_stats total;
    for (int m = 0; m < M; ++m) total.add(compute_gradients(stack, slice(b, m * s.batch / M, (m + 1) * s.batch / M), scale));
    opt->step(stack.params().data(), stack.grads().data(), stack.num_params());
    r.losses.push_back(total.mean_loss());
  }
  r.params = stack.params().clone();
  return r;
}

struct pp_case {
  std::string schedule;
  int P, M;
  std::string model;
};

std::string case_name(const ::testing::TestParamInfo<pp_case>& info) {
  std::string s = info.param.schedule;
  for (auto& c : s)
    if (c == '-') c = '_';
  return s + "_P" + std::to_string(info.param.P) + "_M" + std::to_string(info.param.M) + "_" + info.param.model;
}

}  // namespace

class PipelineMatchesSingleDevice : public ::testing::TestWithParam<pp_case> {};

TEST_P(PipelineMatchesSingleDevice, TwentyStepsSameLossesAndParametersExactScheduleAndLiveActivations) {
  const pp_case c = GetParam();
  const setup s = c.model == "mlp" ? mlp_setup() : gpt_setup();
  pipeline_job_args a;
  a.model = s.model;
  a.optim = adamw();
  a.batch_size = s.batch;
  a.rows_per_sample = s.rows_per_sample;
  a.total_steps = kSteps;
  a.train = s.data;
  a.plan = sched::make_named_schedule(c.schedule, c.P, c.M, 2);
  a.watchdog_seconds = 20;
  const auto predicted = sched::validate(a.plan).peak_live_activations;

  pipeline_job job(a);
  std::vector<double> losses;
  for (int64_t step = 0; step < kSteps; ++step) {
    pipeline_step_result r = job.run_step(step);
    losses.push_back(r.mean_loss());
    // The runtime ran each stage's list exactly, in order: no skipped, added or moved action.
    ASSERT_EQ(r.measured.stages.size(), a.plan.stages.size());
    for (size_t d = 0; d < a.plan.stages.size(); ++d) {
      ASSERT_EQ(r.measured.stages[d].size(), a.plan.stages[d].size()) << "stage " << d;
      for (size_t i = 0; i < a.plan.stages[d].size(); ++i)
        ASSERT_EQ(r.measured.stages[d][i].what, a.plan.stages[d][i]) << "stage " << d << " action " << i;
    }
  }
  const tensor params = job.params();
  EXPECT_EQ(job.peak_live_activations(), predicted);

  const reference ref = train_single_device(s, c.M);
  ASSERT_EQ(losses.size(), ref.losses.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_LE(std::abs(losses[i] - ref.losses[i]), 1e-5 * std::abs(ref.losses[i])) << "step " << i;
  ASSERT_EQ(params.numel(), ref.params.numel());
  double worst = 0;
  for (int64_t i = 0; i < params.numel(); ++i) worst = std::max(worst, double(std::abs(params[i] - ref.params[i])));
  EXPECT_LE(worst, 1e-4);
  EXPECT_LT(ref.losses.back(), ref.losses.front());  // it trained
}

namespace {
std::vector<pp_case> all_cases() {
  std::vector<pp_case> out;
  for (const char* model : {"mlp", "gpt"})
    for (const char* sch : {"gpipe", "1f1b", "interleaved", "zb-h1"})
      for (int P : {2, 4})
        for (int M : {4, 8}) out.push_back({sch, P, M, model});
  return out;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(EveryBuilder, PipelineMatchesSingleDevice, ::testing::ValuesIn(all_cases()), case_name);
