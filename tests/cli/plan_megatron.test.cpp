// The time model against Narayanan et al. 2021, Table 1: each row's model file in examples/plan/
// priced on the DGX A100 cluster description at the row's t, p, d and batch (1F1B, full
// recomputation, micro-batch 1) must predict TFLOP/s per GPU within 15% of the published figure.
// The descriptions are the files users run, so a change to them shows here.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/plan_files.hpp"
#include "schedules/plan/plan.hpp"

namespace troupe::cli {
namespace {

const std::string dir = TROUPE_PLAN_EXAMPLES_DIR;

class megatron_row : public ::testing::TestWithParam<const char*> {};

TEST_P(megatron_row, predicted_tflops_per_gpu_within_15_percent_of_published) {
  const model_file f = load_model_file(dir + "/megatron-" + GetParam() + "b.toml");
  ASSERT_TRUE(f.published.has_value());
  const published_run& pub = *f.published;
  sched::plan::cluster_desc cl = load_cluster_file(dir + "/dgx-a100-1024.toml");
  cl.nodes = pub.tp * pub.pp * pub.dp / cl.gpus_per_node;
  const sched::plan::plan_config c = as_plan_config(pub);  // 1F1B, full recomputation, micro-batch 1
  ASSERT_EQ(c.rc, recompute_mode::full);
  const sched::plan::plan_result r = sched::plan::evaluate(f.model, cl, c);
  EXPECT_NEAR(r.tflops_per_gpu / pub.tflops_per_gpu, 1.0, 0.15)
      << f.model.name << ": predicted " << r.tflops_per_gpu << " TFLOP/s per GPU, published " << pub.tflops_per_gpu;
  // The published percentage is the same figure over the A100's 312 TFLOP/s.
  EXPECT_NEAR(pub.tflops_per_gpu / 312 * 100, pub.percent_of_peak, 0.5);
  EXPECT_TRUE(r.fits) << f.model.name << " needs " << r.memory.total() / sched::plan::gib << " GiB";
  // The model's size from its shape is the row's parameter count.
  EXPECT_NEAR(f.model.parameters() / 1e9, std::stod(GetParam()), 0.05 * std::stod(GetParam()) / 100 + 0.05);
}

INSTANTIATE_TEST_SUITE_P(narayanan_2021_table_1, megatron_row,
                         ::testing::Values("1.7", "3.6", "7.5", "18.4", "39.1", "76.1", "145.6", "310.1", "529.6",
                                           "1008"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return "params_" + n + "b";
                         });

// Must-show 4 of the planning issue: the search's best plan for GPT-3 175B on 1024 A100s is at
// least as fast as the configuration Narayanan et al. ran, and the explanation says why.
TEST(gpt3_175b_on_1024_a100s, the_search_finds_a_plan_at_least_as_fast_as_narayanans_and_explains_the_gain) {
  const model_file f = load_model_file(dir + "/gpt3-175b.toml");
  ASSERT_TRUE(f.published.has_value());
  const sched::plan::cluster_desc cl = load_cluster_file(dir + "/dgx-a100-1024.toml");
  ASSERT_EQ(cl.gpus(), 1024);
  sched::plan::plan_config c;
  c.m = {cl.gpus() / (f.published->tp * f.published->pp), f.published->pp, f.published->tp, 1};
  c.global_batch = f.global_batch;
  c.rc = recompute_mode::full;
  const sched::plan::plan_result ref = sched::plan::evaluate(f.model, cl, c);
  EXPECT_TRUE(ref.fits);
  // The reference itself is priced within 15% of the 140 TFLOP/s the paper reports for it.
  EXPECT_NEAR(ref.tflops_per_gpu / f.published->tflops_per_gpu, 1.0, 0.15) << ref.tflops_per_gpu;
  const auto found = sched::plan::search(f.model, cl, f.global_batch, {}, 1);
  ASSERT_EQ(found.size(), 1u);
  const sched::plan::plan_result& best = found.front();
  EXPECT_TRUE(best.fits);
  EXPECT_LE(best.step_seconds, ref.step_seconds);
  // Throughput in model FLOPs (what a user gets), not hardware FLOPs that count recomputation.
  EXPECT_GE(best.mfu, ref.mfu);
  const auto lines = sched::plan::explain(best, ref);
  ASSERT_GE(lines.size(), 3u);
  // The largest saving is recomputation: selective recomputation (Korthikanti et al. 2022)
  // instead of the full recomputation the 2021 runs used.
  EXPECT_NE(lines[1].find("recomputation full -> "), std::string::npos) << lines[1];
}

TEST(cli_plan_files, unknown_key_and_missing_file_are_named) {
  EXPECT_THROW(load_model_file(dir + "/no-such-model.toml"), std::invalid_argument);
  try {
    load_model_file(dir + "/no-such-model.toml");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-model.toml: cannot open"), std::string::npos);
  }
}


// Today's model shapes (grouped-query attention, SwiGLU, untied embeddings) from the example
// descriptions: the parameter count from each shape is the released model's, within what the
// description cannot say (learned positions and layer-norm biases where Llama has rotary
// positions and RMSNorm).
TEST(llama_descriptions, parameters_from_the_shape_match_the_released_models) {
  const std::pair<const char*, double> models[] = {{"llama-2-70b", 68976648192.0}, {"llama-3-8b", 8030261248.0}};
  for (const auto& [name, released] : models) {
    const model_file f = load_model_file(dir + "/" + name + ".toml");
    EXPECT_NEAR(f.model.parameters() / released, 1.0, 0.005) << name << ": " << f.model.parameters();
    EXPECT_NE(f.model.describe_shape().find("GQA 8 kv heads, SwiGLU"), std::string::npos) << f.model.describe_shape();
  }
}

// A run the planner was not built on, with today's shape and uneven stages: Llama 3 405B on 8192
// H100s (Grattafiori et al. 2024, Table 4: t 8, p 16, d 64, 430 TFLOP/s per GPU), priced as the
// description's [published] table states and assumes, within 15% and fitting 80 GB.
TEST(llama_descriptions, llama_3_405b_on_8192_h100s_within_15_percent_of_published) {
  const model_file f = load_model_file(dir + "/llama-3-405b.toml");
  ASSERT_TRUE(f.published.has_value());
  const published_run& pub = *f.published;
  sched::plan::cluster_desc cl = load_cluster_file(dir + "/dgx-h100-1024.toml");
  cl.nodes = pub.tp * pub.pp * pub.dp / cl.gpus_per_node;
  const sched::plan::plan_config c = as_plan_config(pub);
  const sched::plan::plan_result r = sched::plan::evaluate(f.model, cl, c);
  EXPECT_NEAR(r.tflops_per_gpu / pub.tflops_per_gpu, 1.0, 0.15)
      << "predicted " << r.tflops_per_gpu << " TFLOP/s per GPU, published " << pub.tflops_per_gpu;
  EXPECT_TRUE(r.fits) << r.memory.total() / sched::plan::gib << " GiB";
  EXPECT_NEAR(f.model.parameters() / 405e9, 1.0, 0.005) << f.model.parameters();
  EXPECT_DOUBLE_EQ(sched::plan::stage_layers(f.model, c, 0) + 14 * sched::plan::stage_layers(f.model, c, 1) +
                       sched::plan::stage_layers(f.model, c, 15),
                   126);
}

// The H100 runs' cluster (DGX H100) and the Table 1 rows' (DGX A100), sized to the run's GPUs.
sched::plan::cluster_desc cluster_of(const std::string& file, const published_run& pub) {
  const bool h100 = file.rfind("llama", 0) == 0 || file.rfind("qwen", 0) == 0;
  sched::plan::cluster_desc cl = load_cluster_file(dir + (h100 ? "/dgx-h100-1024.toml" : "/dgx-a100-1024.toml"));
  cl.nodes = pub.gpus() / cl.gpus_per_node;
  return cl;
}

// Issue 38, must-show 1: runs the planner was not built on, each priced as its description's
// [published] table states (mesh, cp, ep, schedule, stage layers, precision, rank order and the
// stack's figures), against the step time the source's throughput implies (from tokens per
// second where it gives them, else from its TFLOP/s counted as Megatron-LM counts model FLOPs).
struct h100_run {
  const char* file;
  bool claimed;  // within 15% is what the model claims for it (see bench/README.md for the others)
};

void PrintTo(const h100_run& r, std::ostream* os) { *os << r.file; }

class published_runs_on_h100 : public ::testing::TestWithParam<h100_run> {};

TEST_P(published_runs_on_h100, predicted_step_time_against_the_published_throughput) {
  const model_file f = load_model_file(dir + "/" + GetParam().file);
  ASSERT_TRUE(f.published.has_value());
  const published_run& pub = *f.published;
  const sched::plan::plan_result r = sched::plan::evaluate(f.model, cluster_of(GetParam().file, pub), as_plan_config(pub));
  const double published = pub.step_seconds(f.model.sequence, f.model.model_flops_per_sequence());
  const double ratio = published / r.step_seconds;  // predicted throughput over published
  std::printf("%s: predicted step %.3f s, published %.3f s: throughput ratio %.3f, %.1f GiB per GPU\n",
              GetParam().file, r.step_seconds, published, ratio, r.memory.total() / sched::plan::gib);
  if (GetParam().claimed) {
    EXPECT_NEAR(ratio, 1.0, 0.15) << GetParam().file;
    EXPECT_TRUE(r.fits) << r.memory.total() / sched::plan::gib << " GiB";
  }
}

INSTANTIATE_TEST_SUITE_P(issue_38, published_runs_on_h100,
                         ::testing::Values(h100_run{"llama-3-8b.toml", true}, h100_run{"llama-3-70b-fp8.toml", true},
                                           h100_run{"llama-2-7b-128k-fp8.toml", true},
                                           h100_run{"llama-3.1-405b-fp8-cp2.toml", true},
                                           h100_run{"llama-3-405b-128k.toml", false},
                                           h100_run{"qwen3-235b-a22b-fp8.toml", true}),
                         [](const auto& info) {
                           std::string n = info.param.file;
                           n = n.substr(0, n.size() - 5);
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Issue 38, must-show 1's long-context run: NeMo's long-sequence table for Llama 2 7B in FP8 on
// H100s (llama-2-7b-128k-fp8.toml cites it), 8K to 1M tokens with context parallelism up to 32.
// The stack's two figures come from the table's ends (8K for the GEMMs, 1M for attention); the
// six rows between are predictions of how the time moves with the sequence, cp and tp: within
// 15% of the published TFLOP/s per GPU (Megatron's count, as NeMo's formula is), and fitting.
struct nemo_row {
  int sequence_k, gpus, tp, pp, dp, cp;
  double tflops;
  bool calibration;
};

void PrintTo(const nemo_row& r, std::ostream* os) { *os << r.sequence_k << "K tokens, cp " << r.cp; }

class nemo_long_sequence : public ::testing::TestWithParam<nemo_row> {};

TEST_P(nemo_long_sequence, llama_2_7b_fp8_with_context_parallelism_within_15_percent_of_nemos_table) {
  const nemo_row& row = GetParam();
  model_file f = load_model_file(dir + "/llama-2-7b-128k-fp8.toml");
  ASSERT_TRUE(f.published.has_value());
  f.model.sequence = row.sequence_k * 1024.0;
  published_run pub = *f.published;
  pub.tp = row.tp;
  pub.pp = row.pp;
  pub.dp = row.dp;
  pub.cp = row.cp;
  pub.global_batch = 16 * row.dp;  // the description's assumption: 16 sequences per dp rank
  ASSERT_EQ(pub.gpus(), row.gpus);
  const sched::plan::plan_result r = sched::plan::evaluate(f.model, cluster_of("llama", pub), as_plan_config(pub));
  std::printf("%dK on %d GPUs (tp %d pp %d dp %d cp %d): predicted %.1f TFLOP/s per GPU, published %.0f: %.3f%s\n",
              row.sequence_k, row.gpus, row.tp, row.pp, row.dp, row.cp, r.tflops_per_gpu, row.tflops,
              r.tflops_per_gpu / row.tflops, row.calibration ? " (calibration)" : "");
  EXPECT_NEAR(r.tflops_per_gpu / row.tflops, 1.0, row.calibration ? 0.01 : 0.15);
  EXPECT_TRUE(r.fits) << r.memory.total() / sched::plan::gib << " GiB";
}

INSTANTIATE_TEST_SUITE_P(issue_38, nemo_long_sequence,
                         ::testing::Values(nemo_row{8, 8, 1, 2, 4, 1, 730, true}, nemo_row{16, 16, 2, 1, 8, 1, 660, false},
                                           nemo_row{32, 32, 2, 1, 8, 2, 610, false},
                                           nemo_row{64, 64, 4, 1, 8, 2, 574, false},
                                           nemo_row{128, 128, 4, 1, 8, 4, 555, false},
                                           nemo_row{256, 256, 4, 1, 8, 8, 549, false},
                                           nemo_row{512, 512, 8, 1, 4, 16, 549, false},
                                           nemo_row{1024, 1024, 8, 1, 4, 32, 536, true}),
                         [](const auto& info) { return std::to_string(info.param.sequence_k) + "k"; });

// Issue 38, must-show 3: for every published run in examples/plan/, --search's best plan is
// predicted no slower than the published configuration priced the same way (its mesh,
// micro-batch, schedule, recomputation, sequence parallelism, ZeRO stage and stage layers, on
// the cluster it ran on), so a win the search reports is never one against a reference priced
// under other assumptions. Each published configuration also fits its devices as priced.
TEST(published_runs, search_best_is_never_slower_than_the_published_configuration_priced_the_same_way) {
  int runs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    model_file f;
    try {
      f = load_model_file(entry.path().string());
    } catch (const std::invalid_argument&) {
      continue;  // a device or cluster description
    }
    if (!f.published) continue;
    ++runs;
    const published_run& pub = *f.published;
    const sched::plan::cluster_desc cl = cluster_of(entry.path().filename().string(), pub);
    const sched::plan::plan_result ref = sched::plan::evaluate(f.model, cl, as_plan_config(pub));
    // Llama 3's long-context run used a pipeline schedule of its own (section 3.3.2) that holds
    // fewer micro-batches than the interleaved one the description assumes; as priced it does not fit.
    if (f.model.name != "llama-3-405b-128k") {
      EXPECT_TRUE(ref.fits) << f.model.name << ": the published configuration needs "
                            << ref.memory.total() / sched::plan::gib << " GiB";
    }
    sched::plan::search_space space;
    space.precision = pub.precision;  // the search prices its plans on the run's own stack
    space.stack = pub.stack;
    const std::vector<sched::plan::plan_result> best = sched::plan::search(f.model, cl, pub.global_batch, space, 1);
    ASSERT_FALSE(best.empty()) << f.model.name;
    EXPECT_LE(best[0].step_seconds, ref.step_seconds * (1 + 1e-12))
        << f.model.name << ": search's best " << best[0].step_seconds << " s, published as priced " << ref.step_seconds;
  }
  EXPECT_EQ(runs, 18);  // Table 1's ten rows, GPT-3 175B, the six runs on H100s (published_runs_on_h100)
}

}  // namespace
}  // namespace troupe::cli
