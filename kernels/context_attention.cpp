// The all-gather form of context-parallel attention over ring_attention's blockwise kernels,
// and the choice between the three forms (context_attention.hpp). The keys and values travel as one buffer of the group's blocks, block j
// being rank j's (B, T, 2C) rows of k | v, so the gather and the reduce-scatter of their gradients
// are the group's ordinary collectives and every back end that carries tensor parallelism carries
// this too.
#include "kernels/context_attention.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/ring_attention.hpp"

namespace troupe::context {

namespace ra = ring_attention;

const char* to_string(cp_mode m) {
  switch (m) {
    case cp_mode::all_gather:
      return "all-gather";
    case cp_mode::ring:
      return "ring";
    case cp_mode::all_to_all:
      return "all-to-all";
  }
  return "?";
}

std::optional<cp_mode> parse_cp_mode(const std::string& text) {
  for (cp_mode m : {cp_mode::all_gather, cp_mode::ring, cp_mode::all_to_all})
    if (text == to_string(m)) return m;
  return std::nullopt;
}

std::string refuses(cp_mode mode, int64_t NH, int ranks) {
  if (mode != cp_mode::all_to_all || ranks <= 1 || NH % ranks == 0) return {};
  return "--cp-mode all-to-all splits each block's heads over the context ranks: " + std::to_string(NH) +
         " heads (per tensor-parallel rank) do not divide by cp " + std::to_string(ranks);
}

std::vector<int64_t> positions(const tp_group& g, int64_t T_local) {
  if (T_local < 2 || T_local % 2 != 0)
    throw std::invalid_argument("context parallelism: each rank holds two equal chunks of a sequence, so its " +
                                std::to_string(T_local) + " tokens must be even");
  return ra::balanced_positions(T_local * g.size(), g.size(), g.rank());
}

std::vector<int64_t> attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t C) {
  return {B * (NH * T + T * C)};
}

namespace {

struct gathered {
  int64_t block = 0;                        // floats of one rank's k | v rows
  std::vector<float> kv;                    // the group's blocks in rank order
  std::vector<std::vector<int64_t>> where;  // each block's positions
};

// Every rank's keys and values (and where they sit in the sequence) from this rank's packed qkv.
gathered gather_kv(tp_group& g, const float* qkv, int64_t B, int64_t T, int64_t C) {
  const int n = g.size();
  gathered out;
  out.block = B * T * 2 * C;
  out.kv.assign(static_cast<size_t>(n * out.block), 0.0f);
  float* mine = out.kv.data() + g.rank() * out.block;
  for (int64_t row = 0; row < B * T; ++row)
    std::copy(qkv + row * 3 * C + C, qkv + row * 3 * C + 3 * C, mine + row * 2 * C);
  g.all_gather(out.kv.data(), n * out.block);
  for (int j = 0; j < n; ++j) out.where.push_back(ra::balanced_positions(T * n, n, j));
  return out;
}

}  // namespace

void gather_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C,
                    int64_t NH) {
  const gathered kv = gather_kv(g, qkv, B, T, C);
  const std::vector<int64_t>& mine = kv.where.at(static_cast<size_t>(g.rank()));
  float* lse = state;
  float* kept_out = state + B * NH * T;
  for (int64_t b = 0; b < B; ++b) {
    ra::partial p = ra::start(T, C, NH);
    for (int j = 0; j < g.size(); ++j) {
      const float* block = kv.kv.data() + j * kv.block + b * T * 2 * C;
      ra::accumulate(p, {qkv + b * T * 3 * C, 3 * C}, mine.data(), {block, 2 * C}, {block + C, 2 * C},
                     kv.where[static_cast<size_t>(j)].data(), T);
    }
    ra::finish(p, {out + b * T * C, C}, lse + b * NH * T);
  }
  std::copy(out, out + B * T * C, kept_out);
}

