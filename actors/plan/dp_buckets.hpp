// Gradient buckets for data parallelism: a model's flat gradient buffer cut, in reverse layer
// order, into contiguous ranges of at most `cap` bytes (PyTorch DDP's bucket_cap_mb). A bucket is
// ready the moment backward finishes its lowest layer. Plain arithmetic: no CAF, no tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe {

struct grad_bucket {
  int64_t offset = 0;      // first element in the flat gradient buffer
  int64_t count = 0;       // elements
  int64_t first_layer = 0; // lowest layer in the bucket: backward finishes it last
  int64_t last_layer = 0;  // highest layer
  // Expert parallelism: the bucket is one layer's experts, reduced over the replicas holding the
  // same experts (the mesh's edp group), not over every replica.
  bool experts = false;
};

// layer_params[i]: parameter count of layer i (layers laid out in order in the flat buffer).
// Bucket 0 holds the last layers. As in PyTorch DDP, a bucket holds at most cap_bytes unless a
// single layer is larger (it then gets a bucket of its own). Buckets of zero elements are never
// produced (parameter-free layers join a neighbour); cap_bytes <= 0 gives one bucket per layer
// with parameters. expert_tails[i] (empty: none): how many of layer i's last elements are its
// experts' (layer::expert_tail); they get a bucket of their own, marked experts, and the
// buckets around them never reach across it.
std::vector<grad_bucket> plan_buckets(const std::vector<int64_t>& layer_params, int64_t cap_bytes,
                                      const std::vector<int64_t>& expert_tails = {});

// ZeRO-2's gradient units of a chunk (layer_stack::split_grads): one per bucket, in bucket order,
// except that an expert bucket shares one with the bucket after it (the rest of its layer and
// the layers below), since a layer's gradients live in one unit. A shared unit is ready when its
// lower bucket's layers are done; each of its buckets is a slice of it.
struct grad_units {
  std::vector<std::pair<size_t, size_t>> layers;  // per unit: its first and last layer
  std::vector<size_t> unit_of;                     // per bucket
  std::vector<int64_t> at;                         // per bucket: where it starts in its unit
  std::vector<int64_t> ready_layer;                // per bucket: the layer whose backward completes its unit
  std::vector<int> buckets_of_unit;                // per unit: 1, or 2 when shared
  bool shared(size_t b) const { return buckets_of_unit.at(unit_of.at(b)) > 1; }
};
// Throws std::invalid_argument when an expert bucket has no bucket after it holding the rest of
// its layer.
grad_units plan_grad_units(const std::vector<grad_bucket>& buckets);

// ZeRO's partition of a stage's parameters over its `ranks` data-parallel peers. Rank j owns
// segment j of every bucket (ring::segment: the part a ring reduce-scatter leaves complete on
// it, bit for bit the values an all-reduce would give), so its optimizer shard is those
// segments laid end to end, chunk by chunk, bucket by bucket. buckets[c]: chunk c's buckets.
// Under expert parallelism a bucket of experts is cut over the replicas holding those experts
// instead: rank expert_rank of expert_ranks (0: as every other bucket).
struct shard_piece {
  int chunk = 0;
  size_t bucket = 0;         // index in buckets[chunk]
  int64_t in_bucket = 0;     // first element of the segment inside the bucket
  int64_t count = 0;         // elements (0 when the bucket has fewer elements than ranks)
  int64_t at_shard = 0;      // where the segment sits in the rank's shard
};
std::vector<shard_piece> shard_layout(const std::vector<std::vector<grad_bucket>>& buckets, int ranks, int rank,
                                      int expert_ranks = 0, int expert_rank = 0);
int64_t shard_size(const std::vector<shard_piece>& pieces);

}  // namespace troupe
