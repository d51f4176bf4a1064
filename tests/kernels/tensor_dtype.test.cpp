// tensor v2's data contracts: bf16 / f16 conversions against known bit patterns (the same as
// CUDA's; half.hpp), typed access that refuses the wrong dtype or device, the converting copy,
// byte sizes, and the text forms of dtypes and devices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/allocator.hpp"
#include "kernels/tensor.hpp"

using namespace troupe;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST(Bf16, ExactValuesKeepTheirBits) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(to_bf16(-2.5f).bits, 0xC020);
  EXPECT_EQ(to_bf16(0.0f).bits, 0x0000);
  EXPECT_EQ(to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_float(bf16{0x3F80}), 1.0f);
  EXPECT_EQ(to_float(bf16{0xC020}), -2.5f);
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(to_bf16(from_bits(0x3F808000)).bits, 0x3F80);  // tie, 0x3F80 even: down
  EXPECT_EQ(to_bf16(from_bits(0x3F818000)).bits, 0x3F82);  // tie, 0x3F81 odd: up
  EXPECT_EQ(to_bf16(from_bits(0x3F808001)).bits, 0x3F81);  // above half: up
  EXPECT_EQ(to_bf16(from_bits(0x3F807FFF)).bits, 0x3F80);  // below half: down
}

TEST(Bf16, SubnormalsInfinityAndNan) {
  EXPECT_EQ(to_bf16(from_bits(0x00010000)).bits, 0x0001);  // the smallest subnormal, 2^-133
  EXPECT_EQ(to_float(bf16{0x0001}), from_bits(0x00010000));
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7F80);
  EXPECT_EQ(to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xFF80);
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80);  // rounds past the largest bf16
  EXPECT_EQ(to_bf16(std::nanf("")).bits, 0x7FFF);                     // CUDA's canonical NaN
  EXPECT_EQ(to_bf16(from_bits(0xFF800001)).bits, 0x7FFF);             // a NaN RNE would carry to -inf
  EXPECT_TRUE(std::isnan(to_float(bf16{0x7FFF})));
}

TEST(F16, ExactValuesKeepTheirBits) {
  EXPECT_EQ(to_f16(1.0f).bits, 0x3C00);
  EXPECT_EQ(to_f16(-2.5f).bits, 0xC100);
  EXPECT_EQ(to_f16(65504.0f).bits, 0x7BFF);  // the largest f16
  EXPECT_EQ(to_float(f16{0x3C00}), 1.0f);
  EXPECT_EQ(to_float(f16{0xC100}), -2.5f);
  EXPECT_EQ(to_float(f16{0x7BFF}), 65504.0f);
  EXPECT_EQ(to_f16(-0.0f).bits, 0x8000);
}

TEST(F16, SubnormalsRoundToNearestEven) {
  EXPECT_EQ(to_f16(0x1p-24f).bits, 0x0001);  // the smallest subnormal
  EXPECT_EQ(to_float(f16{0x0001}), 0x1p-24f);
  EXPECT_EQ(to_float(f16{0x03FF}), 1023 * 0x1p-24f);  // the largest subnormal
  EXPECT_EQ(to_f16(0x1p-25f).bits, 0x0000);            // a tie with zero: even
  EXPECT_EQ(to_f16(0x1.8p-24f).bits, 0x0002);          // a tie between 1 and 2: even
  EXPECT_EQ(to_f16(1.0f + 0x1p-11f).bits, 0x3C00);     // a tie above 1.0: even, down
  EXPECT_EQ(to_f16(1.0f + 0x3p-11f).bits, 0x3C02);     // a tie, odd below: up
}

TEST(F16, OverflowGoesToInfinityAndNanStaysNan) {
  EXPECT_EQ(to_f16(65519.0f).bits, 0x7BFF);  // below the midpoint to 65536: the largest f16
  EXPECT_EQ(to_f16(65520.0f).bits, 0x7C00);  // the midpoint, odd below: infinity
  EXPECT_EQ(to_f16(1e10f).bits, 0x7C00);
  EXPECT_EQ(to_f16(-1e10f).bits, 0xFC00);
  EXPECT_EQ(to_f16(std::numeric_limits<float>::infinity()).bits, 0x7C00);
  EXPECT_EQ(to_f16(std::nanf("")).bits, 0x7FFF);
  EXPECT_TRUE(std::isnan(to_float(f16{0x7FFF})));
  EXPECT_TRUE(std::isinf(to_float(f16{0xFC00})));
  EXPECT_LT(to_float(f16{0xFC00}), 0.0f);
}

