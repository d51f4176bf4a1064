// --threads changes how fast a job runs, never what it computes: a GPT trained 20 steps on one
// and on two threads per device gives bitwise the same losses and parameters, alone and as two
// ranks of one process (dp 2, each rank its own threads). The kernels split work by the shape
// alone (kernels/parallel.hpp), GEMMs included, on either GEMM library; OpenBLAS's own threads
// would not, as the first test shows.
#include <gtest/gtest.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "actors/run/training_job.hpp"
#include "kernels/blas_runtime.hpp"
#include "kernels/gemm_library.hpp"
#include "tests/actors/tiny_jobs.hpp"
#include "tests/kernels/grad_check.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe;

namespace {

// Big enough that every split op runs in several chunks: 16 x 32 = 512 rows of 64 channels,
// 64 (batch, head) pairs, 100k parameters (7 AdamW chunks).
test::setup gpt_of_several_chunks() {
  test::setup s;
  s.model.kind = model_kind::gpt;
  s.model.vocab = 23;
  s.model.context = 32;
  s.model.channels = 64;
  s.model.heads = 4;
  s.model.blocks = 2;
  s.batch = 16;
  s.rows_per_sample = s.model.context;
  std::mt19937_64 rng(7);
  std::vector<int32_t> tokens(static_cast<size_t>(s.batch * test::kSteps * (s.model.context + 1) + 1));
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 23);
  s.data = std::make_shared<storage::text_dataset>("synthetic", std::move(tokens), s.model.context);
  return s;
}

train_summary train(int threads, int dp) {
  train_config cfg = test::tiny_config(gpt_of_several_chunks(), "adamw");
  cfg.threads = threads;
  cfg.mesh.dp = dp;
  cfg.watchdog_seconds = 60;
  cfg.out_dir = test_support::scratch_dir("threads-" + std::to_string(threads) + "-dp" + std::to_string(dp)).string();
  return run_training(cfg);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// Why the kernels cut every GEMM into blocks of their own (kernels/ops_dense.cpp) rather than
// hand it to OpenBLAS's threads: OpenBLAS splits a product by its thread count, and with this
// OpenBLAS the bits differ on 2 threads from 1. The test prints how many values differ and
// bounds by how much (a few float roundings of each sum), whichever OpenBLAS runs it.
TEST(OpenBlasSgemm, ItsOwnThreadsChangeTheBitsOfTheGptsProductsOnlyByRounding) {
  ensure_blas_kernels();
  const int N = 512, C = 64;
  const std::vector<float> a = test::random_values(int64_t{N} * 4 * C, 1), w = test::random_values(int64_t{4} * C * C, 2);
  auto products = [&](int threads) {
    set_blas_threads(threads);
    std::vector<float> fwd(size_t{N} * 4 * C), dw(size_t{4} * C * C), dx(size_t{N} * C);
    // forward (N,C)x(C,4C)^T, weight gradient (4C,N)x(N,C), input gradient (N,4C)x(4C,C)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, a.data(), C, w.data(), C, 0.0f, fwd.data(),
                4 * C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 4 * C, C, N, 1.0f, a.data(), 4 * C, a.data(), C, 0.0f, dw.data(),
                C);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, 4 * C, 1.0f, a.data(), 4 * C, w.data(), C, 0.0f,
                dx.data(), C);
    fwd.insert(fwd.end(), dw.begin(), dw.end());
    fwd.insert(fwd.end(), dx.begin(), dx.end());
    return fwd;
  };
  const std::vector<float> one = products(1), two = products(2);
  set_blas_threads(1);
  ASSERT_EQ(one.size(), two.size());
  int64_t differ = 0;
  double worst = 0, largest = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    differ += std::memcmp(&one[i], &two[i], sizeof(float)) != 0;
    worst = std::max(worst, std::abs(double{one[i]} - two[i]));
    largest = std::max(largest, std::abs(double{one[i]}));
  }
  std::printf("OpenBLAS %s, 1 against 2 of its threads: %lld of %zu values differ, by at most %.3g (largest value %.3g)\n",
              blas_core_name().c_str(), static_cast<long long>(differ), one.size(), worst, largest);
  // Sums of up to 512 products of values in [-1, 1]: reordering them moves a result by a few
  // units in the last place of the largest partial sum, ~1e-5 relative here.
  EXPECT_LE(worst, 1e-5 * largest);
}

TEST(ThreadCount, GptLossesAndParametersOverTwentyStepsAreBitwiseEqualOnOneAndTwoThreads) {
  const train_summary one = train(1, 1), two = train(2, 1);
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(test::kSteps));
  EXPECT_EQ(two.losses, one.losses);  // doubles compared exactly
  EXPECT_TRUE(same_bits(two.final_params.to_vector(), one.final_params.to_vector()));
}

// The same on each GEMM library, whichever this CPU would choose (kernels/gemm_library.hpp): the
// blocks, not the library, make the bits independent of the thread count. The two libraries
// themselves may round differently; their losses agree to float precision.
TEST(ThreadCount, OnOpenBlasAndOnOneDnnEachGivesTheSameBitsOnOneAndTwoThreads) {
  std::vector<double> first_losses;
  for (gemm_library l : all_gemm_libraries) {
    use_gemm_library(l);
    const train_summary one = train(1, 1), two = train(2, 1);
    ASSERT_EQ(one.losses.size(), static_cast<size_t>(test::kSteps)) << to_string(l);
    EXPECT_EQ(two.losses, one.losses) << to_string(l);
    EXPECT_TRUE(same_bits(two.final_params.to_vector(), one.final_params.to_vector())) << to_string(l);
    if (first_losses.empty()) {
      first_losses = one.losses;
      continue;
    }
    for (size_t i = 0; i < one.losses.size(); ++i)
      EXPECT_NEAR(one.losses[i], first_losses[i], 1e-4 * std::abs(first_losses[i])) << "step " << i;
  }
  use_gemm_library(chosen_gemm_library().library);
}

TEST(ThreadCount, TwoRanksInOneProcessEachOnTwoThreadsMatchEachOnOne) {
  const train_summary one = train(1, 2), two = train(2, 2);
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(test::kSteps));
  EXPECT_EQ(two.losses, one.losses);
  EXPECT_TRUE(same_bits(two.final_params.to_vector(), one.final_params.to_vector()));
}
