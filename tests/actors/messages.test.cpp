// Every message type survives CAF's binary serializer: deserializing what was serialized gives
// the same fields (checked by value, and by re-serializing to the same bytes), tensors arrive
// frozen with their dtype, and malformed tensor bytes (a wrong length, an unknown dtype byte) or a
// GPU tensor are refused instead of building a wrong tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>

#include "kernels/allocator.hpp"
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

TEST_F(message_fixture, TensorsOfEveryDtypeRoundTripBitForBit) {
  for (dtype d : {dtype::f32, dtype::bf16, dtype::f16}) {
    tensor t = sample_tensor().to(d);
    tensor u = round_trip(t);
    EXPECT_EQ(u.type(), d);
    EXPECT_EQ(u.shape(), t.shape());
    EXPECT_TRUE(u.where().is_cpu());
    EXPECT_TRUE(u.frozen());
    ASSERT_EQ(u.nbytes(), t.nbytes());
    EXPECT_EQ(std::memcmp(std::as_const(u).raw(), std::as_const(t).raw(), static_cast<size_t>(t.nbytes())), 0)
        << to_string(d);
  }
  tensor none = round_trip(tensor({0, 3}, dtype::bf16, device{}));
  EXPECT_EQ(none.type(), dtype::bf16);
  EXPECT_EQ(none.shape(), (shape_t{0, 3}));
}

TEST_F(message_fixture, ASliceOfABf16TensorCrossesAsItsElements) {
  tensor t = sample_tensor().to(dtype::bf16);
  t.freeze();
  tensor_slice s{t, 2, 3};
  tensor_slice u = round_trip(s);
  EXPECT_EQ(u.base.type(), dtype::bf16);
  ASSERT_EQ(u.count, 3);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::as_const(u.base).data_as<bf16>()[i].bits, std::as_const(t).data_as<bf16>()[2 + i].bits);
}

namespace {

// What a peer would put on the wire: shape, dtype byte, bytes.
std::vector<char> wire_tensor(caf::actor_system& sys, shape_t shape, uint8_t type, std::vector<char> bytes) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  EXPECT_EQ(sink(shape, type, bytes), caf::none);
  return buf;
}

std::string refusal_of(caf::actor_system& sys, const std::vector<char>& buf, tensor& t) {
  caf::binary_deserializer source{sys, buf};
  const caf::error e = source(t);
  return e ? sys.render(e) : "(accepted)";
}

}  // namespace

TEST_F(message_fixture, TensorWithBytesThatDoNotMatchItsShapeIsRefused) {
  tensor t;
  // (4, 4) f32 promises 64 bytes.
  std::string why = refusal_of(*sys, wire_tensor(*sys, {4, 4}, 0, std::vector<char>(12)), t);
  EXPECT_NE(why.find("needs 64 bytes, the wire has 12"), std::string::npos) << why;
  EXPECT_TRUE(t.empty());
  // bf16 elements are two bytes: f32's count for the same shape is refused.
  why = refusal_of(*sys, wire_tensor(*sys, {4}, 1, std::vector<char>(16)), t);
  EXPECT_NE(why.find("of bf16 needs 8 bytes"), std::string::npos) << why;
  EXPECT_TRUE(t.empty());
}

TEST_F(message_fixture, TensorWithAnUnknownDtypeByteIsRefused) {
  tensor t;
  const std::string why = refusal_of(*sys, wire_tensor(*sys, {2}, 7, std::vector<char>(8)), t);
  EXPECT_NE(why.find("dtype byte 7"), std::string::npos) << why;
  EXPECT_TRUE(t.empty());
}

TEST_F(message_fixture, TensorWithNegativeDimensionIsRefused) {
  tensor t;
  EXPECT_NE(refusal_of(*sys, wire_tensor(*sys, {-1, 4}, 0, {}), t), "(accepted)");
}

TEST_F(message_fixture, AGpuTensorIsRefusedByTheSender) {
  // Host memory that says it is cuda:1: what the serializer sees of a GPU tensor, without a GPU.
  struct gpu_standin final : allocator {
    void* allocate(size_t bytes) override { return cpu_allocator()->allocate(bytes); }
    void deallocate(void* p, size_t bytes) noexcept override { cpu_allocator()->deallocate(p, bytes); }
    void zero(void* p, size_t bytes) override { cpu_allocator()->zero(p, bytes); }
    device where() const override { return {device_type::cuda, 1}; }
  };
  tensor t = tensor::uninitialized({2, 3}, dtype::bf16, std::make_shared<gpu_standin>());
  std::vector<char> buf;
  caf::binary_serializer sink{*sys, buf};
  const caf::error e = sink(t);
  ASSERT_TRUE(e);
  const std::string why = sys->render(e);
  EXPECT_NE(why.find("cuda:1"), std::string::npos) << why;
  EXPECT_NE(why.find("NCCL"), std::string::npos) << why;
  EXPECT_NO_THROW(caf::deep_to_string(t));  // printing a message that holds one still works
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
