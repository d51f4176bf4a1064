// The BLAS kernel choice: which core replaces a generic fallback, that OpenBLAS really switches
// kernels at run time (and still multiplies correctly), and that this test binary, not only the
// `troupe` command, runs on the chosen kernels (tests/cli/blas_kernels.test.sh compares them).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/blas_runtime.hpp"
#include "kernels/gemm_library.hpp"
#include "kernels/ops.hpp"

namespace troupe {
namespace {

TEST(BlasRuntime, GenericFallbackCoresAreReplacedByTheBestTheCpuSupports) {
  EXPECT_EQ(preferred_blas_coretype("Prescott", true, true), "SkylakeX");
  EXPECT_EQ(preferred_blas_coretype("Prescott", false, true), "Haswell");
  EXPECT_EQ(preferred_blas_coretype("Sandybridge", false, true), "Haswell");
  EXPECT_EQ(preferred_blas_coretype("Prescott", false, false), "");
  EXPECT_EQ(preferred_blas_coretype("Zen", true, true), "");
  EXPECT_EQ(preferred_blas_coretype("SkylakeX", true, true), "");
  EXPECT_EQ(preferred_blas_coretype("Haswell", false, true), "");
}

// A 3x4 by 4x2 product against its hand-computed value.
void expect_small_gemm_is_right() {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // (3, 4)
  const std::vector<float> w = {1, 0, 1, 0, 0, 1, 0, 1};                  // (2, 4): out = x @ w^T
  std::vector<float> out(6, -1.0f);
  ops::matmul_forward(out.data(), x.data(), w.data(), nullptr, 3, 4, 2);
  const std::vector<float> want = {4, 6, 12, 14, 20, 22};
  EXPECT_EQ(out, want);
}

TEST(BlasRuntime, OpenBlasSwitchesKernelsAtRunTimeAndStillMultipliesCorrectly) {
  const std::string before = blas_core_name();
  if (!this_cpu_features().avx2_fma) GTEST_SKIP() << "no AVX2 on this CPU";
  use_gemm_library(gemm_library::openblas);  // the ops' GEMMs on OpenBLAS, whichever this CPU chose
  ASSERT_TRUE(switch_blas_kernels("Prescott")) << "this OpenBLAS is not a dynamic-arch build";
  EXPECT_EQ(blas_core_name(), "Prescott");
  expect_small_gemm_is_right();
  ASSERT_TRUE(switch_blas_kernels("Haswell"));
  EXPECT_EQ(blas_core_name(), "Haswell");
  expect_small_gemm_is_right();
  ASSERT_TRUE(switch_blas_kernels(before));
  EXPECT_EQ(blas_core_name(), before);
  use_gemm_library(chosen_gemm_library().library);
}

// Prints the kernels this binary runs with, for the cross-program comparison, and checks the
// choice was applied here: a generic core is never left in place when a better one exists.
TEST(BlasRuntime, ThisTestBinaryRunsOnTheChosenKernels) {
  const blas_kernels& k = ensure_blas_kernels();
  std::printf("blas kernels: %s\n", blas_core_name().c_str());
  EXPECT_EQ(blas_core_name(), k.running);
  if (!std::getenv("OPENBLAS_CORETYPE")) {  // the running core is not one worth replacing
    const cpu_vector_features f = this_cpu_features();
    EXPECT_EQ(preferred_blas_coretype(k.running, f.avx512, f.avx2_fma), "") << "still on " << k.running;
  }
  expect_small_gemm_is_right();
}

}  // namespace
}  // namespace troupe
