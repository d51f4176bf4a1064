// GPU memory (kernels/cuda/device_alloc.hpp) on a real device: tensors of every dtype go to a GPU
// and back bit for bit, through pinned memory and between GPUs; a copy from pageable memory never
// waits for the stream; the device's caching allocator
// reuses a freed block; a zero-filled GPU tensor is zero; a missing GPU is a clear error. Without
// a GPU the binary exits 77, which ctest shows as skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_device_ops.hpp"
#include "kernels/cuda/device_alloc.hpp"
#include "kernels/device_ops.hpp"

using namespace troupe;

namespace {

const device gpu0{device_type::cuda, 0};

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  return s;
}

tensor sample(dtype d) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.37f - 100.0f;
  return tensor({10, 100}, v).to(d);
}

}  // namespace

TEST(CudaDeviceAlloc, EveryDtypeGoesToTheGpuAndBackBitForBit) {
  cudaStream_t s = new_stream();
  for (dtype d : {dtype::f32, dtype::bf16, dtype::f16}) {
    tensor host = sample(d);
    tensor dev = cuda::to_device(host, gpu0, s);
    EXPECT_EQ(dev.where(), gpu0);
    EXPECT_EQ(dev.type(), d);
    EXPECT_THROW(dev.data(), std::logic_error);
    tensor back = cuda::to_device(dev, device{}, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(back.where().is_cpu());
    EXPECT_EQ(std::memcmp(std::as_const(back).raw(), std::as_const(host).raw(), static_cast<size_t>(host.nbytes())), 0)
        << to_string(d);
  }
  cudaStreamDestroy(s);
}

TEST(CudaDeviceAlloc, TheSourceMayBeDroppedBeforeTheCopyIsDone) {
  cudaStream_t s = new_stream();
  tensor dev = cuda::to_device(sample(dtype::f32), gpu0, s);  // a temporary: only the stream holds it
  tensor back = cuda::to_device(dev, device{}, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back.to_vector(), sample(dtype::f32).to_vector());
  cudaStreamDestroy(s);
}

// A copy from pageable memory onto a GPU whose stream is held (a host function waits on the
// test): the device's copy returns while the stream is still held, having taken the bytes as they
// were at the call, and the GPU gets exactly those once the stream goes on. A driver that waited
// for the stream before staging pageable bytes would keep the copy from returning at all.
namespace {
struct gate {
  std::atomic<bool> open{false};
};
void CUDART_CB wait_at(void* g) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);  // never hang the suite
  while (!static_cast<gate*>(g)->open.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
}
}  // namespace

TEST(CudaDeviceAlloc, ACopyFromPageableMemoryReturnsWhileTheStreamIsHeldAndTakesTheBytesOfTheCall) {
  cudaStream_t s = new_stream();
  cuda::install_cuda_ops(0);
  const device_ops& k = ops_for(gpu0);
  std::vector<float> src(1 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  const std::vector<float> want = src;
  EXPECT_TRUE(cuda::pageable(src.data()));
  tensor dev(shape_t{static_cast<int64_t>(src.size())}, dtype::f32, gpu0);
  EXPECT_FALSE(cuda::pageable(dev.raw()));
  EXPECT_FALSE(cuda::pageable(k.host_empty({4}).raw())) << "host_empty is pinned";
  gate g;
  ASSERT_EQ(cudaLaunchHostFunc(s, wait_at, &g), cudaSuccess);
  auto copied = std::async(std::launch::async, [&] {
    cuda::stream_guard on(s);
    k.copy_floats(static_cast<float*>(dev.raw()), src.data(), static_cast<int64_t>(src.size()));
  });
  const bool returned = copied.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "the copy waited for the stream";
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "the stream was to be held still";
  std::fill(src.begin(), src.end(), -1.0f);  // after the call: the GPU must not see these
  g.open = true;
  copied.wait();
  tensor back = cuda::to_device(dev, device{}, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back.to_vector(), want);
  cudaStreamDestroy(s);
}

TEST(CudaDeviceAlloc, AFreedBlockIsReusedAndZeroFillingWorks) {
  auto a = cuda::cuda_device_allocator(0);
  const void* first = nullptr;
  {
    tensor t(shape_t{1 << 20}, dtype::bf16, gpu0);  // 2 MiB, zero-filled
    first = std::as_const(t).raw();
    cudaStream_t s = new_stream();
    tensor back = cuda::to_device(t, device{}, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (int64_t i = 0; i < back.numel(); i += 4099) EXPECT_EQ(back.data_as<bf16>()[i].bits, 0);
    cudaStreamDestroy(s);
  }
  const int64_t misses = a->stats().cache_misses;
  tensor u = tensor::uninitialized({1 << 19}, dtype::f32, gpu0);
  EXPECT_EQ(std::as_const(u).raw(), first);
  EXPECT_EQ(a->stats().cache_misses, misses);
}

TEST(CudaDeviceAlloc, GpuToGpuWhenThereAreTwo) {
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) GTEST_SKIP() << "one GPU";
  cudaStream_t s = new_stream();
  tensor on1 = cuda::to_device(cuda::to_device(sample(dtype::bf16), gpu0, s), device{device_type::cuda, 1}, s);
  tensor back = cuda::to_device(on1, device{}, s);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const tensor want = sample(dtype::bf16);
  EXPECT_EQ(std::memcmp(std::as_const(back).raw(), want.raw(), 2000), 0);
  cudaStreamDestroy(s);
}

TEST(CudaDeviceAlloc, AMissingGpuIsAClearError) {
  try {
    cuda::cuda_device_allocator(999);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:999"), std::string::npos) << e.what();
  }
}

#define TROUPE_GPU_TEST_BINARY "kernels_cuda_device_alloc_test"
#include "tests/gpu_test_main.hpp"
