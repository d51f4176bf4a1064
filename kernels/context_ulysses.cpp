// The all-to-all form of context-parallel attention, DeepSpeed-Ulysses (context_attention.hpp).
// Member j of n takes heads [j NH/n, (j+1) NH/n). An all-to-all gives each member every rank's
// tokens for its heads, rows in member order (member o's T tokens at its balanced positions, which
// ring_attention's mask reads, so no reordering is needed); it attends over the whole sequence
// with ring_attention's kernels as one block, and a second all-to-all returns each rank's rows.
// Forward keeps the log-sum-exp and output of its heads over the whole sequence (as many floats
// as the other forms keep for their tokens over all heads); backward exchanges qkv and dout again.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/context_attention.hpp"
#include "kernels/ring_attention.hpp"

namespace troupe::context {

namespace ra = ring_attention;

namespace {

// Equal blocks of `block` floats to and from every member: offsets j * block on both sides.
std::vector<float> exchange_equal(tp_group& g, const std::vector<float>& send, int64_t block) {
  const std::vector<int64_t> counts(static_cast<size_t>(g.size()), block);
  std::vector<float> got(send.size());
  g.all_to_all(send.data(), counts, got.data(), counts);
  return got;
}

// The shapes of one exchange: this member's T tokens of B sequences, n members, `parts` groups of
// C columns (q, k, v: 3; an output: 1), each group cut into n head ranges of Ch = C / n columns.
struct layout {
  int n = 1, r = 0;
  int64_t B = 0, T = 0, C = 0, Ch = 0, parts = 1;
};

// Tokens' rows (B, T, parts C) to the members that own their heads: block j is (B, T, parts Ch),
// the columns of j's heads in each part. Back comes (B, n T, parts Ch): every rank's tokens (in
// member order) for this member's heads.
std::vector<float> to_heads(tp_group& g, const layout& s, const float* rows) {
  const int64_t width = s.parts * s.Ch, block = s.B * s.T * width;
  std::vector<float> send(static_cast<size_t>(s.n * block));
  for (int j = 0; j < s.n; ++j)
    for (int64_t row = 0; row < s.B * s.T; ++row)
      for (int64_t part = 0; part < s.parts; ++part) {
        const float* from = rows + row * s.parts * s.C + part * s.C + j * s.Ch;
        std::copy(from, from + s.Ch, send.data() + j * block + row * width + part * s.Ch);
      }
  const std::vector<float> got = exchange_equal(g, send, block);
  // Member o's block is (B, T, width); the result interleaves them per sequence.
  std::vector<float> out(static_cast<size_t>(s.n * block));
  for (int o = 0; o < s.n; ++o)
    for (int64_t b = 0; b < s.B; ++b)
      std::copy(got.begin() + o * block + b * s.T * width, got.begin() + o * block + (b + 1) * s.T * width,
                out.begin() + (b * s.n + o) * s.T * width);
  return out;
}

// The inverse: (B, n T, parts Ch) of this member's heads back to each rank's (B, T, parts C).
void to_tokens(tp_group& g, const layout& s, const std::vector<float>& heads, float* rows) {
  const int64_t width = s.parts * s.Ch, block = s.B * s.T * width;
  std::vector<float> send(static_cast<size_t>(s.n * block));
  for (int o = 0; o < s.n; ++o)
    for (int64_t b = 0; b < s.B; ++b)
      std::copy(heads.begin() + (b * s.n + o) * s.T * width, heads.begin() + (b * s.n + o + 1) * s.T * width,
                send.begin() + o * block + b * s.T * width);
  const std::vector<float> got = exchange_equal(g, send, block);
  for (int j = 0; j < s.n; ++j)
    for (int64_t row = 0; row < s.B * s.T; ++row)
      for (int64_t part = 0; part < s.parts; ++part) {
        const float* from = got.data() + j * block + row * width + part * s.Ch;
        std::copy(from, from + s.Ch, rows + row * s.parts * s.C + part * s.C + j * s.Ch);
      }
}

// Every rank's positions in member order: the rows to_heads gives.
std::vector<int64_t> sequence_positions(int n, int64_t T) {
  std::vector<int64_t> at;
  for (int o = 0; o < n; ++o) {
    const std::vector<int64_t> p = ra::balanced_positions(T * n, n, o);
    at.insert(at.end(), p.begin(), p.end());
  }
  return at;
}

layout layout_of(tp_group& g, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t parts) {
  const std::string why = refuses(cp_mode::all_to_all, NH, g.size());
  if (!why.empty()) throw std::invalid_argument(why);
  return layout{g.size(), g.rank(), B, T, C, C / g.size(), parts};
}

}  // namespace

void ulysses_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C,
                     int64_t NH) {
  const layout s = layout_of(g, B, T, C, NH, 3);
  const int64_t Tn = T * s.n, NHh = NH / s.n;
  const std::vector<float> qkv_h = to_heads(g, s, qkv);
  const std::vector<int64_t> at = sequence_positions(s.n, T);
  float* lse = state;                     // (B, NHh, Tn): as many floats as (B, NH, T)
  float* kept_out = state + B * NH * T;   // (B, Tn, Ch): as many as (B, T, C)
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv_h.data() + b * Tn * 3 * s.Ch;
    ra::partial p = ra::start(Tn, s.Ch, NHh);
    ra::accumulate(p, {q, 3 * s.Ch}, at.data(), {q + s.Ch, 3 * s.Ch}, {q + 2 * s.Ch, 3 * s.Ch}, at.data(), Tn);
    ra::finish(p, {kept_out + b * Tn * s.Ch, s.Ch}, lse + b * NHh * Tn);
  }
  const layout back{s.n, s.r, B, T, C, s.Ch, 1};
  to_tokens(g, back, std::vector<float>(kept_out, kept_out + B * Tn * s.Ch), out);
}

void ulysses_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                      int64_t T, int64_t C, int64_t NH) {
  const layout s = layout_of(g, B, T, C, NH, 3);
  const layout one{s.n, s.r, B, T, C, s.Ch, 1};
  const int64_t Tn = T * s.n, NHh = NH / s.n;
  const std::vector<float> qkv_h = to_heads(g, s, qkv), dout_h = to_heads(g, one, dout);
  const std::vector<int64_t> at = sequence_positions(s.n, T);
  const float* lse = state;
  const float* kept_out = state + B * NH * T;
  std::vector<float> dqkv_h(qkv_h.size(), 0.0f), D(static_cast<size_t>(NHh * Tn));
  for (int64_t b = 0; b < B; ++b) {
    const float* q = qkv_h.data() + b * Tn * 3 * s.Ch;
    const float* dy = dout_h.data() + b * Tn * s.Ch;
    float* dq = dqkv_h.data() + b * Tn * 3 * s.Ch;
    ra::row_dots({dy, s.Ch}, {kept_out + b * Tn * s.Ch, s.Ch}, Tn, s.Ch, NHh, D.data());
    ra::backward_block({q, 3 * s.Ch}, at.data(), Tn, {dy, s.Ch}, lse + b * NHh * Tn, D.data(), {q + s.Ch, 3 * s.Ch},
                       {q + 2 * s.Ch, 3 * s.Ch}, at.data(), Tn, s.Ch, NHh, {dq, 3 * s.Ch}, {dq + s.Ch, 3 * s.Ch},
                       {dq + 2 * s.Ch, 3 * s.Ch});
  }
  to_tokens(g, s, dqkv_h, dqkv);
}

}  // namespace troupe::context
