// cuda_queue on a GPU: when_done fires, from the completion thread, only once what the work
// launched has run: the 64 MiB memset and copy back to the host are complete when the
// completion arrives, and completions come in the order they were asked for; inputs staged in on
// its copy stream are complete for what its stream runs next, and values staged out on it arrive
// without waiting for what its stream runs after. The completion thread (completions.hpp) runs
// callbacks where CUDA calls and frees are allowed, and turns a token a kernel found outside the
// vocabulary into a fault naming it. Without a device the binary exits 77 (skipped).
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/completions.hpp"
#include "kernels/cuda/device_alloc.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/cuda_device_ops.hpp"
#include "kernels/cuda/cuda_queue.hpp"
#include "kernels/tensor.hpp"
#include "tests/kernels/hold_stream.hpp"

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

// stage_in: the values as they were at the call (it took a pinned copy), on the GPU, and seen by
// what the queue's own stream runs after it, though they came in on the copy stream.
TEST(CudaQueue, StagedInputsAreTheCallsValuesAndTheQueuesStreamSeesThemComplete) {
  cuda::install_cuda_ops(0);
  cuda::cuda_queue q(0);
  const int64_t n = int64_t{1} << 24;  // 64 MiB, so the copy is still running when the read is launched
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i % 1000) * 0.5f;
  tensor x({n}, values);
  const tensor on_gpu = q.stage_in(x);
  std::fill(x.data(), x.data() + n, -1.0f);  // written after the call: the staged copy must not see it
  EXPECT_EQ(on_gpu.where(), q.where());
  std::vector<float> back(static_cast<size_t>(n), 0.0f);
  q.enqueue([&] {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(back.data(), on_gpu.raw(), static_cast<size_t>(n) * sizeof(float),
                                      cudaMemcpyDeviceToHost, q.stream()));
  });
  std::promise<void> done;
  q.when_done([&] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(back, values);
  const tensor again = q.stage_in(on_gpu);  // const: a staged tensor is frozen, raw() of a mutable one throws
  EXPECT_EQ(again.raw(), on_gpu.raw()) << "a tensor on the device already is itself";
}

// stage_out: the copy to the host runs on the copy stream after what the queue's stream ran
// before it, and does not wait for what that stream runs after: with the stream held by a kernel
// launched after the call (hold_stream.hpp: not a host function, which would hold the copy's
// completion too), the copy still arrives, with the values written before.
TEST(CudaQueue, AValueStagedOutArrivesWithTheValuesWrittenBeforeWhileTheStreamIsHeldAfter) {
  const device_ops& k = cuda::install_cuda_ops(0);
  cuda::cuda_queue q(0);
  const int64_t n = int64_t{1} << 22;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i % 977);
  tensor x;
  q.launch([&] {
    x = k.empty({n});
    k.copy_floats(f32_out(x), values.data(), n);
  });
  std::promise<tensor> out;
  q.stage_out(x, [&](tensor host) { out.set_value(std::move(host)); });
  auto arrived = out.get_future();
  bool while_held = false;
  {
    test::stream_hold hold(q.stream());
    while_held = arrived.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  }
  // Whatever the verdict, the callback has run before `out` goes out of scope.
  ASSERT_EQ(arrived.wait_for(kPatience), std::future_status::ready);
  ASSERT_TRUE(while_held) << "the copy out waited for work launched after it";
  const tensor host = arrived.get();
  EXPECT_TRUE(host.where().is_cpu());
  EXPECT_EQ(host.to_vector(), values);
}

#define TROUPE_GPU_TEST_BINARY "kernels_cuda_queue_test"
TEST(CudaCompletions, ACallbackRunsWhereCudaCallsAndFreesAreAllowed) {
  cuda::install_cuda_ops(0);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  // The last handle of a device tensor goes with the callback: its free happens on that thread.
  tensor held(shape_t{1024}, dtype::f32, device{device_type::cuda, 0});
  std::promise<std::string> result;
  cuda::after(s, "a test's empty step", [&result, held]() mutable {
    held = tensor();  // the free
    tensor fresh(shape_t{256}, dtype::f32, device{device_type::cuda, 0});  // an allocation and a memset
    int device = -1;
    const cudaError_t e = cudaGetDevice(&device);
    result.set_value(e == cudaSuccess ? "ok" : cudaGetErrorName(e));
  });
  held = tensor();
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(f.get(), "ok") << "a CUDA call in the callback failed: it ran where the driver forbids them";
  cudaStreamDestroy(s);
}

TEST(CudaCompletions, ATokenAKernelFoundOutsideTheVocabularyFailsTheNextCompletionNamingIt) {
  cuda::install_cuda_ops(0);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int64_t B = 2, T = 3, C = 4, V = 7;
  const device gpu{device_type::cuda, 0};
  tensor tokens = cuda::to_device(tensor({B, T}, {1, 2, 3, 4, 9, 5}), gpu, s);
  tensor wte(shape_t{V, C}, dtype::f32, gpu), wpe(shape_t{T, C}, dtype::f32, gpu), out(shape_t{B, T, C}, dtype::f32, gpu);
  cuda::embedding_forward(static_cast<float*>(out.raw()), static_cast<const float*>(std::as_const(tokens).raw()),
                          static_cast<const float*>(std::as_const(wte).raw()),
                          static_cast<const float*>(std::as_const(wpe).raw()), B, T, C, V, s);
  std::promise<std::string> result;
  cuda::after(
      s, "step 3's forward", [&result] { result.set_value("completed"); },
      [&result](const std::string& why) { result.set_value(why); });
  auto f = result.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(f.get(),
            "a kernel before step 3's forward completed found bad data: embedding: token 9 at (1, 1) is outside [0, 7)");
  std::promise<void> next;
  cuda::after(s, "the next step", [&next] { next.set_value(); });
  EXPECT_EQ(next.get_future().wait_for(kPatience), std::future_status::ready) << "the fault was reported once";
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
}

#include "tests/gpu_test_main.hpp"
