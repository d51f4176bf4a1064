// The message types of data parallelism, pipelines and multi-process jobs survive CAF's binary
// serializer like the foundation's (messages.test.cpp): each is deserialized with the same
// fields and re-serializes to the same bytes, so any of these actors can live in another process.
#include <gtest/gtest.h>

#include <tuple>

#include "actors/observe/step_trace.hpp"
#include "tests/actors/round_trip.hpp"

using namespace troupe;

namespace {

using parallel_messages = test::round_trip_fixture;

tensor sample() { return tensor({3}, {1.0f, -2.5f, 3.25f}); }

}  // namespace

TEST_F(parallel_messages, CollectiveMessagesRoundTrip) {
  auto r = round_trip(collective_request{7, 2, 1, 3, sample()});
  EXPECT_EQ(r.seq, 7);
  EXPECT_EQ(r.op, 2);
  EXPECT_EQ(r.root, 1);
  EXPECT_EQ(r.data.to_vector(), sample().to_vector());
  auto res = round_trip(collective_result{7, 2, sample(), 1.5});
  EXPECT_EQ(res.finished_at, 1.5);
  EXPECT_EQ(res.data.to_vector(), sample().to_vector());
  // A slice crosses as its own elements only.
  tensor big({5}, {0, 1, 2, 3, 4});
  big.freeze();
  auto chunk = round_trip(ring_chunk{9, 1, 2, 3, 5, 1, tensor_slice{big, 1, 3}});
  EXPECT_EQ(chunk.phase, 2);
  EXPECT_EQ(chunk.data.count, 3);
  EXPECT_EQ(chunk.data.data()[0], 1.0f);
  EXPECT_EQ(chunk.data.data()[2], 3.0f);
  auto setup = round_trip(ring_setup{2, 4, 1024, caf::actor{}});
  EXPECT_EQ(setup.ranks, 4);
  EXPECT_EQ(setup.chunk_elems, 1024);
  round_trip(collective_dump_request{});
  collective_log log{1, 4, {collective_log_entry{3, "all_reduce_sum", 100, 0, 2, "running", 50, 100, 0.5, 0.0}},
                     "tp group 0 (ranks 0,1)"};
  auto l = round_trip(log);
  ASSERT_EQ(l.entries.size(), 1u);
  EXPECT_EQ(l.group, "tp group 0 (ranks 0,1)");
  EXPECT_EQ(l.entries[0].op, "all_reduce_sum");
  EXPECT_EQ(l.entries[0].received, 50);
}

TEST_F(parallel_messages, StageStepRecordRoundTrips) {
  stage_step_record rec;
  rec.step = 5;
  rec.rank = 3;
  rec.loss_sum = 9.0;
  rec.count = 32;
  rec.correct = 20;
  rec.peak_live = 2;
  rec.step_start = 10.5;
  rec.step_end = 11.25;
  rec.compute_seconds = 0.5;
  rec.actions = {"1F0", "1B0", "1R", "1O"};
  rec.start_seconds = {10.5, 10.75, 11.0, 11.125};
  rec.end_seconds = {10.75, 11.0, 11.125, 11.25};
  rec.buckets = {0, 1};
  rec.bucket_sent = {10.9, 11.0};
  rec.bucket_done = {11.1, 11.12};
  auto r = round_trip(rec);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.step_end, 11.25);
  EXPECT_EQ(r.actions, rec.actions);
  EXPECT_EQ(r.end_seconds, rec.end_seconds);
  EXPECT_EQ(r.buckets, rec.buckets);
  EXPECT_EQ(r.bucket_done, rec.bucket_done);
}

