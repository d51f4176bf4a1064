// ZeRO stages 1, 2 and 3 change where model states live, never a number: over 20 steps of an MLP
// and a GPT, with SGD (no momentum: a wrong gradient scale shows) and AdamW, at dp 2 and 4, alone
// and combined with pp 2, tp 2, ZB-H1's split backward and (stage 3) full recomputation, every loss and every final parameter is bit for bit the plain
// data-parallel run's (a rank's segment of a ring reduce-scatter is the all-reduce's value, the
// optimizers are element-wise, and the all-gather copies). Each rank's device ledger peaks at
// the ZeRO formulas for this model (memory_plan.hpp), and a cap that plain DP does not fit is
// refused before the job starts, while ZeRO-2 fits it and trains to the same losses.
#include <gtest/gtest.h>

#include <filesystem>

#include "actors/plan/job_plan.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/plan/prepared_job.hpp"
#include "actors/run/training_job.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

struct zero_case {
  std::string model, optim;
  int dp = 2, zero = 1, pp = 1, tp = 1, M = 1;
  recompute_mode recompute = recompute_mode::none;
  std::string schedule = {};  // empty: the default (1f1b)
  int ep = 1;
};

std::string case_name(const zero_case& c) {
  return c.model + "_" + c.optim + "_dp" + std::to_string(c.dp) + "_pp" + std::to_string(c.pp) + "_tp" +
         std::to_string(c.tp) + "_M" + std::to_string(c.M) + "_zero" + std::to_string(c.zero) +
         (c.recompute == recompute_mode::none ? "" : std::string("_recompute_") + to_string(c.recompute)) +
         (c.schedule.empty() ? "" : "_" + std::string(c.schedule == "zb-h1" ? "zbh1" : c.schedule)) +
         (c.ep > 1 ? "_ep" + std::to_string(c.ep) : "");
}

train_config config_for(const zero_case& c) {
  train_config cfg = tiny_mesh_config(c.model, c.optim, c.dp, c.pp, c.tp, c.M);
  cfg.zero = c.zero;
  cfg.mesh.ep = c.ep;
  cfg.recompute = c.recompute;
  if (!c.schedule.empty()) cfg.schedule = c.schedule;
  cfg.bucket_mb = 0.0005;  // several buckets per stage, some smaller than dp elements
  cfg.out_dir = test_support::scratch_dir("zero-" + case_name(c)).string();
  return cfg;
}

class ZeroMatchesPlainDataParallel : public ::testing::TestWithParam<zero_case> {};

TEST_P(ZeroMatchesPlainDataParallel, TwentyStepsBitwiseSameLossesAndParameters) {
  zero_case plain = GetParam();
  plain.zero = 0;
  train_config baseline = config_for(plain);
  baseline.out_dir += "-baseline-of-" + case_name(GetParam());  // cases run side by side
  const train_summary want = run_training(baseline);
  const train_summary got = run_training(config_for(GetParam()));
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(got.losses, want.losses);
  ASSERT_EQ(got.final_params.numel(), want.final_params.numel());
  EXPECT_EQ(got.final_params.to_vector(), want.final_params.to_vector());
  EXPECT_LT(got.losses.back(), got.losses.front());  // it trained
  EXPECT_GE(got.buckets, 2);
}

