// The stage's data-parallel gradient reducer (stage_strategies.hpp: bucket_all_reduce) against
// fake peers: a one-stage MLP whose collective, optimizer shard, data loader and coordinator are
// played by the test, one message at a time. It proves the order the strategy promises: every
// bucket leaves during the backward, top layers first, R holds O until every sum is back, and
// the gradients O hands the shard are exactly the sums the collective returned, each at its
// bucket's place; the step's record names the buckets in the order their sums came back.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "actors/run/runtime_config.hpp"
#include "actors/stage/stage.hpp"
#include "comm/ring_schedule.hpp"
#include "schedules/named.hpp"

namespace troupe {
namespace {

using std::chrono::milliseconds;

TEST(StageBucketReducer, BucketsLeaveTopFirstAndOGetsTheReturnedSumsAtTheirPlaces) {
  caf::actor_system_config sys_cfg;
  configure_runtime(sys_cfg);
  caf::actor_system sys{sys_cfg};
  caf::scoped_actor loader{sys}, optimizer{sys}, collective{sys}, coordinator{sys};

  stage_args a;
  a.model.spec.kind = model_kind::mlp;
  a.model.spec.inputs = 4;
  a.model.spec.hidden = {3};
  a.model.spec.classes = 2;
  const layer_list layers = build_layers(a.model.spec);
  std::vector<int64_t> sizes;
  for (const auto& l : layers) sizes.push_back(l->num_params());
  ASSERT_EQ(sizes, (std::vector<int64_t>{15, 0, 8}));  // linear 4->3, ReLU, linear 3->2
  a.plan = sched::make_named_schedule("gpipe", 1, 1, 1);
  a.model.chunks = {layer_range{0, static_cast<int64_t>(layers.size())}};
  a.run.global_rows = 2;
  a.run.total_steps = 1;
  a.buckets = {plan_buckets(sizes, 0)};  // one bucket per layer with parameters: the top one first
  ASSERT_EQ(a.buckets[0].size(), 2u);
  a.partners.loader = loader;
  a.partners.optimizer = optimizer;
  a.groups.set(sched::axis::dp, collective);
  a.partners.coordinator = coordinator;
  caf::actor stage = spawn_stage(sys, a);

  optimizer->receive([](params_msg& m) { EXPECT_EQ(m.step, -1); },  // the shard's first values
                     caf::after(std::chrono::seconds(10)) >> [] { FAIL() << "no initial parameters"; });
  loader->receive(
      [&](const batch_request& r) {
        EXPECT_EQ(r.step, 0);
        caf::anon_send(stage, batch_msg{0, batch{tensor({2, 4}, {1, 2, 3, 4, -1, 0.5f, 2, -3}), {0, 1}}});
      },
      caf::after(std::chrono::seconds(10)) >> [] { FAIL() << "no batch request"; });
  coordinator->send(stage, step_order{0, 1});

  // The sums the fake group returns: bucket b's values all b + 1, so where each lands is visible.
  for (int b = 0; b < 2; ++b) {
    const grad_bucket& bucket = a.buckets[0][static_cast<size_t>(b)];
    collective->receive(
        [&](collective_request& r) -> collective_result {
          EXPECT_EQ(r.seq, b) << "bucket " << b << " left out of order";
          EXPECT_EQ(r.op, static_cast<int32_t>(ring::op_kind::all_reduce_sum));
          EXPECT_EQ(r.data.numel(), bucket.count);
          EXPECT_EQ(r.total, bucket.count);
          // R: the shard hears nothing while a sum is outstanding.
          bool early = false;
          optimizer->receive([&](gradients_msg&) { early = true; }, caf::after(milliseconds(50)) >> [] {});
          EXPECT_FALSE(early) << "O sent gradients before bucket " << b << "'s sum came back";
          tensor sum({bucket.count}, std::vector<float>(static_cast<size_t>(bucket.count), static_cast<float>(b + 1)));
          sum.freeze();
          return collective_result{r.seq, r.op, sum, 0.0};
        },
        caf::after(std::chrono::seconds(10)) >> [b] { FAIL() << "bucket " << b << " never left"; });
  }

  optimizer->receive(
      [&](gradients_msg& g) {
        ASSERT_EQ(g.grads.numel(), 23);
        for (const grad_bucket& bucket : a.buckets[0]) {
          const float expected = bucket.offset == 15 ? 1.0f : 2.0f;  // bucket 0 is the top layer's
          for (int64_t i = bucket.offset; i < bucket.offset + bucket.count; ++i)
            EXPECT_EQ(std::as_const(g.grads).data()[i], expected) << "element " << i;
        }
        optimizer->send(stage, params_msg{0, 0, g.grads});  // any values: the step ends with them
      },
      caf::after(std::chrono::seconds(10)) >> [] { FAIL() << "O never sent its gradients"; });
  coordinator->receive(
      [](stage_step_record& r) {
        EXPECT_EQ(r.step, 0);
        EXPECT_EQ(r.buckets, (std::vector<int32_t>{0, 1}));
        EXPECT_EQ(r.actions, (std::vector<std::string>{"0F0", "0B0", "0R", "0O"}));
      },
      caf::after(std::chrono::seconds(10)) >> [] { FAIL() << "no step record"; });
  caf::anon_send_exit(stage, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace troupe
