// kernels/cuda's host code (the caching allocator's CUDA backend, cuda_queue, the completion
// thread) as it ships, on the strict fake device (strict_cuda.hpp): no GPU needed. Each test
// names the defect it would catch were its fix reverted: a free in a host function, a missing
// cross-stream wait, a use before completion, a block reused under another stream's use (or a
// pinned block under the legacy stream's), a call on a destroyed stream.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <string>
#include <vector>

#include "kernels/cuda/completions.hpp"
#include "kernels/cuda/cuda_queue.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_alloc.hpp"
#include "kernels/tensor.hpp"
#include "tests/kernels/strict_cuda.hpp"

using namespace troupe;
namespace strict = troupe::test::strict_cuda;

namespace {

constexpr auto kPatience = std::chrono::seconds(30);
const device gpu0{device_type::cuda, 0};

std::vector<float> iota(size_t n, float from) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
  return v;
}

float* floats(tensor& t) { return static_cast<float*>(t.raw()); }
const float* floats(const tensor& t) { return static_cast<const float*>(t.raw()); }

// A kernel on the queue's stream that copies n floats: what the layers' ops would launch.
void copy_kernel(cuda::cuda_queue& q, float* dst, const float* src, size_t n) {
  q.launch([&] { strict::launch(cuda::current_stream(), [dst, src, n] { std::copy(src, src + n, dst); }); });
}

struct StrictDevice : ::testing::Test {
  void SetUp() override { strict::clear_violations(); }
  void TearDown() override {
    strict::synchronize_all();
    cuda::drain_completions();
    EXPECT_EQ(strict::violations(), std::vector<std::string>{});
  }
};

}  // namespace

TEST_F(StrictDevice, ACudaCallFromAHostFunctionIsRefusedAndNamed) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  static cudaError_t seen = cudaSuccess;
  ASSERT_EQ(cudaLaunchHostFunc(
                s, [](void*) { seen = cudaStreamQuery(nullptr); }, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen, cudaErrorNotPermitted);
  EXPECT_EQ(strict::violations(), std::vector<std::string>{"cudaStreamQuery called from a host function"});
  strict::clear_violations();
  cudaStreamDestroy(s);
}

