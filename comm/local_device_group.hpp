// local_device_group: a device_group_engine for members that share one accelerator in this
// process (data-parallel replicas dealt onto one GPU, where NCCL takes no second member). They
// meet in memory, as the in-process collective's ranks do, and reduce with the device's own ops
// (device_ops: copies and add_into) on that device's default stream from the member's thread:
// each member sums its ring segment in member order from member 0's values, then every member
// copies the others' sums. Each call returns once its device work is done (it synchronizes that
// stream), so only the member's own thread waits, as with NCCL. A tensor-parallel group's members
// (join_in_stream) first wait for their stage's stream, then meet alike on the stage's thread and
// reduce on its stream. Sums only: the stage averages nothing here.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/device_group.hpp"

namespace troupe {

std::shared_ptr<net::device_group_engine> local_device_engine();

// Where the members of one in-process device group meet: a barrier they pass again and again,
// and where each member's values are while a collective runs. Once aborted, every wait (now
// and later) throws net_error naming why.
class group_meeting {
 public:
  explicit group_meeting(int world) : values(static_cast<size_t>(world)), world_(world) {}
  int world() const { return world_; }
  void barrier();
  void abort(const std::string& why);

  std::vector<float*> values;  // by member: written before a barrier, read after it

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  int waiting_ = 0;
  int64_t generation_ = 0;
  std::string why_;
};

}  // namespace troupe
