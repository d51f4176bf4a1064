// Every message type survives CAF's binary serializer: deserializing what was serialized gives
// the same fields (checked by value, and by re-serializing to the same bytes), tensors arrive
// frozen, and malformed tensor bytes are refused instead of building a wrong tensor.
#include <gtest/gtest.h>

#include "tests/actors/round_trip.hpp"

using namespace troupe;

namespace {

using message_fixture = test::round_trip_fixture;

tensor sample_tensor() { return tensor({2, 3}, {1.5f, -2.0f, 0.0f, 3.25f, 1e-7f, -1e7f}); }

batch sample_batch() {
  batch b;
  b.inputs = sample_tensor();
  b.targets = {3, 9};
  return b;
}

void expect_same(const tensor& a, const tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.to_vector(), b.to_vector());
}

}  // namespace

TEST_F(message_fixture, TensorRoundTripsAndArrivesFrozen) {
  tensor t = sample_tensor();
  tensor u = round_trip(t);
  expect_same(t, u);
  EXPECT_TRUE(u.frozen());
  EXPECT_THROW(u.data(), std::logic_error);
  expect_same(round_trip(tensor()), tensor());
}

TEST_F(message_fixture, TensorWithBytesThatDoNotMatchItsShapeIsRefused) {
  shape_t shape{4, 4};  // promises 64 bytes
  std::vector<char> bytes(12);
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  ASSERT_EQ(sink(shape, bytes), caf::none);
  tensor t;
  caf::binary_deserializer source{*sys, buf};
  EXPECT_NE(source(t), caf::none);
  EXPECT_TRUE(t.empty());
}

TEST_F(message_fixture, TensorWithNegativeDimensionIsRefused) {
  shape_t shape{-1, 4};
  std::vector<char> bytes;
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  ASSERT_EQ(sink(shape, bytes), caf::none);
  tensor t;
  caf::binary_deserializer source{*sys, buf};
  EXPECT_NE(source(t), caf::none);
}

TEST_F(message_fixture, BatchMessagesRoundTrip) {
  auto b = round_trip(batch_msg{17, sample_batch()});
  EXPECT_EQ(b.step, 17);
  expect_same(b.data.inputs, sample_tensor());
  EXPECT_EQ(b.data.targets, (std::vector<int32_t>{3, 9}));
  EXPECT_EQ(round_trip(batch_request{5}).step, 5);
  EXPECT_EQ(round_trip(batch_request{5, 41}).unit, 41);
  auto u = round_trip(unit_request{20, 40, 2, 17});
  EXPECT_EQ(u.run, 20);
  EXPECT_EQ(u.until, 40);
  EXPECT_EQ(u.replica, 2);
  EXPECT_EQ(u.step, 17);
  auto g = round_trip(unit_grant{20, 17, 93});
  EXPECT_EQ(g.run, 20);
  EXPECT_EQ(g.step, 17);
  EXPECT_EQ(g.unit, 93);
  auto e = round_trip(eval_batch_msg{2, 3, 10, sample_batch()});
  EXPECT_EQ(e.epoch, 2);
  EXPECT_EQ(e.index, 3);
  EXPECT_EQ(e.total, 10);
  expect_same(e.data.inputs, sample_tensor());
  auto er = round_trip(eval_batch_request{4, 6});
  EXPECT_EQ(er.epoch, 4);
  EXPECT_EQ(er.index, 6);
}

TEST_F(message_fixture, CoordinatorMessagesRoundTrip) {
  auto o = round_trip(step_order{123, 468});
  EXPECT_EQ(o.step, 123);
  EXPECT_EQ(o.until, 468);
  EXPECT_EQ(round_trip(eval_order{3}).epoch, 3);
  auto e = round_trip(eval_report{1, 99.0, 1000, 870, 1000});
  EXPECT_EQ(e.epoch, 1);
  EXPECT_EQ(e.loss_sum, 99.0);
  EXPECT_EQ(e.correct, 870);
  EXPECT_EQ(e.samples, 1000);
  EXPECT_EQ(round_trip(params_request{2}).stage, 2);
}

TEST_F(message_fixture, OptimizerMessagesRoundTrip) {
  auto g = round_trip(gradients_msg{9, 1024, sample_tensor()});
  EXPECT_EQ(g.step, 9);
  EXPECT_EQ(g.offset, 1024);
  expect_same(g.grads, sample_tensor());
  EXPECT_EQ(g.unit, -1);  // bsp's fixed share
  auto d = round_trip(gradients_msg{9, 0, sample_tensor(), 1, 57, 21, true});
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.unit, 57);
  EXPECT_EQ(d.next_round, 21);
  EXPECT_TRUE(d.fresh);
  auto p = round_trip(params_msg{-1, 0, sample_tensor()});
  EXPECT_EQ(p.step, -1);
  expect_same(p.params, sample_tensor());
}

TEST(TensorInProcess, SendingSharesStorageAndFreezesIt) {
  tensor t = sample_tensor();
  gradients_msg m{0, 0, t};
  m.grads.freeze();
  EXPECT_TRUE(m.grads.shares_storage_with(t));
  EXPECT_THROW(t.data(), std::logic_error);  // the sender cannot change what it sent
}
