// Which library multiplies: Debian's OpenBLAS or Debian's oneDNN, chosen once per process from
// the CPU (or TROUPE_GEMM), the same for every program that links the kernels. On an Intel Xeon
// with AVX-512 oneDNN's JIT sgemm ran the example GPT's 51 GEMMs in 22% less time than OpenBLAS's
// SkylakeX kernels as the ops call them (bench/README.md, issue 39), so it is the choice wherever
// AVX-512 is; elsewhere OpenBLAS stays, as measured on AMD Zen 3 (bench/README.md), where oneDNN
// has not been measured. Either runs each call on the calling thread alone: the ops cut GEMMs
// into blocks fixed by the shape (ops_dense.cpp), so the bits never depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace troupe {

enum class gemm_library { openblas, onednn };
inline constexpr gemm_library all_gemm_libraries[] = {gemm_library::openblas, gemm_library::onednn};

const char* to_string(gemm_library l);
std::optional<gemm_library> parse_gemm_library(std::string_view text);

// The library worth running on a CPU with (or without) AVX-512 F/BW/VL.
gemm_library preferred_gemm_library(bool avx512);

struct gemm_choice {
  gemm_library library = gemm_library::openblas;
  std::string reason;  // why: "TROUPE_GEMM=openblas", "AVX-512 (oneDNN measured faster there)"
};
// Read once: TROUPE_GEMM (auto, openblas or onednn), else preferred_gemm_library for this CPU.
// Any other value throws std::invalid_argument naming it and the values allowed; the command
// calls this before a job starts, so a typo is an error, not a silent fallback.
const gemm_choice& chosen_gemm_library();

// The library sgemm_rowmajor calls now: the chosen one unless use_gemm_library switched it.
gemm_library gemm_library_in_use();
// For tests and benchmarks: every later GEMM runs on `l`. Never while another thread multiplies.
void use_gemm_library(gemm_library l);
// Its version and the code it runs on this CPU: "oneDNN 2.6.3, JIT for avx512_core_amx",
// "OpenBLAS 0.3.21, SkylakeX kernels".
std::string describe_gemm_library(gemm_library l);

// C = alpha op(A) op(B) + beta C, row-major, one call on the library in use, on the calling
// thread alone (OpenBLAS at one thread, as jobs run it; oneDNN with one OpenMP thread for this
// caller).
void sgemm_rowmajor(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace troupe