std::vector<zero_case> all_cases() {
  std::vector<zero_case> out;
  for (const char* model : {"mlp", "gpt"})
    for (const char* optim : {"sgd", "adamw"})
      for (int dp : {2, 4})
        for (int zero : {1, 2, 3}) out.push_back({model, optim, dp, zero});
  // Microbatches accumulating into the units, a pipeline and tensor parallelism beside ZeRO.
  for (const char* optim : {"sgd", "adamw"})
    for (int zero : {1, 2, 3}) {
      out.push_back({"gpt", optim, 2, zero, 1, 1, 4});
      out.push_back({"gpt", optim, 2, zero, 2, 1, 4});
      out.push_back({"gpt", optim, 2, zero, 1, 2, 2});
    }
  out.push_back({"mlp", "adamw", 2, 2, 2, 1, 4});
  out.push_back({"mlp", "adamw", 2, 3, 2, 1, 4});
  out.push_back({"gpt", "adamw", 2, 3, 2, 2, 4});  // dp 2 x pp 2 x tp 2
  // Full recomputation under ZeRO-3: a unit gathered for a backward serves the rebuilt layers too.
  for (const char* optim : {"sgd", "adamw"}) {
    out.push_back({"gpt", optim, 2, 3, 1, 1, 1, recompute_mode::full});
    out.push_back({"gpt", optim, 2, 3, 2, 1, 4, recompute_mode::full});
  }
  out.push_back({"mlp", "adamw", 4, 3, 1, 1, 1, recompute_mode::full});
  // ZB-H1's split backward under ZeRO-3: units stream around the input halves only.
  for (const char* optim : {"sgd", "adamw"}) out.push_back({"gpt", optim, 2, 3, 2, 1, 4, recompute_mode::none, "zb-h1"});
  out.push_back({"gpt", "adamw", 2, 3, 2, 1, 4, recompute_mode::full, "zb-h1"});
  out.push_back({"mlp", "sgd", 2, 3, 2, 1, 4, recompute_mode::none, "zb-h1"});
  out.push_back({"gpt", "adamw", 2, 2, 2, 1, 4, recompute_mode::none, "zb-h1"});
  // A mixture of experts: its router and experts' parameters sharded like any other.
  for (int zero : {1, 2, 3}) out.push_back({"moe", "adamw", 2, zero, 1, 1, 2});
  // ZeRO 1 and 2 under expert parallelism: each expert's bucket is cut over the replicas holding
  // it (2 at dp 4 x ep 2; 1 at ep 4, where its segment is the whole bucket), the rest over every
  // replica; ZeRO-2's expert bucket shares its layer's gradient unit. Bitwise plain expert
  // parallelism.
  for (const char* optim : {"sgd", "adamw"})
    for (int zero : {1, 2}) {
      out.push_back({"moe", optim, 4, zero, 1, 1, 2, recompute_mode::none, {}, 2});
      out.push_back({"moe", optim, 4, zero, 1, 1, 2, recompute_mode::none, {}, 4});
    }
  for (int zero : {1, 2}) out.push_back({"moe", "adamw", 2, zero, 2, 1, 4, recompute_mode::none, {}, 2});
  out.push_back({"moe", "sgd", 2, 2, 1, 1, 2, recompute_mode::none, "zb-h1", 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroMatchesPlainDataParallel, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<zero_case>& i) { return case_name(i.param); });

// A wider MLP so the model states dominate what is measured.
train_config memory_config(int dp, int zero) {
  zero_case c{"mlp", "adamw", dp, zero};
  train_config cfg = config_for(c);
  cfg.model.inputs = 12;
  cfg.model.hidden = {64, 64, 64, 64, 64, 64};
  cfg.bucket_mb = 0.01;  // 2621 floats: each 64 x 64 layer is a bucket of its own, a fifth of the model
  cfg.max_steps = 3;
  cfg.out_dir += std::string("-") + ::testing::UnitTest::GetInstance()->current_test_info()->name();  // its own folder
  return cfg;
}

job_plan plan_of(const train_config& cfg) { return plan_job(cfg, prepare_job(cfg)); }

TEST(ZeroMemory, EachRanksPeakModelStatesAreTheZeroFormulasAndShrinkWithTheStage) {
  for (int dp : {2, 4}) {
    int64_t previous = 0;
    for (int zero : {0, 1, 2, 3}) {
      const train_config cfg = memory_config(dp, zero);
      const job_plan plan = plan_of(cfg);
      const train_summary run = run_training(cfg);
      ASSERT_EQ(run.peak_memory.size(), static_cast<size_t>(dp));
      int64_t states = 0;
      for (int r = 0; r < dp; ++r) {
        SCOPED_TRACE("dp " + std::to_string(dp) + " zero " + std::to_string(zero) + " rank " + std::to_string(r));
        const memory_figures want = predicted_model_states(cfg, plan, r);
        const memory_figures& got = run.peak_memory[static_cast<size_t>(r)];
        const int64_t bucket = largest_bucket_bytes(plan, r);
        if (zero < 3) {
          EXPECT_EQ(got.of(memory_kind::parameters), want.of(memory_kind::parameters));
        } else {  // its segments and at least the largest unit while that one runs; at most the bound
          const int64_t shard = want.of(memory_kind::optimizer_state) / 2;  // AdamW: two moments of the shard
          EXPECT_GE(got.of(memory_kind::parameters), shard + bucket);
          EXPECT_LE(got.of(memory_kind::parameters), want.of(memory_kind::parameters));
        }
        EXPECT_EQ(got.of(memory_kind::optimizer_state), want.of(memory_kind::optimizer_state));
        if (zero < 2) {
          EXPECT_EQ(got.of(memory_kind::gradients), want.of(memory_kind::gradients));
        } else {  // its partition, plus the one bucket backward is filling
          EXPECT_GT(got.of(memory_kind::gradients), want.of(memory_kind::gradients) - bucket);
          EXPECT_LE(got.of(memory_kind::gradients), want.of(memory_kind::gradients));
        }
        EXPECT_GT(got.of(memory_kind::activations), 0);
        states = std::max(states, got.of(memory_kind::parameters) + got.of(memory_kind::gradients) +
                                      got.of(memory_kind::optimizer_state));
      }
      // The formulas themselves: Ψ floats of parameters, 1/dp of them in the shard.
      const int64_t psi = 4 * plan.stage_params[0];
      const memory_figures f = predicted_model_states(cfg, plan, 0);
      if (zero == 0) {
        EXPECT_EQ(f.of(memory_kind::parameters), 2 * psi);
        EXPECT_EQ(f.of(memory_kind::optimizer_state), 2 * psi);  // AdamW's two moments
      } else if (zero == 3) {
        EXPECT_NEAR(static_cast<double>(f.of(memory_kind::optimizer_state)), 2.0 * psi / dp, 2 * 4 * 8.0);
      } else {
        EXPECT_EQ(f.of(memory_kind::parameters), psi);
        EXPECT_NEAR(static_cast<double>(f.of(memory_kind::optimizer_state)), 3.0 * psi / dp, 3 * 4 * 8.0);
      }
      if (previous > 0) {
        EXPECT_LT(states, previous) << "zero " << zero << " holds no less than zero " << zero - 1;
      }
      previous = states;
    }
  }
}

TEST(ZeroMemory, APlanThatDoesNotFitTheCapIsRefusedBeforeItStartsAndZeroTwoFitsIt) {
  train_config plain = memory_config(4, 0), zero2 = memory_config(4, 2);
  // Halfway between what ZeRO-2 needs and what plain DP needs: room for the activations.
  const int64_t small = predicted_model_states(zero2, plan_of(zero2), 0).total();
  const int64_t big = predicted_model_states(plain, plan_of(plain), 0).total();
  const int64_t cap = (small + big) / 2;
  plain.device_memory = zero2.device_memory = cap;
  try {
    run_training(plain);
    FAIL() << "plain DP was not refused";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("does not fit --device-memory"), std::string::npos) << what;
    EXPECT_NE(what.find("optimizer_state"), std::string::npos) << what;
    EXPECT_NE(what.find("higher --zero"), std::string::npos) << what;
  }
  const train_summary run = run_training(zero2);
  for (int64_t total : run.peak_memory_total) EXPECT_LE(total, cap);
  EXPECT_EQ(run.losses, run_training(memory_config(4, 0)).losses);
}

