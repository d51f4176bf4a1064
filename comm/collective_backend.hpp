// A collective back end: one member of one group (a data-parallel group of the mesh), driven from
// one thread (the collective actor's own), each call blocking until its result is in place, so
// the owning actor turns every completion into a message and the stages never wait on it. The
// project's TCP ring, MPI and Gloo implement it; the in-process group is actors of its own.
// Data layout follows troupe::ring: a reduce-scatter leaves rank r's reduced ring::segment in
// place, an all-gather starts from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::net {

enum class reduce_op { sum, average };

enum class backend_kind { tcp, mpi, gloo, nccl };
const char* to_string(backend_kind b);  // "tcp", "mpi", "gloo", "nccl"
std::optional<backend_kind> parse_backend(const std::string& text);
bool backend_built(backend_kind b);     // tcp always; mpi, gloo, nccl where CMake found Open MPI, Gloo, CUDA and NCCL
std::string built_backends();           // "tcp, mpi, gloo, nccl", or those of them built

class group_backend {
 public:
  virtual ~group_backend() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual void all_reduce(float* data, int64_t n, reduce_op op) = 0;
  virtual void reduce_scatter(float* data, int64_t n, reduce_op op) = 0;
  virtual void all_gather(float* data, int64_t n) = 0;
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  // One step of a ring: sends send[n_send] to the next member (rank + 1, wrapping) and receives
  // recv[n_recv] from the previous one, both at once. The sizes may differ between members, but
  // each n_recv must be what the previous member sends; the two buffers must not overlap.
  virtual void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) = 0;
  // Member j gets send_counts[j] floats of this member's (the blocks end to end in member order,
  // its own included) while recv_counts[j] come from it into recv, laid out the same way;
  // recv_counts[j] must be what member j sends here.
  virtual void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts) = 0;
};

}  // namespace troupe::net
