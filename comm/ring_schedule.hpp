// The arithmetic of troupe's ring collectives as plain functions, with no CAF and no threads:
// how a tensor is cut into per-rank segments and chunks, who sends which segment at which hop,
// and the element-wise kernels. The collective actors (collective.cpp) drive exactly these
// functions; serial_ring_* replay the same schedule in one thread as the unit-test reference.
// It deliberately knows nothing of messages or peers.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::ring {

enum class op_kind : int32_t {
  all_reduce_sum = 0,
  all_reduce_average = 1,
  reduce_scatter_sum = 2,
  reduce_scatter_average = 3,
  all_gather = 4,
  broadcast = 5,
};
const char* to_string(op_kind k);
bool is_reduction(op_kind k);  // the four reduce ops
bool is_average(op_kind k);
bool gathers(op_kind k);       // ends with the all-gather phase (all_reduce_*, all_gather)

struct range {
  int64_t offset = 0;
  int64_t count = 0;
};

// Segment j of n elements over `ranks` ranks: the first n % ranks segments hold one element
// more, so any n works (segments may be empty when n < ranks). Rank j owns segment j.
range segment(int64_t n, int ranks, int j);
// Number of chunks of at most chunk_elems elements a range is cut into (0 for an empty range).
int64_t chunk_count(int64_t count, int64_t chunk_elems);
// Chunk c of seg, as a range of the whole tensor.
range chunk(const range& seg, int64_t chunk_elems, int64_t c);

// Rank whose messages rank `r` receives, and rank it sends to.
inline int left_of(int r, int ranks) { return (r + ranks - 1) % ranks; }
inline int right_of(int r, int ranks) { return (r + 1) % ranks; }

// Reduce-scatter: at its first hop rank r sends segment (r - 1) mod N; segment j then travels
// j+1 -> j+2 -> ... -> j, each rank adding its own values, so it is summed in the fixed order
// x[j+1] + x[j+2] + ... + x[j] and ends complete at its owner j. All-gather: the owner sends its
// final segment on around the ring; every other rank copies it and forwards it unchanged, so
// every rank ends with the same bits.
inline int first_reduce_segment(int r, int ranks) { return left_of(r, ranks); }
// A rank forwards a gathered or broadcast segment unless its right neighbour is where it began.
inline bool forwards(int r, int ranks, int origin) { return right_of(r, ranks) != origin; }

// out[i] = partial[i] + own[i]; partial is the sum of the earlier ranks in ring order. out may be
// partial itself (in place); otherwise the three must not overlap.
void add(float* out, const float* partial, const float* own, int64_t n);
void scale(float* x, int64_t n, float factor);
void copy(float* out, const float* in, int64_t n);

// One-thread replay of the ring schedule: results[r] is what rank r receives. Bitwise the same
// as the actor group gives, so tests check the actors against it exactly.
// inputs[r]: for the reductions and broadcast a full tensor of n elements (broadcast reads
// only inputs[root]); for all_gather rank r's segment of n.
std::vector<std::vector<float>> serial_ring(op_kind kind, const std::vector<std::vector<float>>& inputs, int64_t n,
                                            int root = 0);

}  // namespace troupe::ring
