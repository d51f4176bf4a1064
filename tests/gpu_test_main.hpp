// The main of every GPU test binary. gtest has no notion of a skipped binary: without a CUDA
// device it exits 77 before any test runs, which ctest reports as skipped (SKIP_RETURN_CODE 77),
// never as passed. Include it last, once, in the binary's one source file.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace troupe::test_support {

inline int gpu_test_main(const char* binary, int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("%s: no CUDA device (%s); skipped\n", binary, e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace troupe::test_support

int main(int argc, char** argv) { return troupe::test_support::gpu_test_main(TROUPE_GPU_TEST_BINARY, argc, argv); }
