// The ring form of context-parallel attention (context_attention.hpp). A rank's block is its
// tokens' k | v rows, (B, T, 2C). At step s a rank holds the block of rank r - s: it folds that
// block into its queries' online softmax while the block moves on to rank r + 1 (the shift runs
// on a thread of its own, so the transfer hides behind the block's attention), and after
// cp - 1 steps it has met every block. Backward sends each block round again with a buffer of its
// key and value gradients: every rank adds its queries' share as the pair passes, and one last
// step takes the gradients, now summed over the group, home to the block's owner.
#include <algorithm>
#include <future>
#include <vector>

#include "kernels/context_attention.hpp"
#include "kernels/ring_attention.hpp"

namespace troupe::context {

namespace ra = ring_attention;

namespace {

// This rank's k | v rows out of its packed qkv.
std::vector<float> own_block(const float* qkv, int64_t B, int64_t T, int64_t C) {
  std::vector<float> kv(static_cast<size_t>(B * T * 2 * C));
  for (int64_t row = 0; row < B * T; ++row)
    std::copy(qkv + row * 3 * C + C, qkv + row * 3 * C + 3 * C, kv.data() + row * 2 * C);
  return kv;
}

// Starts sending `from` to the next rank and receiving the previous rank's into `into`, on a
// thread of its own; the caller's next call to the group waits for it (get()).
std::future<void> start_shift(tp_group& g, const std::vector<float>& from, std::vector<float>& into) {
  return std::async(std::launch::async, [&g, &from, &into] {
    g.shift(from.data(), static_cast<int64_t>(from.size()), into.data(), static_cast<int64_t>(into.size()));
  });
}

}  // namespace

void ring_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C,
                  int64_t NH) {
  const int n = g.size(), r = g.rank();
  const std::vector<int64_t> mine = ra::balanced_positions(T * n, n, r);
  std::vector<ra::partial> p;
  for (int64_t b = 0; b < B; ++b) p.push_back(ra::start(T, C, NH));
  std::vector<float> held = own_block(qkv, B, T, C), next(held.size());
  for (int s = 0; s < n; ++s) {
    std::future<void> moving;
    if (s + 1 < n) moving = start_shift(g, held, next);
    const std::vector<int64_t> where = ra::balanced_positions(T * n, n, (r - s + n) % n);
    for (int64_t b = 0; b < B; ++b) {
      const float* block = held.data() + b * T * 2 * C;
      ra::accumulate(p[static_cast<size_t>(b)], {qkv + b * T * 3 * C, 3 * C}, mine.data(), {block, 2 * C},
                     {block + C, 2 * C}, where.data(), T);
    }
    if (moving.valid()) moving.get();
    held.swap(next);
  }
  float* lse = state;
  float* kept_out = state + B * NH * T;
  for (int64_t b = 0; b < B; ++b) ra::finish(p[static_cast<size_t>(b)], {out + b * T * C, C}, lse + b * NH * T);
  std::copy(out, out + B * T * C, kept_out);
}

void ring_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                   int64_t T, int64_t C, int64_t NH) {
  const int n = g.size(), r = g.rank();
  const std::vector<int64_t> mine = ra::balanced_positions(T * n, n, r);
  const float* lse = state;
  const float* kept_out = state + B * NH * T;
  std::fill(dqkv, dqkv + B * T * 3 * C, 0.0f);
  std::vector<float> D(static_cast<size_t>(B * NH * T));
  for (int64_t b = 0; b < B; ++b)
    ra::row_dots({dout + b * T * C, C}, {kept_out + b * T * C, C}, T, C, NH, D.data() + b * NH * T);
  std::vector<float> held = own_block(qkv, B, T, C), next(held.size());
  std::vector<float> grads(held.size(), 0.0f), grads_next(held.size());  // the held block's, summed so far
  for (int s = 0; s < n; ++s) {
    std::future<void> moving;
    if (s + 1 < n) moving = start_shift(g, held, next);
    const std::vector<int64_t> where = ra::balanced_positions(T * n, n, (r - s + n) % n);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t at = b * T * 2 * C;
      ra::backward_block({qkv + b * T * 3 * C, 3 * C}, mine.data(), T, {dout + b * T * C, C}, lse + b * NH * T,
                         D.data() + b * NH * T, {held.data() + at, 2 * C}, {held.data() + at + C, 2 * C}, where.data(),
                         T, C, NH, {dqkv + b * T * 3 * C, 3 * C}, {grads.data() + at, 2 * C},
                         {grads.data() + at + C, 2 * C});
    }
    if (moving.valid()) moving.get();
    // The gradients follow their block: the last step takes them to its owner, r + 1.
    g.shift(grads.data(), static_cast<int64_t>(grads.size()), grads_next.data(), static_cast<int64_t>(grads_next.size()));
    held.swap(next);
    grads.swap(grads_next);
  }
  for (int64_t row = 0; row < B * T; ++row)
    std::copy(grads.data() + row * 2 * C, grads.data() + row * 2 * C + 2 * C, dqkv + row * 3 * C + C);
}

}  // namespace troupe::context