TEST(TensorDtype, DataOnABf16TensorThrowsNamingBf16) {
  tensor t({2, 3}, dtype::bf16, device{});
  EXPECT_EQ(t.type(), dtype::bf16);
  const std::string m = message_of([&] { t.data(); });
  EXPECT_NE(m.find("bf16"), std::string::npos) << m;
  EXPECT_NE(m.find("cpu:0"), std::string::npos) << m;
  EXPECT_THROW(std::as_const(t).data(), std::logic_error);
  EXPECT_THROW(t.to_vector(), std::logic_error);
  EXPECT_EQ(t.data_as<bf16>()[5].bits, 0);  // zero-filled
}

TEST(TensorDtype, DataAsOfAnotherDtypeThrows) {
  tensor t({4});
  const std::string m = message_of([&] { t.data_as<bf16>(); });
  EXPECT_NE(m.find("data_as<bf16>"), std::string::npos) << m;
  EXPECT_NE(m.find("f32"), std::string::npos) << m;
  EXPECT_THROW(std::as_const(t).data_as<f16>(), std::logic_error);
  EXPECT_EQ(t.data_as<float>(), t.data());
  EXPECT_EQ(t.raw(), static_cast<void*>(t.data()));
}

TEST(TensorDtype, FrozenRefusesEveryMutableAccess) {
  tensor t({3}, dtype::f16, device{});
  t.freeze();
  EXPECT_THROW(t.data_as<f16>(), std::logic_error);
  EXPECT_THROW(t.raw(), std::logic_error);
  EXPECT_NE(std::as_const(t).raw(), nullptr);
  EXPECT_NE(std::as_const(t).data_as<f16>(), nullptr);
}

TEST(TensorDtype, ToBf16AndBackEqualsRoundingEachElement) {
  const std::vector<float> v{1.0f, -2.5f, from_bits(0x3F808000), from_bits(0x3F818000), 3.14159265f, 1e-40f, 65504.0f,
                             1e30f, -0.0f};
  tensor t({3, 3}, v);
  tensor b = t.to(dtype::bf16);
  EXPECT_EQ(b.type(), dtype::bf16);
  EXPECT_EQ(b.shape(), t.shape());
  EXPECT_FALSE(b.shares_storage_with(t));
  const std::vector<float> back = b.to(dtype::f32).to_vector();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(b.data_as<bf16>()[i].bits, to_bf16(v[i]).bits) << i;
    EXPECT_EQ(back[i], to_float(to_bf16(v[i]))) << i;
  }
  const std::vector<float> via_f16 = t.to(dtype::f16).to(dtype::f32).to_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (std::isinf(to_float(to_f16(v[i])))) EXPECT_TRUE(std::isinf(via_f16[i])) << i;
    else EXPECT_EQ(via_f16[i], to_float(to_f16(v[i]))) << i;
  // bf16 -> f16 goes through float, rounding once more.
  EXPECT_EQ(b.to(dtype::f16).data_as<f16>()[1].bits, to_f16(-2.5f).bits);
}

TEST(TensorDtype, ToTheSameDtypeIsACopy) {
  tensor t({2}, {1.0f, 2.0f});
  tensor u = t.to(dtype::f32);
  EXPECT_FALSE(u.shares_storage_with(t));
  EXPECT_EQ(u.to_vector(), t.to_vector());
}

TEST(TensorDtype, NbytesIsElementsTimesTheDtypeSize) {
  EXPECT_EQ(size_of(dtype::f32), 4u);
  EXPECT_EQ(size_of(dtype::bf16), 2u);
  EXPECT_EQ(size_of(dtype::f16), 2u);
  EXPECT_EQ(tensor({3, 5}).nbytes(), 60);
  EXPECT_EQ(tensor({3, 5}, dtype::bf16, device{}).nbytes(), 30);
  EXPECT_EQ(tensor::uninitialized({7}, dtype::f16, device{}).nbytes(), 14);
  EXPECT_EQ(tensor().nbytes(), 0);
  EXPECT_EQ(tensor({0, 4}, dtype::bf16, device{}).nbytes(), 0);
}

