// The device ledger counts what is really held: a tensor's charge lives exactly as long as its
// storage and is its bytes (2 an element for bf16), a storage is counted once however many hold
// it, a kind can be moved, the cap refuses with the numbers, and sizes parse. And ZeRO-2's gradient units: a stack whose gradients are
// split per unit computes the same bits as the flat buffer, holds only the units backward has
// reached, and counts them on the ledger.
#include <gtest/gtest.h>

#include "kernels/device_memory.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/pipeline_chunk.hpp"

namespace troupe {
namespace {

int64_t live(const std::shared_ptr<device_memory>& m, memory_kind k) { return m->live().of(k); }

TEST(DeviceMemory, AChargeLastsAsLongAsTheStorageAndCountsSharedStorageOnce) {
  auto m = device_memory::make("test");
  {
    tensor a({10});
    m->charge(a, memory_kind::parameters);
    EXPECT_EQ(live(m, memory_kind::parameters), 40);
    tensor b = a;                          // the same storage
    m->charge(b, memory_kind::gradients);  // already charged: the first kind stands
    EXPECT_EQ(live(m, memory_kind::parameters), 40);
    EXPECT_EQ(live(m, memory_kind::gradients), 0);
    a = tensor();
    EXPECT_EQ(live(m, memory_kind::parameters), 40);  // b still holds it
  }
  EXPECT_EQ(m->live().total(), 0);
  EXPECT_EQ(m->peak().of(memory_kind::parameters), 40);
  EXPECT_EQ(m->peak_total(), 40);
}

TEST(DeviceMemory, AChargeIsTheTensorsBytesForItsDtype) {
  auto m = device_memory::make("test");
  tensor a({10}, dtype::bf16, device{});
  m->charge(a, memory_kind::activations);
  EXPECT_EQ(live(m, memory_kind::activations), 20);
  tensor b({10}, dtype::f16, device{});
  m->charge(b, memory_kind::activations);
  EXPECT_EQ(live(m, memory_kind::activations), 40);
}

TEST(DeviceMemory, PeaksPerKindAndTogetherAreTheMostHeldAtOnce) {
  auto m = device_memory::make("test");
  tensor p({100});
  m->charge(p, memory_kind::parameters);
  {
    tensor g({50});
    m->charge(g, memory_kind::gradients);
    memory_charge act(m, memory_kind::activations, 1000);
    EXPECT_EQ(m->live().total(), 400 + 200 + 1000);
  }
  memory_charge later(m, memory_kind::activations, 300);
  EXPECT_EQ(m->peak().of(memory_kind::activations), 1000);
  EXPECT_EQ(m->peak().of(memory_kind::gradients), 200);
  EXPECT_EQ(m->peak_total(), 1600);
  EXPECT_EQ(m->live().total(), 700);
  m->reset_peaks();
  EXPECT_EQ(m->peak_total(), 700);
}

TEST(DeviceMemory, RechargeMovesTheBytesToAnotherKindUntilTheStorageDies) {
  auto m = device_memory::make("test");
  tensor g({8});
  m->charge(g, memory_kind::gradients);
  m->recharge(g, memory_kind::buffers);
  EXPECT_EQ(live(m, memory_kind::gradients), 0);
  EXPECT_EQ(live(m, memory_kind::buffers), 32);
  g = tensor();
  EXPECT_EQ(m->live().total(), 0);
}

TEST(DeviceMemory, TheCapRefusesNamingTheKindTheRequestAndWhatIsLive) {
  auto m = device_memory::make("rank 3 (cpu)", 1000);
  tensor p({200});  // 800 bytes
  m->charge(p, memory_kind::parameters);
  tensor g({100});  // 400 more: over
  try {
    m->charge(g, memory_kind::gradients);
    FAIL() << "no refusal";
  } catch (const device_memory_exhausted& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 3 (cpu)"), std::string::npos) << what;
    EXPECT_NE(what.find("400 B more of gradients"), std::string::npos) << what;
    EXPECT_NE(what.find("1000 B"), std::string::npos) << what;
    EXPECT_NE(what.find("parameters 800 B"), std::string::npos) << what;
  }
  EXPECT_EQ(m->live().total(), 800);  // the refused charge left nothing behind
  EXPECT_EQ(g.charge(), nullptr);
  EXPECT_THROW(m->adjust(memory_kind::activations, 201), device_memory_exhausted);
  m->adjust(memory_kind::activations, 200);  // exactly at the cap is allowed
  EXPECT_EQ(m->live().total(), 1000);
}

TEST(DeviceMemory, ParsesSizesWithUnitsAndRefusesNonsenseByName) {
  EXPECT_EQ(parse_bytes("512"), 512);
  EXPECT_EQ(parse_bytes("4KiB"), 4096);
  EXPECT_EQ(parse_bytes("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(parse_bytes("2e9"), 2000000000);
  EXPECT_EQ(parse_bytes("3 MB"), 3000000);
  EXPECT_EQ(parse_bytes("64M"), int64_t{64} << 20);
  for (const char* bad : {"", "lots", "12 parsecs", "-1GiB", "1e30TiB"}) {
    try {
      parse_bytes(bad);
      FAIL() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
}

model_spec mlp() {
  model_spec s;
  s.kind = model_kind::mlp;
  s.inputs = 6;
  s.hidden = {5, 4};
  s.classes = 3;
  return s;  // linear relu linear relu linear: 35, 0, 24, 0, 15 parameters
}

tensor inputs(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d;
  tensor x({4, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = d(rng);
  return x;
}

const std::vector<int32_t> labels = {0, 2, 1, 2};

TEST(SplitGradients, UnitsHoldTheFlatBuffersBitsAndOnlyWhatBackwardReached) {
  pipeline_chunk flat(build_layers(mlp()), 0, 42), split(build_layers(mlp()), 0, 42);
  // Units as gradient buckets are cut: last layers first; relus join the unit below them.
  split.stack().split_grads({{3, 4}, {1, 2}, {0, 0}});
  auto m = device_memory::make("test");
  split.account_to(m);
  EXPECT_EQ(live(m, memory_kind::gradients), 0);  // nothing until backward reaches a unit
  for (int mb = 0; mb < 2; ++mb) {                // two microbatches accumulate into the units
    for (pipeline_chunk* c : {&flat, &split}) {
      const loss_result l = cross_entropy(c->forward(mb, inputs(static_cast<uint64_t>(mb))), labels, 0.125f);
      std::vector<size_t> reached;
      c->backward(mb, l.dlogits, false, [&](size_t layer) {
        if (c == &split && mb == 0 && layer == 3) {
          EXPECT_EQ(live(m, memory_kind::gradients), 4 * 15) << "only the top unit";
        }
        reached.push_back(layer);
      });
    }
  }
  EXPECT_EQ(live(m, memory_kind::gradients), 4 * (35 + 24 + 15));
  const std::vector<float> want = flat.stack().grads().to_vector();
  std::vector<float> got;
  for (size_t u : {2, 1, 0}) {  // in layer order
    const tensor g = split.stack().take_unit_grads(u);
    got.insert(got.end(), g.data(), g.data() + g.numel());
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(live(m, memory_kind::gradients), 0);  // taken and dropped: freed
  EXPECT_THROW(split.stack().grads(), std::logic_error);
  // A unit backward never reached comes back as zeros of its size.
  const tensor none = split.stack().take_unit_grads(1);
  EXPECT_EQ(none.numel(), 24);
  for (int64_t i = 0; i < none.numel(); ++i) EXPECT_EQ(none[i], 0.0f);
}

TEST(SplitGradients, RefusesALayerWithParametersInNoUnitOrInTwo) {
  pipeline_chunk c(build_layers(mlp()), 0, 42);
  EXPECT_THROW(c.stack().split_grads({{3, 4}, {0, 1}}), std::invalid_argument);  // layer 2 in none
  EXPECT_THROW(c.stack().split_grads({{2, 4}, {0, 2}}), std::invalid_argument);  // layer 2 in two
  c.stack().split_grads({{1, 4}, {0, 0}});
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

// ZeRO-3's parameter units: a stack without a flat parameter buffer, each unit's parameters set
// just before its first layer and released right after its last, computes the flat stack's bits
// forward and backward while holding at most one unit's parameters, and refuses to run a layer
// whose unit holds none.
TEST(SplitParameters, UnitsStreamedInAndOutGiveTheFlatStacksBitsHoldingOneUnitAtATime) {
  pipeline_chunk flat(build_layers(mlp()), 0, 42), split(build_layers(mlp()), 0, 42);
  layer_stack& st = split.stack();
  st.split_grads({{3, 4}, {1, 2}, {0, 0}});
  const tensor full = st.params().clone();  // what the data-parallel group would gather from
  st.split_params();
  auto m = device_memory::make("test");
  split.account_to(m);
  EXPECT_EQ(live(m, memory_kind::parameters), 0);
  std::vector<int> unit_of(st.num_layers(), -1);
  for (size_t u = 0; u < st.num_units(); ++u)
    for (size_t i = st.unit_layers(u).first; i <= st.unit_layers(u).second; ++i) unit_of[i] = static_cast<int>(u);
  int64_t most = 0;
  auto fetch = [&](size_t layer, bool going_up) {
    const auto u = static_cast<size_t>(unit_of[layer]);
    const auto [first, last] = st.unit_layers(u);
    if (layer != (going_up ? first : last)) return;
    tensor part({st.unit_size(u)});
    std::copy(full.data() + st.unit_offset(u), full.data() + st.unit_offset(u) + st.unit_size(u), part.data());
    part.freeze();
    st.set_unit_params(u, part);
    most = std::max(most, live(m, memory_kind::parameters));
  };
  auto release = [&](size_t layer, bool going_up) {
    const auto u = static_cast<size_t>(unit_of[layer]);
    if (layer == (going_up ? st.unit_layers(u).second : st.unit_layers(u).first)) st.release_unit_params(u);
  };
  stack_context flat_ctx, split_ctx;
  const tensor x = inputs(7);
  const tensor want = flat.stack().forward(x, flat_ctx);
  const tensor got = st.forward(x, split_ctx, [&](size_t i) { fetch(i, true); }, [&](size_t i) { release(i, true); });
  EXPECT_EQ(got.to_vector(), want.to_vector());
  const loss_result l = cross_entropy(want, labels, 0.25f);
  flat.stack().backward(l.dlogits, flat_ctx, true);
  st.backward(l.dlogits, split_ctx, true, [&](size_t i) { release(i, false); }, [&](size_t i) { fetch(i, false); });
  std::vector<float> grads;
  for (size_t u : {2, 1, 0}) {
    const tensor g = st.take_unit_grads(u);
    grads.insert(grads.end(), g.data(), g.data() + g.numel());
  }
  EXPECT_EQ(grads, flat.stack().grads().to_vector());
  EXPECT_EQ(most, 4 * 35);  // the largest unit alone: 6 x 5 + 5
  EXPECT_EQ(live(m, memory_kind::parameters), 0);
  stack_context ctx;
  EXPECT_THROW(st.forward(x, ctx), std::logic_error);  // nothing fetched
}

}  // namespace
}  // namespace troupe
