// cuda_stream (cuda_stream.hpp): a thread-local stream.
#include "kernels/cuda/cuda_stream.hpp"

namespace troupe::cuda {

namespace {
thread_local cudaStream_t current = nullptr;
}  // namespace

cudaStream_t current_stream() { return current; }

stream_guard::stream_guard(cudaStream_t s) : previous_(current) { current = s; }
stream_guard::~stream_guard() { current = previous_; }

}  // namespace troupe::cuda
