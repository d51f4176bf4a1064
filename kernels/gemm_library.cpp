// The GEMM library (see gemm_library.hpp).
#include "kernels/gemm_library.hpp"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "kernels/blas_runtime.hpp"

namespace troupe {

namespace {

std::atomic<int> switched_to{-1};  // use_gemm_library's choice; -1 while none

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "this CPU";
  }
}

void onednn_sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // Debian's oneDNN threads with OpenMP and would start a team per calling thread as wide as the
  // machine; the ops' own threads already share the work, so each caller's team is one thread.
  thread_local const bool one_thread = (omp_set_num_threads(1), true);
  (void)one_thread;
  const dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                     C, ldc);
  if (s != dnnl_success)  // only for arguments the ops never pass (negative sizes, short strides)
    throw std::invalid_argument("oneDNN sgemm refused a " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                                std::to_string(K) + " product (status " + std::to_string(static_cast<int>(s)) + ")");
}

}  // namespace

const char* to_string(gemm_library l) {
  switch (l) {
    case gemm_library::openblas: return "openblas";
    case gemm_library::onednn: return "onednn";
  }
  return "?";
}

std::optional<gemm_library> parse_gemm_library(std::string_view text) {
  for (gemm_library l : all_gemm_libraries)
    if (text == to_string(l)) return l;
  return std::nullopt;
}

gemm_library preferred_gemm_library(bool avx512) { return avx512 ? gemm_library::onednn : gemm_library::openblas; }

const gemm_choice& chosen_gemm_library() {
  static const gemm_choice c = [] {
    const char* env = std::getenv("TROUPE_GEMM");
    const std::string asked = env ? env : "";
    if (!asked.empty() && asked != "auto") {
      const std::optional<gemm_library> l = parse_gemm_library(asked);
      if (!l)
        throw std::invalid_argument("TROUPE_GEMM=" + asked + " names no GEMM library: use auto, openblas or onednn");
      return gemm_choice{*l, "TROUPE_GEMM=" + asked};
    }
    const bool avx512 = this_cpu_features().avx512;
    return gemm_choice{preferred_gemm_library(avx512),
                       avx512 ? "AVX-512: oneDNN measured faster there" : "no AVX-512: OpenBLAS, as measured there"};
  }();
  return c;
}

gemm_library gemm_library_in_use() {
  const int s = switched_to.load(std::memory_order_relaxed);
  return s >= 0 ? static_cast<gemm_library>(s) : chosen_gemm_library().library;
}

void use_gemm_library(gemm_library l) { switched_to.store(static_cast<int>(l), std::memory_order_relaxed); }

std::string describe_gemm_library(gemm_library l) {
  if (l == gemm_library::onednn) {
    const dnnl_version_t* v = dnnl_version();
    return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
           ", JIT for " + isa_name(dnnl_get_effective_cpu_isa());
  }
  const std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const size_t version_end = config.find(' ', config.find(' ') + 1);
  return config.substr(0, version_end) + ", " + blas_core_name() + " kernels";
}

void sgemm_rowmajor(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (gemm_library_in_use() == gemm_library::onednn) {
    onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  ensure_blas_kernels();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

}  // namespace troupe
