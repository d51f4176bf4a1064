// hold_stream (hold_stream.hpp): one thread spins on a flag the host sets, bounded by the GPU's
// clock so that a test that never opens it still ends.
#include "tests/kernels/hold_stream.hpp"

#include <stdexcept>
#include <string>

namespace troupe::test {
namespace {

__global__ void wait_for_flag(const volatile int* flag, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) {
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

stream_hold::stream_hold(cudaStream_t s, int patience_ms) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
  flag_ = static_cast<volatile int*>(p);
  *flag_ = 0;
  int* on_device = nullptr;
  check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&on_device), p, 0), "cudaHostGetDevicePointer");
  int device = 0, khz = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device), "cudaDeviceGetAttribute");
  const long long cycles = static_cast<long long>(khz) * patience_ms;
  wait_for_flag<<<1, 1, 0, s>>>(on_device, cycles);
  check(cudaGetLastError(), "the hold's launch");
}

void stream_hold::open() { *flag_ = 1; }

stream_hold::~stream_hold() {
  open();
  // The kernel may still read the flag: freed only once the device is past it.
  cudaDeviceSynchronize();
  cudaFreeHost(const_cast<int*>(flag_));
}

}  // namespace troupe::test
