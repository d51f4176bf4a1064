// Ring partition, hop schedule, element-wise kernels and the serial evaluation of the ring order.
#include "comm/ring_schedule.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace troupe::ring {

const char* to_string(op_kind k) {
  switch (k) {
    case op_kind::all_reduce_sum: return "all_reduce_sum";
    case op_kind::all_reduce_average: return "all_reduce_average";
    case op_kind::reduce_scatter_sum: return "reduce_scatter_sum";
    case op_kind::reduce_scatter_average: return "reduce_scatter_average";
    case op_kind::all_gather: return "all_gather";
    case op_kind::broadcast: return "broadcast";
  }
  return "unknown";
}

bool is_reduction(op_kind k) {
  return k == op_kind::all_reduce_sum || k == op_kind::all_reduce_average || k == op_kind::reduce_scatter_sum ||
         k == op_kind::reduce_scatter_average;
}
bool is_average(op_kind k) { return k == op_kind::all_reduce_average || k == op_kind::reduce_scatter_average; }
bool gathers(op_kind k) {
  return k == op_kind::all_reduce_sum || k == op_kind::all_reduce_average || k == op_kind::all_gather;
}

range segment(int64_t n, int ranks, int j) {
  if (ranks <= 0 || j < 0 || j >= ranks)
    throw std::invalid_argument("ring::segment: rank " + std::to_string(j) + " of " + std::to_string(ranks));
  const int64_t base = n / ranks, extra = n % ranks;
  return {j * base + std::min<int64_t>(j, extra), base + (j < extra ? 1 : 0)};
}

int64_t chunk_count(int64_t count, int64_t chunk_elems) {
  if (chunk_elems <= 0) throw std::invalid_argument("ring::chunk_count: chunk_elems must be positive");
  return (count + chunk_elems - 1) / chunk_elems;
}

range chunk(const range& seg, int64_t chunk_elems, int64_t c) {
  const int64_t begin = c * chunk_elems;
  return {seg.offset + begin, std::min(chunk_elems, seg.count - begin)};
}

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

