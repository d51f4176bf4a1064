// An optimizer shard's state can be exported and imported (what checkpoints need): 5 steps,
// export, a fresh shard imports it, 5 more steps give bit for bit the parameters of 10 steps
// straight, for SGD with momentum and AdamW (whose bias correction needs the step count), held
// in memory and offloaded to NVMe (state read back from and written to its tiles). A saved
// state that does not fit the shard is refused by name, and the shard goes on.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "actors/actors.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/messages.hpp"
#include "actors/store/offload_store.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;

namespace {

constexpr int64_t kSize = 5000;  // five tiles of 1024 floats offloaded, the last one short

struct fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  void SetUp() override {
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  // A shard of kSize, in memory or over its own offload store.
  caf::actor shard(const std::string& kind, bool nvme, const std::string& name) {
    optimizer_config o;
    o.kind = *parse_optimizer_kind(kind);
    o.momentum = 0.9f;
    shard_memory where;
    if (nvme) {
      const auto dir = test_support::scratch_dir("optimizer-state");
      std::filesystem::create_directories(dir);
      storage::uring_options io;
      io.block_size = 4096;
      io.queue_depth = 2;
      where.tile_floats = 1024;
      where.store = spawn_offload_store(*sys, (dir / name).string(), 5 * 1024 * 3 * 4, io, nullptr);
    }
    return spawn_optimizer_shard(*sys, o, 0, kSize, where);
  }
};

tensor values(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  tensor t({kSize});
  for (int64_t i = 0; i < kSize; ++i) t.data()[i] = d(rng);
  t.freeze();
  return t;
}

tensor step(caf::scoped_actor& self, const caf::actor& shard, int64_t k) {
  tensor out;
  self->request(shard, std::chrono::seconds(30), gradients_msg{k, 0, values(100 + static_cast<uint64_t>(k))})
      .receive([&](params_msg& m) { out = m.params; }, [&](const caf::error& e) { ADD_FAILURE() << to_string(e); });
  return out;
}

class ShardState : public fixture, public ::testing::WithParamInterface<std::tuple<std::string, bool>> {};

TEST_P(ShardState, ExportAfterFiveStepsImportedIntoAFreshShardGivesTheTenStepBits) {
  const auto [kind, nvme] = GetParam();
  caf::scoped_actor self{*sys};
  const caf::actor straight = shard(kind, nvme, kind + "-straight"), first = shard(kind, nvme, kind + "-first"),
                   second = shard(kind, nvme, kind + "-second");
  for (const auto& s : {straight, first, second}) self->send(s, params_msg{-1, 0, values(1)});
  tensor want;
  for (int64_t k = 0; k < 10; ++k) want = step(self, straight, k);
  for (int64_t k = 0; k < 5; ++k) step(self, first, k);
  shard_state saved;
  self->request(first, std::chrono::seconds(20), shard_state_request{})
      .receive([&](shard_state& s) { saved = std::move(s); }, [&](const caf::error& e) { FAIL() << to_string(e); });
  EXPECT_EQ(saved.steps, 5);
  EXPECT_EQ(saved.optimizer, kind);
  EXPECT_EQ(saved.state.numel(), saved.state_floats * kSize);
  self->request(second, std::chrono::seconds(20), saved)
      .receive([&](const shard_state_restored& r) { EXPECT_EQ(r.steps, 5); },
               [&](const caf::error& e) { FAIL() << to_string(e); });
  tensor got;
  for (int64_t k = 5; k < 10; ++k) got = step(self, second, k);
  EXPECT_EQ(got.to_vector(), want.to_vector());
  for (const auto& s : {straight, first, second}) self->send_exit(s, caf::exit_reason::user_shutdown);
}

INSTANTIATE_TEST_SUITE_P(InMemoryAndOnNvme, ShardState,
                         ::testing::Combine(::testing::Values("sgd", "adamw"), ::testing::Bool()),
                         [](const auto& i) {
                           return std::get<0>(i.param) + (std::get<1>(i.param) ? "_nvme" : "_memory");
                         });

TEST_F(fixture, ASavedStateOfAnotherOptimizerOrSizeIsRefusedByName) {
  caf::scoped_actor self{*sys};
  const caf::actor adamw = shard("adamw", false, "");
  self->send(adamw, params_msg{-1, 0, values(1)});
  shard_state wrong{0, 3, "sgd", 1, values(2), values(3)};
  std::string why;
  self->request(adamw, caf::infinite, wrong)
      .receive([&](const shard_state_restored&) { why = "restored"; }, [&](const caf::error& e) { why = to_string(e); });
  EXPECT_NE(why.find("cannot take the saved state"), std::string::npos) << why;
  EXPECT_NE(why.find("sgd, 1 state arrays"), std::string::npos) << why;
  EXPECT_EQ(step(self, adamw, 0).numel(), kSize);  // it goes on
  self->send_exit(adamw, caf::exit_reason::user_shutdown);
}

}  // namespace
