// Gradient buckets for data parallelism: a model's flat gradient buffer cut, in reverse layer
// order, into contiguous ranges of about `cap` bytes (PyTorch DDP's bucket_cap_mb). A bucket is
// ready the moment backward finishes its lowest layer. Plain arithmetic: no CAF, no tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe {

struct grad_bucket {
  int64_t offset = 0;      // first element in the flat gradient buffer
  int64_t count = 0;       // elements
  int64_t first_layer = 0; // lowest layer in the bucket: backward finishes it last
  int64_t last_layer = 0;  // highest layer
};

// layer_params[i]: parameter count of layer i (layers laid out in order in the flat buffer).
// Bucket 0 holds the last layers. A bucket closes once it reaches cap_bytes, so buckets hold at
// least one layer each and only the one closing backward (bucket.back()) may be smaller.
// Buckets of zero elements are never produced; cap_bytes <= 0 means one bucket per layer.
std::vector<grad_bucket> plan_buckets(const std::vector<int64_t>& layer_params, int64_t cap_bytes);

}  // namespace troupe
