// GPU memory (kernels/cuda/device_alloc.hpp) on a real device: tensors of every dtype go to a GPU
// and back bit for bit, through pinned memory and between GPUs; the device's caching allocator
// reuses a freed block; a zero-filled GPU tensor is zero; a missing GPU is a clear error. Without
// a GPU the binary exits 77, which ctest shows as skipped.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>

#include "kernels/cuda/device_alloc.hpp"

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
