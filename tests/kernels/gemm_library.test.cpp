// The GEMM library choice (kernels/gemm_library.hpp): its names round-trip, a bad TROUPE_GEMM is
// refused by name, and each library computes every transpose case the ops use, with strides and
// beta, to float precision of a double-precision product of the same operands.
#include "kernels/gemm_library.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/blas_runtime.hpp"

namespace troupe {
namespace {

TEST(GemmLibrary, NamesRoundTripAndUnknownNamesAreRefused) {
  for (gemm_library l : all_gemm_libraries) EXPECT_EQ(parse_gemm_library(to_string(l)), l);
  EXPECT_EQ(parse_gemm_library("mkl"), std::nullopt);
  EXPECT_EQ(parse_gemm_library("OneDNN"), std::nullopt);
}

TEST(GemmLibrary, AvxFiveTwelveCpusGetOneDnnOthersKeepOpenBlas) {
  EXPECT_EQ(preferred_gemm_library(true), gemm_library::onednn);
  EXPECT_EQ(preferred_gemm_library(false), gemm_library::openblas);
  const gemm_choice& c = chosen_gemm_library();  // TROUPE_GEMM is unset under ctest
  EXPECT_EQ(c.library, preferred_gemm_library(this_cpu_features().avx512)) << c.reason;
  std::printf("gemm library here: %s (%s)\n", describe_gemm_library(c.library).c_str(), c.reason.c_str());
}

// op(A) (M, K) and op(B) (K, N) stored with padded rows, C = alpha op(A) op(B) + beta C.
void expect_product_right(gemm_library l, bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
  std::mt19937 rng(static_cast<unsigned>(M * 131 + N * 7 + K + ta * 2 + tb));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> A(static_cast<size_t>((ta ? K : M) * lda)), B(static_cast<size_t>((tb ? N : K) * ldb)),
      C(static_cast<size_t>(M * ldc));
  for (float& x : A) x = u(rng);
  for (float& x : B) x = u(rng);
  for (float& x : C) x = u(rng);
  const std::vector<float> C0 = C;
  const float alpha = 0.75f, beta = 0.5f;
  use_gemm_library(l);
  sgemm_rowmajor(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  use_gemm_library(chosen_gemm_library().library);
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= N) {  // padding stays untouched
        ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << to_string(l) << " wrote past column " << N;
        continue;
      }
      double want = beta * double{C0[i * ldc + j]};
      for (int64_t k = 0; k < K; ++k)
        want += alpha * double{ta ? A[k * lda + i] : A[i * lda + k]} * double{tb ? B[j * ldb + k] : B[k * ldb + j]};
      worst = std::max(worst, std::abs(want - C[i * ldc + j]));
    }
  // K products of values in [-1, 1]: float rounding of the running sums, ~K * 2^-24 at most.
  EXPECT_LE(worst, 1e-6 * static_cast<double>(K) + 1e-6)
      << to_string(l) << " ta=" << ta << " tb=" << tb << " " << M << "x" << N << "x" << K;
}

TEST(GemmLibrary, EachLibraryMultipliesEveryTransposeCaseWithStridesAndBeta) {
  for (gemm_library l : all_gemm_libraries)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{3, 2, 4}, {64, 96, 128}, {128, 384, 128},
                               {37, 53, 515}})
          expect_product_right(l, ta, tb, M, N, K);
}

}  // namespace
}  // namespace troupe
