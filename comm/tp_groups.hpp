// The implementations of kernels/tp_group.hpp: ranks of one process meeting in memory
// (local_tp_group), ranks on accelerators (make_device_tp_group in one process,
// spanning_device_tp_member across processes, over a device_group_engine), and a member of a
// group that spans processes, over any net::group_backend (the TCP ring or MPI). Both sum in the
// ring's order (troupe::ring): segment j is added up x[j+1] + x[j+2] + ... + x[j], so a job gives
// the same bits in one process as over the TCP ring.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collective_backend.hpp"
#include "comm/device_group.hpp"
#include "kernels/tp_group.hpp"

namespace troupe::net {

struct local_tp_options {
  // A member that waits this long for the others gives up with an error naming the call, and
  // every other member's wait ends with it: a dead or wedged rank never hangs its peers.
  int timeout_ms = 120000;
};

// `size` members of one in-process group; member r is result[r], each driven by its own thread.
std::vector<std::shared_ptr<tp_group>> make_local_tp_group(int size, local_tp_options opts = {});

// The members of an in-process group on accelerators (member r on devices[r]), reducing through
// `engine` (comm/device_group.hpp) with an id it makes now. A member joins at its first
// collective, from the thread that calls it (joining is collective, and each member's stage
// thread gets there); then every call is ordered on that thread's current stream
// (join_in_stream).
std::vector<std::shared_ptr<tp_group>> make_device_tp_group(const std::shared_ptr<device_group_engine>& engine,
                                                            const std::vector<int>& devices);
// Member `rank` of `size` of a group on accelerators that spans processes, on `device`: as
// make_device_tp_group's, but the id comes from `id` when the member joins (the group's first
// member made it; the others fetch it), so joining waits for that too.
std::shared_ptr<tp_group> spanning_device_tp_member(std::shared_ptr<device_group_engine> engine,
                                                    std::function<std::string()> id, int rank, int size, int device);

// Ends every wait of the group's members (now and later) with `why`: the job is stopping. A
// member on accelerators aborts its engine (every group the engine joined), and its peers that
// have not joined yet never will.
void abort_local_tp_group(const std::shared_ptr<tp_group>& member, const std::string& why);

// One call of a member, as logged_tp_group keeps it. Times are steady-clock seconds (0: not yet).
struct tp_call {
  int64_t seq = 0;
  const char* op = "";  // "all-reduce", "all-gather", "reduce-scatter", "shift" or "all-to-all"
  int64_t n = 0;        // elements (a shift's or an all-to-all's: those it sends)
  double started_at = 0, finished_at = 0;
  bool failed = false;
};

// Keeps a member's last `keep` calls, written by the thread that makes them as it enters and
// leaves each, and readable from any other thread while that one waits inside a call for a peer:
// what the watchdog shows for a stage wedged in a tensor-parallel (or ZeRO-3 parameter) group,
// which cannot answer for itself. Also the seconds all its calls took (the sums and the waits for
// peers): how much of a stage's compute tensor parallelism's collectives are.
class logged_tp_group final : public tp_group {
 public:
  explicit logged_tp_group(std::shared_ptr<tp_group> inner, size_t keep = 16) : inner_(std::move(inner)), keep_(keep) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_gather(float* data, int64_t n) override;
  void reduce_scatter_sum(float* data, int64_t n) override;
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override;
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override;
  std::vector<tp_call> recent() const;  // oldest first
  double seconds() const;
  const std::shared_ptr<tp_group>& inner() const { return inner_; }

 private:
  template <class F>
  void logged(const char* op, int64_t n, F call);

  std::shared_ptr<tp_group> inner_;
  size_t keep_;
  mutable std::mutex mu_;
  std::deque<tp_call> calls_;
  int64_t next_seq_ = 0;
  double seconds_ = 0;
};

// One member over a back end; its rank and size are the back end's.
std::shared_ptr<tp_group> backend_tp_group(std::shared_ptr<group_backend> backend);

}  // namespace troupe::net
