// The CUDA attention's blocks (kernels/flash_attention.hpp) run on the host: each block's
// "threads" one after another, phase by phase, over the launch's grid (a block per tile of rows
// and head), with the rows per block the launch picks unless a test asks for another.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/flash_attention.hpp"

namespace troupe::test {

struct host_block {
  int64_t rows;
  int64_t size() const { return rows; }
  template <class F>
  void each(F f) const {
    for (int64_t r = 0; r < rows; ++r) f(r);
  }
};

// Runs fn(block, shared array, head, tile) for every block of the grid.
template <class Fn>
void flash_grid(int64_t B, int64_t T, int64_t C, int64_t NH, int arrays, int scalars, int rows, Fn fn) {
  const int64_t hs = C / NH;
  if (rows == 0) rows = flash::rows_per_block(hs, arrays, scalars);
  std::vector<float> smem(static_cast<size_t>(flash::shared_floats(rows, hs, arrays, scalars)));
  for (int64_t bh = 0; bh < B * NH; ++bh)
    for (int64_t tile = 0; tile * rows < T; ++tile) fn(host_block{rows}, smem.data(), bh, tile);
}

inline void flash_forward_on_host(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t C,
                                  int64_t NH, int rows = 0) {
  const flash::dims d{T, C, NH};
  flash_grid(B, T, C, NH, flash::forward_arrays, flash::forward_scalars, rows,
             [&](const host_block& blk, float* smem, int64_t bh, int64_t tile) {
               flash::forward_block(blk, smem, out, lse, qkv, d, bh, tile);
             });
}

inline void flash_backward_on_host(float* dqkv, const float* dout, const float* qkv, const float* lse, int64_t B,
                                   int64_t T, int64_t C, int64_t NH, int rows = 0) {
  const flash::dims d{T, C, NH};
  std::vector<float> D(static_cast<size_t>(B * NH * T));
  flash_grid(B, T, C, NH, flash::query_grad_arrays, flash::query_grad_scalars, rows,
             [&](const host_block& blk, float* smem, int64_t bh, int64_t tile) {
               flash::query_grad_block(blk, smem, dqkv, D.data(), dout, qkv, lse, d, bh, tile);
             });
  flash_grid(B, T, C, NH, flash::key_grad_arrays, flash::key_grad_scalars, rows,
             [&](const host_block& blk, float* smem, int64_t bh, int64_t tile) {
               flash::key_grad_block(blk, smem, dqkv, dout, qkv, lse, D.data(), d, bh, tile);
             });
}

}  // namespace troupe::test
