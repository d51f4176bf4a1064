// Checkpoints in a training job: a run saves after steps 8 and 16 (and 20) without changing a
// number, and a run resumed from step 8 in the same layout gives bit for bit the losses of steps
// 8..19 and the final parameters of the uninterrupted run, for plain, data-parallel, pipeline,
// tensor-parallel, ZeRO 1/2/3 and offloaded jobs. Resumed in another layout (dp 4 -> 2,
// pp 2 -> 1, tp 2 -> 4, zero 3 -> 0, offloaded -> not) the next-step loss is the uninterrupted
// run's: bitwise where the two layouts compute the same bits, within float rounding where their
// reductions are ordered differently. A checkpoint of another model, or with a corrupt shard, is
// refused naming it.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "actors/run/training_job.hpp"
#include "actors/messages.hpp"
#include "kernels/param_names.hpp"
#include "storage/checkpoint.hpp"
#include "storage/checkpoint_export.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

namespace fs = std::filesystem;

struct layout {
  int dp = 1, pp = 1, tp = 1, M = 1, zero = 0;
  offload_target offload = offload_target::none;
  std::string schedule = "1f1b";
  offload_what what = offload_what::optimizer;  // with an offload target
  int cp = 1;
  int ep = 1;
};

std::string name_of(const layout& l) {
  std::string n = "dp" + std::to_string(l.dp) + "_pp" + std::to_string(l.pp) + "_tp" + std::to_string(l.tp) + "_M" +
                  std::to_string(l.M) + "_zero" + std::to_string(l.zero);
  if (l.offload != offload_target::none) n += std::string("_offload_") + to_string(l.what) + "_" + to_string(l.offload);
  if (l.schedule != "1f1b") n += "_" + l.schedule;
  if (l.cp > 1) n += "_cp" + std::to_string(l.cp);
  if (l.ep > 1) n += "_ep" + std::to_string(l.ep);
  return n;
}

fs::path scratch(const std::string& name) {
  const fs::path p = test_support::scratch_dir("ckpt-" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

train_config config_for(const std::string& model, const std::string& optim, const layout& l, const fs::path& dir) {
  train_config cfg = tiny_mesh_config(model, optim, l.dp, l.pp, l.tp, l.M);
  if (optim == "sgd") cfg.optim.momentum = 0.9f;  // a state array to save
  cfg.schedule = l.schedule;
  cfg.mesh.cp = l.cp;
  cfg.mesh.ep = l.ep;
  // Dropless and without the load-balancing loss, a token's routing is its own: layouts that
  // split the batch otherwise compute the same model.
  if (model == "moe") cfg.model.aux_loss_coefficient = 0;
  cfg.zero = l.zero;
  cfg.bucket_mb = 0.0005;  // several buckets per stage: ZeRO's shards are strided pieces
  if (l.offload != offload_target::none) {
    cfg.offload = l.what;
    cfg.offload_to = l.offload;
    cfg.offload_dir = (dir / "nvme").string();
    fs::create_directories(cfg.offload_dir);
  }
  cfg.out_dir = (dir / "out").string();
  return cfg;
}

struct resume_case {
  std::string model, optim;
  layout saved, resumed;
  bool bitwise = true;  // the two layouts compute the same bits
};

std::string case_name(const resume_case& c) {
  return c.model + "_" + c.optim + "_" + name_of(c.saved) + "_to_" + name_of(c.resumed);
}

void PrintTo(const resume_case& c, std::ostream* os) { *os << case_name(c); }

class CheckpointResume : public ::testing::TestWithParam<resume_case> {};

TEST_P(CheckpointResume, ResumedFromStep8GivesTheUninterruptedRunsLosses) {
  const resume_case& c = GetParam();
  const fs::path dir = scratch(case_name(c));
  // The uninterrupted run, in the resumed layout, saving nothing.
  train_config plain = config_for(c.model, c.optim, c.resumed, dir / "plain");
  const train_summary want = run_training(plain);
  // The run that saves, in the saved layout.
  train_config saver = config_for(c.model, c.optim, c.saved, dir / "saver");
  saver.checkpoint_dir = (dir / "ckpt").string();
  saver.checkpoint_every = 8;
  saver.keep = 0;
  const train_summary saved = run_training(saver);
  ASSERT_EQ(saved.checkpoints.size(), 3u);  // after steps 8, 16 and the last, 20
  ASSERT_TRUE(fs::exists(fs::path(saver.checkpoint_dir) / "step-00000008" / "manifest.capnp"));
  // Resumed from step 8 in the resumed layout.
  train_config resumed = config_for(c.model, c.optim, c.resumed, dir / "resumed");
  resumed.resume = (fs::path(saver.checkpoint_dir) / "step-00000008").string();
  const train_summary got = run_training(resumed);
  EXPECT_EQ(got.first_step, 8);
  ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps - 8));
  const std::vector<double> tail(want.losses.begin() + 8, want.losses.end());
  if (c.bitwise) {
    EXPECT_EQ(saved.losses, want.losses) << "saving changed a number";
    EXPECT_EQ(got.losses, tail);
    EXPECT_EQ(got.final_params.to_vector(), want.final_params.to_vector());
  } else {
    // The parameters at step 8 are the saved layout's; its own loss at step 8 is the next step's.
    EXPECT_NEAR(got.losses.front(), saved.losses.at(8), 1e-5 * std::abs(saved.losses.at(8)));
    for (size_t i = 0; i < tail.size(); ++i) EXPECT_NEAR(got.losses[i], tail[i], 1e-4 * std::abs(tail[i])) << "step " << 8 + i;
  }
}

