// cuda_queue on a GPU: when_done fires, from the driver's thread, only once what the work
// launched has run: the 64 MiB memset and copy back to the host are complete when the
// completion arrives, and completions come in the order they were asked for. Without a device
// the binary exits 77 (skipped).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/cuda_queue.hpp"

using namespace troupe;

namespace {

constexpr auto kPatience = std::chrono::seconds(30);

}  // namespace

TEST(CudaQueue, CompletionComesAfterTheLaunchedCopyAndInOrder) {
  cuda::cuda_queue q(0);
  EXPECT_TRUE(q.asynchronous());
  EXPECT_EQ(q.where().type, device_type::cuda);
  const size_t n = 1 << 24;  // 64 MiB: long enough that enqueue returns while the copies run
  void* dev_bytes = nullptr;
  void* host_bytes = nullptr;
  TROUPE_CUDA_CHECK(cudaMalloc(&dev_bytes, n * sizeof(float)));
  TROUPE_CUDA_CHECK(cudaMallocHost(&host_bytes, n * sizeof(float)));
  float* dev = static_cast<float*>(dev_bytes);
  float* host = static_cast<float*>(host_bytes);
  for (size_t i = 0; i < n; ++i) host[i] = 0.0f;
  q.enqueue([&] {
    TROUPE_CUDA_CHECK(cudaMemsetAsync(dev, 0x3f, n * sizeof(float), q.stream()));  // 0x3f3f3f3f ~ 0.747
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, q.stream()));
  });
  std::mutex mu;
  std::vector<int> order;
  std::promise<float> first, last;
  q.when_done([&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(1);
    }
    first.set_value(host[n - 1]);
  });
  q.when_done([&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(2);
    }
    last.set_value(host[0]);
  });
  auto f = first.get_future(), l = last.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  ASSERT_EQ(l.wait_for(kPatience), std::future_status::ready);
  float expected = 0;
  const unsigned char bytes[4] = {0x3f, 0x3f, 0x3f, 0x3f};
  std::memcpy(&expected, bytes, sizeof expected);
  EXPECT_EQ(f.get(), expected);
  EXPECT_EQ(l.get(), expected);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  TROUPE_CUDA_CHECK(cudaFreeHost(host));
  TROUPE_CUDA_CHECK(cudaFree(dev));
}

#define TROUPE_GPU_TEST_BINARY "kernels_cuda_queue_test"
#include "tests/gpu_test_main.hpp"
