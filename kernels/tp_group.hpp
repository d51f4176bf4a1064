// tp_group: the collectives a tensor-parallel layer calls in the middle of its forward or
// backward. Kernels know nothing of threads, sockets or actors, so the group is an interface:
// comm/ implements it for ranks in one process (comm/local_group) and across processes (over a
// net::group_backend), and a layer holds a non-owning pointer that is null when tp is 1.
// Calls block the caller (the stage's device thread) until every member made the same call: the
// members of a group run the same schedule, so their calls meet in the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

// Part j of n elements cut into `parts` pieces, the first n % parts one element longer: the one
// split of troupe (ring segments, vocabulary shards, tensor-parallel columns), so an all-gather's
// layout and a layer's shard always agree.
struct shard_range {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t end() const { return begin + count; }
};
shard_range shard_of(int64_t n, int parts, int j);

class tp_group {
 public:
  virtual ~tp_group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: every member ends with the sum over the group, the same bits on each.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // data holds n elements of which this member filled shard_of(n, size(), rank()); afterwards
  // every member holds all of them.
  virtual void all_gather(float* data, int64_t n) = 0;
  // In place: this member's shard_of(n, size(), rank()) ends summed over the group (the rest of
  // data is left undefined).
  virtual void reduce_scatter_sum(float* data, int64_t n) = 0;
  // One step of a ring: send[n_send] goes to member rank() + 1 (wrapping) while recv[n_recv]
  // comes from member rank() - 1; n_recv must be what that member sends. The buffers must not
  // overlap.
  virtual void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) = 0;
  // Member j gets send_counts[j] floats of send (the blocks end to end in member order, its own
  // included) while recv_counts[j] come from it into recv, laid out the same way; recv_counts[j]
  // must be what member j sends here. Each back end's own (MPI's Alltoallv, Gloo's alltoallv,
  // NCCL's grouped sends), or ring steps where members reach only their neighbours (TCP).
  virtual void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) = 0;
};


// A group that only says where a rank sits: layers built with it have that rank's shapes and
// parameter layout (to plan buckets, merge shards) but must never run; a collective throws.
class tp_layout final : public tp_group {
 public:
  tp_layout(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, int64_t) override;
  void all_gather(float*, int64_t) override;
  void reduce_scatter_sum(float*, int64_t) override;
  void shift(const float*, int64_t, float*, int64_t) override;
  void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override;

 private:
  int rank_, size_;
};

// Sizes a layer sees: 1 and rank 0 without a group.
inline int tp_size(const tp_group* g) { return g ? g->size() : 1; }
inline int tp_rank(const tp_group* g) { return g ? g->rank() : 0; }

}  // namespace troupe