TEST_F(parallel_messages, PipelineMessagesRoundTrip) {
  auto m = round_trip(pipeline_tensor_msg{5, true, 3, 1, sample()});
  EXPECT_TRUE(m.is_grad);
  EXPECT_EQ(m.microbatch, 3);
  EXPECT_EQ(m.value.to_vector(), sample().to_vector());
  EXPECT_EQ(round_trip(pipeline_status_request{8}).step, 8);
  auto st = round_trip(pipeline_status{1, 8, 4, 18, 40, "1RA1<0", "activation of microbatch 1", 0.5, {"sent x"}});
  EXPECT_EQ(st.action, "1RA1<0");
  EXPECT_EQ(st.pipeline_log, std::vector<std::string>{"sent x"});
  EXPECT_EQ(st.waiting_for, "activation of microbatch 1");
  EXPECT_EQ(round_trip(pipeline_failure{1, "boom"}).what, "boom");
  EXPECT_EQ(round_trip(pipeline_params_request{1}).stage, 1);
  auto p = round_trip(pipeline_params_msg{1, {1, 3}, {sample(), sample()}, {{0, 2}, {4, 1, 7, 3}}});
  EXPECT_EQ(p.model_chunks, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(p.owned, (std::vector<std::vector<int64_t>>{{0, 2}, {4, 1, 7, 3}}));
  ASSERT_EQ(p.params.size(), 2u);
  EXPECT_EQ(p.params[1].to_vector(), sample().to_vector());
}

TEST_F(parallel_messages, MultiProcessMessagesRoundTrip) {
  auto j = round_trip(join_request{2, "mlp 784-256-10 adamw", "job-7"});
  EXPECT_EQ(j.rank, 2);
  EXPECT_EQ(j.config, "mlp 784-256-10 adamw");
  EXPECT_EQ(j.job_id, "job-7");
  EXPECT_FALSE(round_trip(join_reply{caf::actor{}, {}, caf::actor{}, {}, job_end{}}).coordinator);
  EXPECT_EQ(round_trip(join_reply{caf::actor{}, {caf::actor{}, caf::actor{}}, caf::actor{}, {}, job_end{}}).servers.size(), 2u);
  EXPECT_EQ(round_trip(join_reply{caf::actor{}, {}, caf::actor{}, {caf::actor{}, caf::actor{}, caf::actor{}}, job_end{}}).shards.size(), 3u);
  auto sr = round_trip(server_ready{3, caf::actor{}, {1, 4}, {caf::actor{}, caf::actor{}}});
  EXPECT_EQ(sr.process, 3);
  EXPECT_EQ(sr.ids, (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(sr.servers.size(), 2u);
  train_summary::server_update u{5, 1, 7, 15, 20, 22, 6, true};
  auto rec = round_trip(server_records{{u, {}}});
  ASSERT_EQ(rec.updates.size(), 2u);
  const auto& v = rec.updates[0];
  EXPECT_EQ(std::make_tuple(v.server, v.replica, v.step, v.unit, v.version_read, v.version_applied, v.slowest, v.held),
            std::make_tuple(5, 1, int64_t{7}, int64_t{15}, int64_t{20}, int64_t{22}, int64_t{6}, true));
  EXPECT_FALSE(rec.updates[1].held);
  const process_endpoints serves{{1}, {"10.0.0.2"}, {4242}, "10.0.0.2", 4343};
  auto w = round_trip(worker_ready{3, caf::actor{}, {caf::actor{}, caf::actor{}}, serves, {}});
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.stages.size(), 2u);
  EXPECT_EQ(w.serves.ring_groups, serves.ring_groups);
  EXPECT_EQ(w.serves.ring_ports, serves.ring_ports);
  EXPECT_EQ(w.serves.p2p_port, 4343);
  auto a = round_trip(mesh_addresses{{"10.0.0.1", "10.0.0.2"}, {1, 4242}, {"10.0.0.1", "10.0.0.2"}, {0, 4343}});
  EXPECT_EQ(a.ring_hosts[1], "10.0.0.2");
  EXPECT_EQ(a.p2p_ports[1], 4343);
  job_end end;
  end.report = "rank 2 lost at step 7";
  auto e = round_trip(end);
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.report, "rank 2 lost at step 7");
  // An elastic job's membership change: the next processes, the events and the image.
  job_end change;
  change.ok = true;
  change.processes = {0, 1};
  change.events = "after step 12: lose replica 2\n";
  change.step = 12;
  change.optimizer_steps = 12;
  change.image = tensor({4}, {1.5f, -2.0f, 0.25f, 8.0f});
  auto c = round_trip(change);
  EXPECT_EQ(c.processes, change.processes);
  EXPECT_EQ(c.events, change.events);
  EXPECT_EQ(c.step, 12);
  EXPECT_EQ(c.image.to_vector(), change.image.to_vector());
  join_reply admitted{caf::actor{}, {}, caf::actor{}, {}, change};
  EXPECT_EQ(round_trip(admitted).admitted.processes, change.processes);
}