layout L(int dp, int pp, int tp, int M, int zero, offload_target o = offload_target::none) {
  return layout{dp, pp, tp, M, zero, o};
}
layout interleaved(int dp, int pp, int M, int zero) {  // two chunks per stage, not adjacent in the model
  layout l = L(dp, pp, 1, M, zero);
  l.schedule = "interleaved";
  return l;
}

// Context parallelism: cp ranks hold whole parameters, like data-parallel replicas.
layout context(int dp, int pp, int tp, int M, int zero, int cp) {
  layout l = L(dp, pp, tp, M, zero);
  l.cp = cp;
  return l;
}

// Expert parallelism: each of the first ep replicas writes its experts (and the layers they all
// hold); under ZeRO every replica its segments, the experts' cut over the replicas holding them.
layout experts(int dp, int pp, int M, int ep, int zero = 0) {
  layout l = L(dp, pp, 1, M, zero);
  l.ep = ep;
  return l;
}

// ZeRO-3 with its parameters offloaded (params: the moments stay in memory; both: nothing does).
layout params_off(int dp, int pp, int tp, int M, offload_target o, offload_what what) {
  layout l = L(dp, pp, tp, M, 3, o);
  l.what = what;
  return l;
}

const auto none = offload_target::none;
const auto host = offload_target::host;
const auto nvme = offload_target::nvme;