// Reverted, when_done's callback (and the tensor it holds) would be destroyed in the driver's
// host function: the free is recorded there.
TEST_F(StrictDevice, AFreeInAHostFunctionIsCaughtAndCompletionsReleaseWhatTheyHeldOffTheDriversThread) {
  cuda::cuda_queue q(0);
  tensor held = tensor::uninitialized({1024}, dtype::f32, strict::checking_device_allocator());
  std::promise<void> done;
  q.when_done([held, &done]() mutable {
    held = tensor();  // the last handle: the free happens here
    done.set_value();
  });
  held = tensor();
  ASSERT_EQ(done.get_future().wait_for(kPatience), std::future_status::ready);
  // The check itself: a free inside a real host function is named.
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  auto* in_host = new tensor(tensor::uninitialized({16}, dtype::f32, strict::checking_device_allocator()));
  ASSERT_EQ(cudaLaunchHostFunc(
                s, [](void* t) { delete static_cast<tensor*>(t); }, in_host),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(strict::violations(), std::vector<std::string>{"a free of a device block inside a host function"});
  strict::clear_violations();
  cudaStreamDestroy(s);
}

// Reverted (no wait of the compute stream for the upload stream), the kernel enqueued after
// stage_in runs first and copies poison.
TEST_F(StrictDevice, AStagedInputIsReadByTheComputeStreamOnlyAfterItsUploadAMissingCrossStreamWaitReadsNaN) {
  cuda::cuda_queue q(0);
  const std::vector<float> values = iota(4096, 1.0f);
  const tensor on_gpu = q.stage_in(tensor({4096}, values));
  // Uninitialized: zero-filling would synchronize, and the upload would have run by then.
  tensor out = tensor::uninitialized({4096}, dtype::f32, allocator_for(gpu0));
  copy_kernel(q, floats(out), floats(on_gpu), values.size());
  const tensor host = cuda::to_device(std::as_const(out), device{}, q.stream());
  std::promise<void> done;
  q.when_done([&done] { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(host.to_vector(), values);
}

// Reverted to a completion on the compute stream (a use before the copy stream completed), the
// callback would read the pinned copy while it is still NaN.
TEST_F(StrictDevice, AValueStagedOutIsCompleteWhenItsCallbackRunsAUseBeforeCompletionReadsNaN) {
  cuda::cuda_queue q(0);
  const std::vector<float> values = iota(2048, -5.0f);
  const tensor src = q.stage_in(tensor({2048}, values));
  tensor written = tensor::uninitialized({2048}, dtype::f32, allocator_for(gpu0));
  copy_kernel(q, floats(written), floats(src), values.size());  // on the compute stream
  std::promise<std::vector<float>> got;
  q.stage_out(written, [&got](tensor host) { got.set_value(host.to_vector()); });
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(kPatience), std::future_status::ready);
  EXPECT_EQ(f.get(), values);
}

// Reverted (no record_stream), the block read on stream B is handed out again on stream A at
// once, and A's later write lands before B's read.
TEST_F(StrictDevice, ABlockUsedOnAnotherStreamIsNotHandedOutBeforeThatUseIsDone) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  cuda::cuda_device_allocator(0);
  const std::vector<float> values = iota(1024, 3.0f);
  std::vector<float> read_on_b(values.size(), 0.0f);
  void* first = nullptr;
  {
    cuda::stream_guard on(a);
    tensor buffer = tensor::uninitialized({1024}, dtype::f32, allocator_for(gpu0));
    first = buffer.raw();
    float* p = floats(buffer);
    strict::launch(a, [p, values] { std::copy(values.begin(), values.end(), p); });
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    float* out = read_on_b.data();
    strict::launch(b, [p, out] { std::copy(p, p + 1024, out); });  // B reads the block later
    cuda::record_stream(buffer, b);
  }  // freed while B's read is still to run
  {
    cuda::stream_guard on(a);
    tensor next = tensor::uninitialized({1024}, dtype::f32, allocator_for(gpu0));
    EXPECT_NE(next.raw(), first) << "handed out again before stream B got past its use";
    float* p = floats(next);
    strict::launch(a, [p] { std::fill(p, p + 1024, -1.0f); });
    strict::synchronize_all();
  }
  EXPECT_EQ(read_on_b, values);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

// Reverted (a use on the legacy stream taken for the block's own stream), the pinned staging
// block of the first copy is handed out to the second at once, and the host writes the second's
// values into it before the first copy has read it (seen on an H200).
TEST_F(StrictDevice, APinnedStagingBlockIsNotRefilledBeforeItsCopyOnTheLegacyStreamReadIt) {
  cuda::cuda_device_allocator(0);
  const std::vector<float> first = iota(1024, 1.0f), second = iota(1024, -5000.0f);
  tensor a = tensor::uninitialized({1024}, dtype::f32, allocator_for(gpu0));
  tensor b = tensor::uninitialized({1024}, dtype::f32, allocator_for(gpu0));
  cuda::copy_from_pageable(a.raw(), first.data(), first.size() * sizeof(float), nullptr);
  cuda::copy_from_pageable(b.raw(), second.data(), second.size() * sizeof(float), nullptr);
  strict::synchronize_all();
  EXPECT_EQ(std::vector<float>(floats(a), floats(a) + 1024), first) << "the first copy read the second's bytes";
  EXPECT_EQ(std::vector<float>(floats(b), floats(b) + 1024), second);
}

TEST_F(StrictDevice, AnEventRecordedOnADestroyedStreamIsNamed) {
  cudaStream_t s = nullptr;
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  cudaStreamDestroy(s);
  EXPECT_NE(cudaEventRecord(e, s), cudaSuccess);
  cudaGetLastError();
  EXPECT_EQ(strict::violations(), std::vector<std::string>{"cudaEventRecord on a destroyed stream"});
  strict::clear_violations();
  cudaEventDestroy(e);
}
