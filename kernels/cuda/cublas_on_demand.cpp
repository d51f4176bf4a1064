// cublas_on_demand: the cuBLAS functions troupe calls, forwarded to libcublas opened at the first
// call (lazy_library.hpp). A failure to open it is CUBLAS_STATUS_NOT_INITIALIZED, whose status
// string then names the library and the loader's reason.
#include <cublas_v2.h>

#include <string>

#include "kernels/cuda/lazy_library.hpp"

namespace {
troupe::cuda::lazy_library& cublas() {
  static troupe::cuda::lazy_library lib(TROUPE_CUBLAS_SONAME, TROUPE_CUDA_LIBRARY_DIR);
  return lib;
}
constexpr cublasStatus_t not_loaded = CUBLAS_STATUS_NOT_INITIALIZED;
}  // namespace

TROUPE_ON_DEMAND(cublas(), cublasStatus_t, cublasCreate, not_loaded, (cublasHandle_t * handle), (handle))
TROUPE_ON_DEMAND(cublas(), cublasStatus_t, cublasDestroy, not_loaded, (cublasHandle_t handle), (handle))
TROUPE_ON_DEMAND(cublas(), cublasStatus_t, cublasSetStream, not_loaded, (cublasHandle_t handle, cudaStream_t stream),
                 (handle, stream))
TROUPE_ON_DEMAND(cublas(), cublasStatus_t, cublasGemmEx, not_loaded,
                 (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                  const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype,
                  int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                  cublasGemmAlgo_t algo),
                 (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                  computeType, algo))

// The two names of a status: the library's own, or, when it could not be opened, the reason.
extern "C" const char* cublasGetStatusName(cublasStatus_t status) {
  using fn = const char* (*)(cublasStatus_t);
  static const fn f = reinterpret_cast<fn>(cublas().symbol("cublasGetStatusName"));
  return f ? f(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}
extern "C" const char* cublasGetStatusString(cublasStatus_t status) {
  using fn = const char* (*)(cublasStatus_t);
  static const fn f = reinterpret_cast<fn>(cublas().symbol("cublasGetStatusString"));
  if (f) return f(status);
  static const std::string why = cublas().error();
  return why.c_str();
}