INSTANTIATE_TEST_SUITE_P(
    SameLayout, CheckpointResume,
    ::testing::Values(resume_case{"mlp", "sgd", L(1, 1, 1, 1, 0), L(1, 1, 1, 1, 0)},
                      resume_case{"mlp", "adamw", L(1, 1, 1, 1, 0), L(1, 1, 1, 1, 0)},
                      resume_case{"mlp", "adamw", L(2, 1, 1, 1, 0), L(2, 1, 1, 1, 0)},
                      resume_case{"gpt", "adamw", L(1, 2, 1, 2, 0), L(1, 2, 1, 2, 0)},
                      resume_case{"gpt", "adamw", interleaved(2, 2, 4, 1), interleaved(2, 2, 4, 1)},
                      resume_case{"gpt", "sgd", L(1, 1, 2, 1, 0), L(1, 1, 2, 1, 0)},
                      resume_case{"mlp", "adamw", L(2, 1, 1, 1, 1), L(2, 1, 1, 1, 1)},
                      resume_case{"gpt", "adamw", L(2, 2, 1, 2, 2), L(2, 2, 1, 2, 2)},
                      resume_case{"mlp", "sgd", L(2, 1, 1, 1, 3), L(2, 1, 1, 1, 3)},
                      resume_case{"gpt", "adamw", L(2, 1, 2, 1, 3), L(2, 1, 2, 1, 3)},
                      resume_case{"gpt8", "adamw", context(1, 2, 1, 2, 2, 2), context(1, 2, 1, 2, 2, 2)},
                      resume_case{"moe", "adamw", experts(4, 1, 1, 2), experts(4, 1, 1, 2)},
                      resume_case{"moe", "adamw", experts(4, 1, 1, 2, 1), experts(4, 1, 1, 2, 1)},
                      resume_case{"moe", "sgd", experts(4, 1, 1, 2, 2), experts(4, 1, 1, 2, 2)},
                      resume_case{"mlp", "adamw", L(2, 1, 1, 1, 2, host), L(2, 1, 1, 1, 2, host)},
                      resume_case{"mlp", "adamw", L(2, 1, 1, 1, 2, nvme), L(2, 1, 1, 1, 2, nvme)},
                      resume_case{"mlp", "sgd", params_off(2, 1, 1, 1, nvme, offload_what::params),
                                  params_off(2, 1, 1, 1, nvme, offload_what::params)},
                      resume_case{"gpt", "adamw", params_off(2, 1, 1, 1, nvme, offload_what::both),
                                  params_off(2, 1, 1, 1, nvme, offload_what::both)},
                      resume_case{"mlp", "adamw", params_off(2, 1, 1, 1, host, offload_what::params),
                                  params_off(2, 1, 1, 1, host, offload_what::params)}),
    [](const auto& info) { return case_name(info.param); });

INSTANTIATE_TEST_SUITE_P(
    Reshard, CheckpointResume,
    ::testing::Values(resume_case{"mlp", "adamw", L(4, 1, 1, 1, 0), L(2, 1, 1, 1, 0), false},
                      resume_case{"mlp", "adamw", L(4, 1, 1, 1, 2), L(2, 1, 1, 1, 1), false},
                      resume_case{"gpt", "adamw", L(1, 2, 1, 2, 0), L(1, 1, 1, 1, 0), false},
                      resume_case{"mlp", "sgd", interleaved(1, 2, 4, 0), L(2, 1, 1, 1, 2), false},
                      resume_case{"gpt", "adamw", L(1, 1, 2, 1, 0), L(1, 1, 4, 1, 0), false},
                      resume_case{"mlp", "adamw", L(2, 1, 1, 1, 3), L(2, 1, 1, 1, 0), true},
                      resume_case{"mlp", "sgd", L(2, 1, 1, 1, 2, nvme), L(2, 1, 1, 1, 0), true},
                      resume_case{"mlp", "adamw", params_off(2, 1, 1, 1, nvme, offload_what::params), L(2, 1, 1, 1, 0), true},
                      resume_case{"mlp", "adamw", L(2, 1, 1, 1, 0), params_off(2, 1, 1, 1, nvme, offload_what::both), true},
                      resume_case{"gpt", "adamw", L(2, 2, 2, 2, 1), L(1, 1, 1, 1, 0), false},
                      resume_case{"gpt8", "adamw", context(2, 1, 1, 1, 1, 2), context(1, 1, 2, 1, 0, 1), false},
                      resume_case{"gpt8", "sgd", context(1, 1, 1, 1, 0, 1), context(1, 2, 1, 2, 2, 2), false},
                      resume_case{"moe", "adamw", experts(2, 1, 1, 2), L(1, 1, 1, 1, 0), false},
                      resume_case{"moe", "sgd", L(2, 2, 1, 2, 1), experts(4, 1, 1, 4), false},
                      resume_case{"moe", "adamw", experts(4, 1, 1, 2, 1), experts(2, 1, 1, 2), false}),
    [](const auto& info) { return case_name(info.param); });