TEST(ZeroMemory, ACapTheActivationsOverrunStopsTheJobNamingTheRankAndTheKind) {
  train_config cfg = memory_config(2, 2);
  cfg.device_memory = predicted_model_states(cfg, plan_of(cfg), 0).total() + 64;  // model states fit, a step does not
  try {
    run_training(cfg);
    FAIL() << "the job ran past its cap";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("device memory of rank"), std::string::npos) << what;
    EXPECT_NE(what.find("--device-memory"), std::string::npos) << what;
  }
}

}  // namespace

namespace {

// ZeRO-Offload and ZeRO-Infinity of the optimizer and (zero 3) of the parameters: the same bits
// again, the state and the segments off the device's ledger (on the host's for host; only tiles
// and the segments between a step's update and their write in flight for nvme), and bad
// settings refused by name.
struct offload_case {
  std::string model, optim;
  int dp = 2, zero = 1;
  offload_target to = offload_target::host;
  bool pipeline = true;
  offload_what what = offload_what::optimizer;
  int pp = 1;
};

std::string offload_name(const offload_case& c) {
  return c.model + "_" + c.optim + "_dp" + std::to_string(c.dp) + (c.pp > 1 ? "_pp" + std::to_string(c.pp) : "") +
         "_zero" + std::to_string(c.zero) + "_" + to_string(c.what) + "_to_" + to_string(c.to) +
         (c.pipeline ? "" : "_serial");
}

// Each job its own folders (ctest runs cases side by side): out_dir, and beside it the shard files.
train_config offloaded(train_config cfg, offload_target to, bool pipeline = true,
                       offload_what what = offload_what::optimizer) {
  cfg.out_dir += std::string("-offload-") + to_string(what) + "-" + to_string(to) + (pipeline ? "" : "-serial");
  cfg.offload = what;
  cfg.offload_to = to;
  cfg.offload_dir = cfg.out_dir + "-nvme";
  std::filesystem::create_directories(cfg.offload_dir);
  cfg.aio_block_size = 4096;  // small tiles (1024 floats each): a shard here spans several
  cfg.aio_queue_depth = 2;
  cfg.offload_pipeline = pipeline;
  return cfg;
}

class OffloadMatchesPlainDataParallel : public ::testing::TestWithParam<offload_case> {};

TEST_P(OffloadMatchesPlainDataParallel, TwentyStepsBitwiseSameLossesAndParameters) {
  const offload_case c = GetParam();
  zero_case base{c.model, c.optim, c.dp, 0, c.pp};
  if (c.pp > 1) base.M = 2;
  train_config plain = config_for(base);
  plain.out_dir += "-baseline-of-" + offload_name(c);
  base.zero = c.zero;
  const train_config cfg = offloaded(config_for(base), c.to, c.pipeline, c.what);
  const job_plan plan = plan_of(cfg);
  const train_summary want = run_training(plain);
  const train_summary got = run_training(cfg);
  EXPECT_EQ(got.losses, want.losses);
  EXPECT_EQ(got.final_params.to_vector(), want.final_params.to_vector());
  const bool optimizer_off = c.what != offload_what::params, params_off = c.what != offload_what::optimizer;
  for (size_t r = 0; r < got.peak_memory.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const memory_figures want_states = predicted_model_states(cfg, plan, static_cast<int>(r));
    const int64_t unit = largest_bucket_bytes(plan, static_cast<int>(r));
    if (optimizer_off) {
      EXPECT_EQ(got.peak_memory[r].of(memory_kind::optimizer_state), 0);
    } else {  // the moments stay on the device
      EXPECT_EQ(got.peak_memory[r].of(memory_kind::optimizer_state), want_states.of(memory_kind::optimizer_state));
    }
    if (params_off) {  // no segment on the device: at most the units gathered, at least the largest
      EXPECT_LE(got.peak_memory[r].of(memory_kind::parameters), want_states.of(memory_kind::parameters));
      EXPECT_GE(got.peak_memory[r].of(memory_kind::parameters), unit);
      EXPECT_EQ(want_states.of(memory_kind::parameters), (cfg.prefetch + 1) * unit);
    }
    // ZeRO-3's master copy is the stage's own segments (fp32 throughout), so with SGD without
    // momentum a host-offloaded shard keeps nothing there unless the parameters went too.
    if (c.zero < 3 || c.optim == "adamw" || c.to == offload_target::nvme || params_off) {
      EXPECT_GT(got.peak_host_memory[r].total(), 0);
    }
  }
  // Every shard file is gone with its store.
  EXPECT_TRUE(std::filesystem::is_empty(cfg.offload_dir));
}

std::vector<offload_case> offload_cases() {
  std::vector<offload_case> out;
  for (const char* model : {"mlp", "gpt"})
    for (const char* optim : {"sgd", "adamw"})
      for (int dp : {2, 4})
        for (int zero : {1, 2, 3})
          for (offload_target to : {offload_target::host, offload_target::nvme}) {
            out.push_back({model, optim, dp, zero, to});
            if (zero == 3)
              for (offload_what what : {offload_what::params, offload_what::both})
                out.push_back({model, optim, dp, zero, to, true, what});
          }
  out.push_back({"gpt", "adamw", 2, 2, offload_target::nvme, false});
  // ZeRO-Infinity's parameters under a pipeline: two stages, each streaming its own units.
  for (const char* model : {"mlp", "gpt"})
    for (offload_what what : {offload_what::params, offload_what::both})
      out.push_back({model, "adamw", 2, 3, offload_target::nvme, true, what, 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Targets, OffloadMatchesPlainDataParallel, ::testing::ValuesIn(offload_cases()),
                         [](const ::testing::TestParamInfo<offload_case>& i) { return offload_name(i.param); });

TEST(ZeroOffload, HostKeepsTheShardsStateOnTheHostAndNvmeOnlyItsTilesInFlight) {
  const train_config on_device = memory_config(2, 2);
  const job_plan plan = plan_of(on_device);
  const int64_t state = predicted_model_states(on_device, plan, 0).of(memory_kind::optimizer_state);
  const train_summary host = run_training(offloaded(on_device, offload_target::host));
  const train_summary nvme = run_training(offloaded(on_device, offload_target::nvme));
  for (int r = 0; r < 2; ++r) {
    const auto i = static_cast<size_t>(r);
    // Host: the shard's master copy and moments, exactly what the device held without offload.
    EXPECT_EQ(host.peak_host_memory[i].of(memory_kind::optimizer_state), predicted_model_states(on_device, plan, r).of(memory_kind::optimizer_state));
    // NVMe: no state in memory at all; slots of 3 x 1024 floats and the updated shard in flight.
    EXPECT_EQ(nvme.peak_host_memory[i].of(memory_kind::optimizer_state), 0);
    EXPECT_GT(nvme.peak_host_memory[i].of(memory_kind::buffers), 0);
    EXPECT_LT(nvme.peak_host_memory[i].total(), state);
  }
  EXPECT_EQ(host.losses, nvme.losses);
}

TEST(ZeroOffload, BadSettingsAreRefusedByName) {
  auto message = [](train_config cfg) {
    try {
      validate(cfg);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  train_config c = offloaded(config_for({"mlp", "sgd", 2, 0}), offload_target::host);
  EXPECT_NE(message(c).find("needs zero 1, 2 or 3"), std::string::npos) << message(c);
  c = offloaded(config_for({"mlp", "sgd", 2, 2}), offload_target::nvme);
  c.offload_dir = "";
  EXPECT_NE(message(c).find("--offload-dir"), std::string::npos) << message(c);
  c.offload_dir = "/no/such/folder";
  EXPECT_NE(message(c).find("\"/no/such/folder\" is not an existing folder"), std::string::npos) << message(c);
  c = offloaded(config_for({"mlp", "sgd", 2, 2}), offload_target::nvme);
  c.aio_block_size = 1000;
  EXPECT_NE(message(c).find("block_size"), std::string::npos) << message(c);
  c = offloaded(config_for({"mlp", "sgd", 2, 2}), offload_target::host, true, offload_what::params);
  EXPECT_NE(message(c).find("offloading parameters (offload params) needs zero 3"), std::string::npos) << message(c);
  c = offloaded(config_for({"mlp", "sgd", 2, 3}), offload_target::nvme, true, offload_what::both);
  c.offload_dir = "";
  EXPECT_NE(message(c).find("--offload-dir"), std::string::npos) << message(c);
  c = config_for({"mlp", "sgd", 2, 4});
  EXPECT_NE(message(c).find("zero must be 0, 1, 2 or 3"), std::string::npos) << message(c);
}

}  // namespace