TEST(TensorDtype, ACpuAllocationTooLargeIsABadAllocNamingTheSize) {
  try {
    tensor::uninitialized({int64_t{1} << 60});  // 4 EiB
    FAIL() << "allocated 4 EiB";
  } catch (const std::bad_alloc& e) {  // what actor_failure.cpp reports as "out of memory"
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST(TensorDtype, CpuTensorsAreCacheLineAligned) {
  for (int64_t n : {1, 3, 17, 1000}) {
    tensor t({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << n;
  }
}

TEST(TensorDtype, DtypeNamesRoundTrip) {
  for (dtype d : all_dtypes) EXPECT_EQ(parse_dtype(to_string(d)), d);
  const std::string m = message_of([] { parse_dtype("fp8"); });
  EXPECT_NE(m.find("\"fp8\""), std::string::npos) << m;
  // Actor messages carry these bytes: f32, bf16 and f16 keep the numbers they had before the
  // integer types joined.
  EXPECT_EQ(dtype_from_byte(0), dtype::f32);
  EXPECT_EQ(dtype_from_byte(1), dtype::bf16);
  EXPECT_EQ(dtype_from_byte(2), dtype::f16);
  EXPECT_EQ(dtype_from_byte(5), dtype::u8);
  EXPECT_FALSE(dtype_from_byte(6).has_value());
}

TEST(TensorDtype, IntegerTensorsHoldTheirBytesButDoNotConvert) {
  tensor t({3}, dtype::i64, device{});
  EXPECT_EQ(t.nbytes(), 24);
  t.data_as<int64_t>()[2] = (int64_t{1} << 40) + 1;
  EXPECT_EQ(t.clone().data_as<int64_t>()[2], (int64_t{1} << 40) + 1);
  const std::string m = message_of([&] { t.to(dtype::f32); });
  EXPECT_NE(m.find("i64 to f32"), std::string::npos) << m;
  EXPECT_THROW(tensor({2}).to(dtype::u8), std::logic_error);
}

TEST(TensorDevice, ParsesCpuAndCuda) {
  EXPECT_EQ(parse_device("cpu"), device{});
  EXPECT_EQ(parse_device("cpu:0"), device{});
  EXPECT_EQ(parse_device("cuda"), (device{device_type::cuda, 0}));
  EXPECT_EQ(parse_device("cuda:3"), (device{device_type::cuda, 3}));
  EXPECT_EQ(parse_device(device{device_type::cuda, 12}.to_string()), (device{device_type::cuda, 12}));
}

TEST(TensorDevice, BadDeviceTextIsRefusedNamingIt) {
  for (const char* text : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda0", "cpu:1:2", "CUDA:0", "cuda:9999999"}) {
    const std::string m = message_of([&] { parse_device(text); });
    EXPECT_NE(m.find(std::string("\"") + text + "\""), std::string::npos) << text << ": " << m;
  }
}

TEST(TensorDevice, AGpuTensorWithoutItsAllocatorIsAClearError) {
  // No cuda_device_allocator was made in this process, whatever the build: the error says what
  // is missing (a CPU-only build: "built without CUDA").
  const std::string m = message_of([] { tensor({4}, dtype::bf16, parse_device("cuda:7")); });
  EXPECT_NE(m.find("cuda:7"), std::string::npos) << m;
  EXPECT_TRUE(m.find("without CUDA") != std::string::npos || m.find("no CUDA device") != std::string::npos) << m;
}

TEST(TensorDevice, ATensorFromAnotherAllocatorTakesItsDevice) {
  // A pinned host allocator stands here for any allocator: the tensor is on its device and is
  // freed by it.
  struct counting final : allocator {
    int live = 0;
    void* allocate(size_t bytes) override {
      ++live;
      return cpu_allocator()->allocate(bytes);
    }
    void deallocate(void* p, size_t bytes) noexcept override {
      --live;
      cpu_allocator()->deallocate(p, bytes);
    }
    void zero(void* p, size_t bytes) override { cpu_allocator()->zero(p, bytes); }
    device where() const override { return {}; }
  };
  auto a = std::make_shared<counting>();
  {
    tensor t = tensor::uninitialized({8}, dtype::f32, a);
    EXPECT_EQ(a->live, 1);
    tensor c = t.clone();  // from the same allocator
    EXPECT_EQ(a->live, 2);
    t.data()[0] = 1;
  }
  EXPECT_EQ(a->live, 0);
}