// Saving, with --keep 2: the two newest checkpoints stay, and `latest` names the newest.
TEST(CheckpointKeep, KeepTwoLeavesTheTwoNewestAndLatestNamesTheLast) {
  const fs::path dir = scratch("keep");
  train_config cfg = config_for("mlp", "adamw", L(1, 1, 1, 1, 0), dir);
  cfg.checkpoint_dir = (dir / "ckpt").string();
  cfg.checkpoint_every = 4;
  cfg.keep = 2;
  const train_summary s = run_training(cfg);
  EXPECT_EQ(s.checkpoints.size(), 5u);
  const auto left = storage::committed_checkpoints(cfg.checkpoint_dir);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(fs::path(left[0]).filename(), "step-00000016");
  EXPECT_EQ(fs::path(storage::resolve_checkpoint(cfg.checkpoint_dir)).filename(), "step-00000020");
}

// `troupe export`'s tensors are the job's final parameters, bit for bit, under PyTorch's names:
// a GPT split over pp 2 x tp 2 and ZeRO-2 over dp 2 is put back together from the shards' runs.
TEST(CheckpointExport, ExportedTensorsAreTheFinalParametersUnderTheirNames) {
  const fs::path dir = scratch("export");
  train_config cfg = config_for("gpt", "adamw", L(2, 2, 2, 2, 2), dir);
  cfg.checkpoint_dir = (dir / "ckpt").string();
  cfg.max_steps = 4;
  const train_summary s = run_training(cfg);
  const std::string out = (dir / "model.safetensors").string();
  const storage::export_report r = storage::export_safetensors(cfg.checkpoint_dir, out, true);
  EXPECT_EQ(r.step, 4);
  storage::safetensors_metadata meta;
  const auto tensors = storage::read_safetensors(out, &meta);
  const auto names = named_params(cfg.model);
  ASSERT_EQ(tensors.size(), 3 * names.size());  // parameters, exp_avg, exp_avg_sq
  const std::vector<float> want = s.final_params.to_vector();
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(tensors[i].name, names[i].name);
    EXPECT_EQ(tensors[i].shape, names[i].shape);
    EXPECT_EQ(tensors[i].values, std::vector<float>(want.begin() + names[i].offset,
                                                   want.begin() + names[i].offset + names[i].count))
        << names[i].name;
  }
  EXPECT_EQ(tensors[names.size()].name, names[0].name + ".exp_avg");
  EXPECT_EQ(meta.at("model.kind"), "gpt");
  EXPECT_EQ(meta.at("troupe.step"), "4");
}

// An actor of the job that dies at the first step >= `at` it sees once `committed` exists (the
// checkpoint before it: its write runs beside the next steps), the first `times` times a job
// spawns it: a lost actor, as a stage or a shard that crashed would be.
caf::behavior dies_at(caf::event_based_actor* self, int64_t at, std::string committed, std::shared_ptr<int> times) {
  return {[self, at, committed, times](const observed_gradients& g) {
    if (g.step < at || *times <= 0 || (!committed.empty() && !fs::exists(committed))) return;
    --*times;
    self->quit(caf::make_error(caf::sec::runtime_error, "injected: an actor of the job died at step " + std::to_string(g.step)));
  }};
}

job_extras dying_actor(int64_t at, std::string committed, std::shared_ptr<int> times) {
  job_extras e;
  e.gradient_observers.push_back(
      [at, committed, times](caf::actor_system& sys) { return sys.spawn(dies_at, at, committed, times); });
  return e;
}