void gather_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                     int64_t T, int64_t C, int64_t NH) {
  const gathered kv = gather_kv(g, qkv, B, T, C);
  const std::vector<int64_t>& mine = kv.where.at(static_cast<size_t>(g.rank()));
  const float* lse = state;
  const float* kept_out = state + B * NH * T;
  std::fill(dqkv, dqkv + B * T * 3 * C, 0.0f);
  std::vector<float> dkv(kv.kv.size(), 0.0f);  // this rank's queries' share of every block's gradients
  std::vector<float> D(static_cast<size_t>(NH * T));
  for (int64_t b = 0; b < B; ++b) {
    ra::row_dots({dout + b * T * C, C}, {kept_out + b * T * C, C}, T, C, NH, D.data());
    for (int j = 0; j < g.size(); ++j) {
      const int64_t at = j * kv.block + b * T * 2 * C;
      ra::backward_block({qkv + b * T * 3 * C, 3 * C}, mine.data(), T, {dout + b * T * C, C}, lse + b * NH * T,
                         D.data(), {kv.kv.data() + at, 2 * C}, {kv.kv.data() + at + C, 2 * C},
                         kv.where[static_cast<size_t>(j)].data(), T, C, NH, {dqkv + b * T * 3 * C, 3 * C},
                         {dkv.data() + at, 2 * C}, {dkv.data() + at + C, 2 * C});
    }
  }
  g.reduce_scatter_sum(dkv.data(), static_cast<int64_t>(dkv.size()));
  const float* own = dkv.data() + g.rank() * kv.block;
  for (int64_t row = 0; row < B * T; ++row) std::copy(own + row * 2 * C, own + row * 2 * C + 2 * C, dqkv + row * 3 * C + C);
}

void attention_forward(tp_group& g, cp_mode mode, float* out, float* state, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH) {
  switch (mode) {
    case cp_mode::all_gather:
      return gather_forward(g, out, state, qkv, B, T, C, NH);
    case cp_mode::ring:
      return ring_forward(g, out, state, qkv, B, T, C, NH);
    case cp_mode::all_to_all:
      return ulysses_forward(g, out, state, qkv, B, T, C, NH);
  }
}

void attention_backward(tp_group& g, cp_mode mode, float* dqkv, const float* dout, const float* qkv,
                        const float* state, int64_t B, int64_t T, int64_t C, int64_t NH) {
  switch (mode) {
    case cp_mode::all_gather:
      return gather_backward(g, dqkv, dout, qkv, state, B, T, C, NH);
    case cp_mode::ring:
      return ring_backward(g, dqkv, dout, qkv, state, B, T, C, NH);
    case cp_mode::all_to_all:
      return ulysses_backward(g, dqkv, dout, qkv, state, B, T, C, NH);
  }
}

void attend(const device_ops& k, const context_split& split, tensor& out, tensor& state, const tensor& qkv, int64_t C,
            int64_t NH) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  // Both written whole by the attention.
  state = k.empty(split ? attention_state_shape(B, NH, T, C) : k.attention_state_shape(B, NH, T));
  out = k.empty({B, T, C});
  if (split)
    attention_forward(*split.group, split.mode, f32_out(out), f32_out(state), f32(qkv), B, T, C, NH);
  else
    k.attention_forward(f32_out(out), f32_out(state), f32(qkv), B, T, C, NH);
}

tensor attend_backward(const device_ops& k, const context_split& split, const tensor& dout, const tensor& qkv,
                       const tensor& state, int64_t C, int64_t NH) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  tensor dqkv = k.empty(qkv.shape());  // written whole
  if (split)
    attention_backward(*split.group, split.mode, f32_out(dqkv), f32(dout), f32(qkv), f32(state), B, T, C, NH);
  else
    k.attention_backward(f32_out(dqkv), f32(dout), f32(qkv), f32(state), B, T, C, NH);
  return dqkv;
}

}  // namespace troupe::context
