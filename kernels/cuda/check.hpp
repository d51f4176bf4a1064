// Error checks at the CUDA and cuBLAS C API edges (NCCLCHECK's idea): a failed call becomes a
// troupe::cuda::error whose message names the file, the line and the call as written, so a
// failure deep in a kernel sequence says which launch or library call it was.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace troupe::cuda {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline std::string where(const char* call, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: ";
}

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    throw error(where(call, file, line) + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw error(where(call, file, line) + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

}  // namespace troupe::cuda

// TROUPE_CUDA_CHECK(cudaMemcpyAsync(...)); after a kernel launch: TROUPE_CUDA_CHECK(cudaGetLastError()).
#define TROUPE_CUDA_CHECK(call) ::troupe::cuda::check((call), #call, __FILE__, __LINE__)