hop_segments segments_at_hop(phase p, int r, int ranks, int hop) {
  if (ranks <= 0 || r < 0 || r >= ranks || hop < 0 || hop >= ranks - 1)
    throw std::invalid_argument("ring::segments_at_hop: rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                ", hop " + std::to_string(hop));
  const int first = p == phase::reduce ? r - 1 : r;
  return {mod(first - hop, ranks), mod(first - 1 - hop, ranks)};
}

int hop_receiving(phase p, int r, int ranks, int j) {
  const int first = p == phase::reduce ? r - 1 : r;
  const int hop = mod(first - 1 - j, ranks);
  // hop ranks - 1 is no hop: the segment this rank starts the phase with never comes back to it.
  if (ranks <= 0 || r < 0 || r >= ranks || j < 0 || j >= ranks || hop >= ranks - 1)
    throw std::invalid_argument("ring::hop_receiving: rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                " never receives segment " + std::to_string(j) + " in the " +
                                (p == phase::reduce ? "reduce" : "gather") + " phase");
  return hop;
}

namespace {
// Separate loops for the in-place and the three-buffer case: with __restrict the compiler
// vectorizes each without a runtime overlap check (which out == partial would fail).
void add_distinct(float* __restrict out, const float* __restrict partial, const float* __restrict own, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = partial[i] + own[i];
}
void add_in_place(float* __restrict acc, const float* __restrict own, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + own[i];
}
void add_into_own(float* __restrict own, const float* __restrict partial, int64_t n) {
  for (int64_t i = 0; i < n; ++i) own[i] = partial[i] + own[i];
}
}  // namespace

void add(float* out, const float* partial, const float* own, int64_t n) {
  if (out == partial)
    add_in_place(out, own, n);
  else if (out == own)
    add_into_own(out, partial, n);
  else
    add_distinct(out, partial, own, n);
}

void scale(float* x, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

void copy(float* out, const float* in, int64_t n) {
  if (n > 0) std::memcpy(out, in, static_cast<size_t>(n) * sizeof(float));
}

std::vector<std::vector<float>> serial_ring(op_kind kind, const std::vector<std::vector<float>>& inputs, int64_t n,
                                            int root) {
  const int N = static_cast<int>(inputs.size());
  std::vector<std::vector<float>> out(static_cast<size_t>(N));
  if (kind == op_kind::broadcast) {
    for (auto& o : out) o = inputs.at(static_cast<size_t>(root));
    return out;
  }
  if (kind == op_kind::all_gather) {
    std::vector<float> full(static_cast<size_t>(n));
    for (int j = 0; j < N; ++j) copy(full.data() + segment(n, N, j).offset, inputs[j].data(), segment(n, N, j).count);
    for (auto& o : out) o = full;
    return out;
  }
  // Reductions: segment j is summed x[j+1] + x[j+2] + ... + x[j], then scaled at its owner.
  std::vector<float> reduced(static_cast<size_t>(n));
  for (int j = 0; j < N; ++j) {
    const range seg = segment(n, N, j);
    float* acc = reduced.data() + seg.offset;
    copy(acc, inputs[right_of(j, N)].data() + seg.offset, seg.count);
    for (int k = 2; k <= N; ++k) add(acc, acc, inputs[(j + k) % N].data() + seg.offset, seg.count);
    if (is_average(kind)) scale(acc, seg.count, 1.0f / static_cast<float>(N));
  }
  for (int r = 0; r < N; ++r) {
    if (gathers(kind)) {
      out[r] = reduced;
    } else {
      const range seg = segment(n, N, r);
      out[r].assign(reduced.begin() + seg.offset, reduced.begin() + seg.offset + seg.count);
    }
  }
  return out;
}

namespace {

// A size as two floats of 24 bits each, exact through a float buffer.
void put_size(std::vector<float>& out, int64_t n) {
  out.push_back(static_cast<float>(n >> 24));
  out.push_back(static_cast<float>(n & ((int64_t{1} << 24) - 1)));
}
int64_t get_size(const float* at) { return (static_cast<int64_t>(at[0]) << 24) + static_cast<int64_t>(at[1]); }

}  // namespace

void all_to_all_over_ring(const shift_fn& shift, int ranks, int rank, const float* send,
                          const std::vector<int64_t>& send_counts, float* recv, const std::vector<int64_t>& recv_counts) {
  const auto N = static_cast<size_t>(ranks);
  if (send_counts.size() != N || recv_counts.size() != N)
    throw std::invalid_argument("all-to-all: " + std::to_string(send_counts.size()) + " send and " +
                                std::to_string(recv_counts.size()) + " receive counts for " + std::to_string(ranks) + " ranks");
  std::vector<int64_t> send_at(N + 1, 0), recv_at(N + 1, 0);
  for (size_t j = 0; j < N; ++j) {
    send_at[j + 1] = send_at[j] + send_counts[j];
    recv_at[j + 1] = recv_at[j] + recv_counts[j];
  }
  const auto r = static_cast<size_t>(rank);
  if (send_counts[r] != recv_counts[r])
    throw std::invalid_argument("all-to-all: rank " + std::to_string(rank) + " sends itself " +
                                std::to_string(send_counts[r]) + " floats but expects " + std::to_string(recv_counts[r]));
  std::copy(send + send_at[r], send + send_at[r + 1], recv + recv_at[r]);
  // Step 1's packet: this rank's blocks for ranks r + 1 .. r + n - 1, nearest first.
  std::vector<float> packet, incoming, size_out, size_in(2);
  for (int k = 1; k < ranks; ++k) put_size(packet, send_counts[static_cast<size_t>((rank + k) % ranks)]);
  for (int k = 1; k < ranks; ++k) {
    const auto d = static_cast<size_t>((rank + k) % ranks);
    packet.insert(packet.end(), send + send_at[d], send + send_at[d + 1]);
  }
  for (int k = 1; k < ranks; ++k) {
    size_out.clear();
    put_size(size_out, static_cast<int64_t>(packet.size()));
    shift(size_out.data(), 2, size_in.data(), 2);
    incoming.resize(static_cast<size_t>(get_size(size_in.data())));
    shift(packet.data(), static_cast<int64_t>(packet.size()), incoming.data(), static_cast<int64_t>(incoming.size()));
    // From origin r - k: the sizes of its blocks for ranks r .. r + n - 1 - k, then the blocks.
    const int blocks = ranks - k;
    const auto origin = static_cast<size_t>((rank - k + ranks) % ranks);
    const int64_t mine = get_size(incoming.data());
    if (mine != recv_counts[origin])
      throw std::invalid_argument("all-to-all: rank " + std::to_string(rank) + " expects " +
                                  std::to_string(recv_counts[origin]) + " floats from rank " + std::to_string(origin) +
                                  ", which sends " + std::to_string(mine));
    const float* payload = incoming.data() + 2 * blocks;
    std::copy(payload, payload + mine, recv + recv_at[origin]);
    packet.assign(incoming.begin() + 2, incoming.begin() + 2 * blocks);  // the other blocks' sizes
    packet.insert(packet.end(), payload + mine, static_cast<const float*>(incoming.data() + incoming.size()));
  }
}

}  // namespace troupe::ring