// --max-restarts in one process: a job that loses an actor after the checkpoint at step 8 is
// committed (at step 13 or later), or at step 3 (before any), starts again from the latest
// checkpoint (or the beginning) and ends with the uninterrupted run's parameters, bit for bit.
// Dying more often than max_restarts lets the failure through.
TEST(CheckpointRestart, AJobThatLosesAnActorRestartsFromItsLatestCheckpointAndEndsBitwiseTheSame) {
  const fs::path dir = scratch("restart");
  auto slowed = [](train_config c) {
    c.stragglers = {straggler_spec{0, 20}};  // 20 ms a step: the commit of step 8 lands well before the end
    return c;
  };
  const train_summary want = run_training(slowed(config_for("mlp", "adamw", L(2, 1, 1, 1, 0), dir / "plain")));
  for (int64_t at : {13, 3}) {
    train_config cfg = slowed(config_for("mlp", "adamw", L(2, 1, 1, 1, 0), dir / ("at" + std::to_string(at))));
    cfg.checkpoint_dir = (dir / ("ckpt" + std::to_string(at))).string();
    cfg.checkpoint_every = 8;
    cfg.max_restarts = 1;
    const std::string committed = at > 8 ? cfg.checkpoint_dir + "/step-00000008/manifest.capnp" : "";
    const train_summary got = run_training(cfg, dying_actor(at, committed, std::make_shared<int>(1)));
    EXPECT_EQ(got.restarts, 1);
    if (at > 8) EXPECT_TRUE(got.first_step == 8 || got.first_step == 16) << got.first_step;
    else EXPECT_EQ(got.first_step, 0);
    EXPECT_EQ(got.final_params.to_vector(), want.final_params.to_vector()) << "died at step " << at;
    EXPECT_EQ(got.losses.back(), want.losses.back());
  }
  train_config cfg = slowed(config_for("mlp", "adamw", L(2, 1, 1, 1, 0), dir / "twice"));
  cfg.checkpoint_dir = (dir / "ckpt-twice").string();
  cfg.checkpoint_every = 8;
  cfg.max_restarts = 1;
  try {
    run_training(cfg, dying_actor(3, "", std::make_shared<int>(2)));
    FAIL() << "a job that failed twice with max_restarts 1 succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos) << e.what();
  }
}

std::string failure_of(const train_config& cfg) {
  try {
    run_training(cfg);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A plain MLP job of 4 steps that saved its checkpoint under dir/ckpt.
train_config saved_after_4_steps(const fs::path& dir) {
  train_config saver = config_for("mlp", "adamw", L(1, 1, 1, 1, 0), dir / "a");
  saver.checkpoint_dir = (dir / "ckpt").string();
  saver.max_steps = 4;
  run_training(saver);
  return saver;
}

TEST(CheckpointRefusedByAJob, AnotherModelsCheckpointIsRefusedBeforeTheStartNamingIt) {
  const fs::path dir = scratch("other-model");
  const train_config saver = saved_after_4_steps(dir);
  train_config other = config_for("mlp", "adamw", L(1, 1, 1, 1, 0), dir / "b");
  other.model.hidden = {16, 16, 16};
  other.resume = saver.checkpoint_dir;
  const std::string why = failure_of(other);
  EXPECT_NE(why.find("another model"), std::string::npos) << why;
  EXPECT_NE(why.find("step-00000004"), std::string::npos) << why;
  train_config sgd = config_for("mlp", "sgd", L(1, 1, 1, 1, 0), dir / "c");
  sgd.resume = saver.checkpoint_dir;
  EXPECT_NE(failure_of(sgd).find("adamw"), std::string::npos);
}

TEST(CheckpointRefusedByAJob, ACorruptShardStopsTheResumedJobNamingTheFile) {
  const fs::path dir = scratch("corrupt");
  const train_config saver = saved_after_4_steps(dir);
  const fs::path shard = fs::path(saver.checkpoint_dir) / "step-00000004" / "rank-00000.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x55');
  }
  train_config resumed = config_for("mlp", "adamw", L(1, 1, 1, 1, 0), dir / "b");
  resumed.resume = saver.checkpoint_dir;
  const std::string why = failure_of(resumed);
  EXPECT_NE(why.find("rank-00000.bin"), std::string::npos) << why;
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(shard));  // nothing was overwritten
}

TEST(CheckpointRefusedByAJob, ACheckpointAtTheLastStepLeavesNothingToTrain) {
  const fs::path dir = scratch("at-end");
  train_config saver = config_for("mlp", "adamw", L(1, 1, 1, 1, 0), dir / "a");
  saver.checkpoint_dir = (dir / "ckpt").string();
  run_training(saver);
  train_config again = config_for("mlp", "adamw", L(1, 1, 1, 1, 0), dir / "b");
  again.resume = saver.checkpoint_dir;
  EXPECT_NE(failure_of(again).find("nothing left to train"), std::string::npos);
}

}  // namespace
