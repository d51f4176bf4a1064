// The device's threads for the kernels' own loops (ops.hpp, the optimizers): a parallel-for over
// fixed chunks. Chunks are cut from the problem's size and a grain alone, never from the thread
// count, and every chunk writes its own outputs, so a result has the same bits on any number of
// threads; a loop that reduces does so inside one chunk or in chunk order afterwards. OpenBLAS
// keeps its own threads (blas_runtime.hpp). Not a task scheduler: no futures, no nesting (a
// parallel_for inside a chunk runs inline), no priorities.
#pragma once

#include <cstdint>
#include <type_traits>

namespace troupe {

// Threads each device computes with, for every thread that calls parallel_for (a stage's
// thread, an optimizer shard's): each caller gets its own workers, so ranks that run in one
// process do not share them. 1 (the default) runs every loop on the caller alone.
void set_kernel_threads(int threads);
int kernel_threads();

namespace detail {
using chunk_fn = void (*)(void* ctx, int64_t begin, int64_t end);
void run_chunks(int64_t n, int64_t grain, chunk_fn fn, void* ctx);
}  // namespace detail

// fn(begin, end) over [0, n) in chunks [k * grain, min((k + 1) * grain, n)), on the caller and
// its workers. The first exception a chunk throws is rethrown here once every chunk has ended.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  auto call = [](void* ctx, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(ctx))(b, e); };
  detail::run_chunks(n, grain < 1 ? 1 : grain, call, const_cast<void*>(static_cast<const void*>(&fn)));
}

// Grains from the shape alone (never the thread count), each chunk about 16k floats (64 KiB):
// large enough that handing it to a worker costs little, small enough to spread a GPT's loops.
constexpr int64_t elementwise_grain = 16384;
// Rows of `width` floats.
inline int64_t rows_per_chunk(int64_t width) {
  return width >= elementwise_grain ? 1 : elementwise_grain / (width > 0 ? width : 1);
}
// Columns of a sum over `rows` rows: at least 64 (four cache lines), since each row of a chunk
// costs a loop's overhead.
inline int64_t columns_per_chunk(int64_t rows) {
  const int64_t c = elementwise_grain / (rows > 0 ? rows : 1);
  return c > 64 ? c : 64;
}

}  // namespace troupe
