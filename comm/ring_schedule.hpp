// The arithmetic of troupe's ring collectives as plain functions, with no CAF, threads or
// sockets: how a tensor is cut into per-rank segments and chunks, which segment a rank sends and
// receives at which hop, and the element-wise kernels. Both rings drive exactly these functions,
// the in-process actor group (actors/collective/collective.cpp) and the TCP ring across processes
// (tcp_ring.cpp), so they give the same bits by construction; serial_ring is the one-thread
// reference both are tested against. It deliberately knows nothing of messages or peers.
#pragma once

#include <cstdint>
#include <functional>
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

// An all-to-all over ring steps alone, for a group whose members reach only their neighbours (the
// TCP ring): rank r's block for rank r + k travels k steps. Each step's packet leads with its
// blocks' sizes and is preceded by a step carrying its own, so a rank needs no counts but its
// own: send_counts[j] floats go to rank j, recv_counts[j] come from it (blocks end to end in rank
// order on both sides). A block whose size is not the recv_counts entry throws naming both.
// shift(send, n_send, recv, n_recv): one ring step (group_backend::shift).
using shift_fn = std::function<void(const float*, int64_t, float*, int64_t)>;
void all_to_all_over_ring(const shift_fn& shift, int ranks, int rank, const float* send,
                          const std::vector<int64_t>& send_counts, float* recv, const std::vector<int64_t>& recv_counts);

// Rank whose messages rank `r` receives, and rank it sends to.
inline int left_of(int r, int ranks) { return (r + ranks - 1) % ranks; }
inline int right_of(int r, int ranks) { return (r + 1) % ranks; }

// The two phases of a ring collective. Reduce: segment j starts at rank j+1 and travels
// j+1 -> j+2 -> ... -> j, each rank adding its own values to the partial sum it received, so it
// is summed in the fixed order x[j+1] + x[j+2] + ... + x[j] and ends complete at its owner j.
// Gather: the owner sends its final segment on around the ring; every other rank copies it and
// forwards it unchanged, so every rank ends with the same bits. Each phase has ranks - 1 hops.
enum class phase : int32_t { reduce = 0, gather = 1 };

// At hop h (0 <= h < ranks - 1) of phase p, rank r sends segment `send` to its right neighbour
// and receives segment `recv` from its left one:
//   reduce: send (r - 1 - h) mod ranks, recv (r - 2 - h) mod ranks
//   gather: send (r - h) mod ranks,     recv (r - 1 - h) mod ranks
// What a rank receives at hop h it sends at hop h + 1 (added to, in the reduce phase); at the
// last reduce hop it receives its own segment, which it sends first in the gather phase. That is
// what lets a send wait on exactly one earlier receive, chunk by chunk.
struct hop_segments {
  int send = 0;
  int recv = 0;
};
hop_segments segments_at_hop(phase p, int r, int ranks, int hop);
// The hop at which rank r receives segment j in phase p: the inverse of segments_at_hop's recv.
int hop_receiving(phase p, int r, int ranks, int j);
// The last hop: what arrives then is complete (reduce: the rank's own segment; gather: the
// segment of the rank's right neighbour, which must not go back to where it began).
inline bool is_last_hop(int hop, int ranks) { return hop == ranks - 2; }

// Broadcast is no hop schedule: every chunk of the root's tensor travels the whole ring. A rank
// forwards what it received unless its right neighbour is the root.
inline bool forwards(int r, int ranks, int root) { return right_of(r, ranks) != root; }

// out[i] = partial[i] + own[i]; partial is the sum of the earlier ranks in ring order. out may be
// partial itself (the in-process ring adds where the left neighbour left its sum) or own itself
// (the TCP ring adds a received partial into the rank's buffer); otherwise none may overlap.
void add(float* out, const float* partial, const float* own, int64_t n);
void scale(float* x, int64_t n, float factor);
void copy(float* out, const float* in, int64_t n);

// One-thread evaluation of the reduction order written above (the formula, not a replay of
// segments_at_hop): results[r] is what rank r receives. Bitwise the same as the actor group and
// tcp_ring give, so tests check both against it exactly.
// inputs[r]: for the reductions and broadcast a full tensor of n elements (broadcast reads
// only inputs[root]); for all_gather rank r's segment of n.
std::vector<std::vector<float>> serial_ring(op_kind kind, const std::vector<std::vector<float>>& inputs, int64_t n,
                                            int root = 0);

}  // namespace troupe::ring
