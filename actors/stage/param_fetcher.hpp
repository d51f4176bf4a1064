// param_fetcher: ZeRO-3's parameter stream of one stage. A thread of its own all-gathers the
// stage's parameter units from its data-parallel group, in the order the stage's schedule row
// will use them, at most `depth` units ahead of use, so a gather overlaps the compute of the
// units before it. Every member of the group is given the same order (the replicas run the same
// row), so their blocking all-gathers meet. With the parameters offloaded to NVMe
// (ZeRO-Infinity), the rank's segments live in a segment_file that this thread alone drives: it
// writes each step's updated segments there and reads every unit's segment back just before its
// gather, so the reads run `depth` units ahead of use, in the schedule's order. On a GPU each
// gathered unit is placed on the device as it arrives, so its copy overlaps compute too. No CAF.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/tensor.hpp"
#include "kernels/tp_group.hpp"
#include "storage/segment_file.hpp"

namespace troupe {

class param_fetcher {
 public:
  // One unit to gather: its size, and where this rank's segment (shard_of(count, dp, rank))
  // sits in `source` (the rank's parameter segments, held only until this unit is gathered) or,
  // with a segment file, in the file's flat segments (`source` is then empty).
  struct request {
    int chunk = 0;
    size_t unit = 0;
    int64_t count = 0;
    tensor source;
    int64_t at = 0;
  };
  // Where a gathered unit goes before it waits to be taken: a GPU stage's device, copied in on its
  // queue's upload stream (device_queue::stage_in) while the units before it compute. Called on
  // the fetcher's thread; a throw fails the unit as its gather's failure would.
  using place_fn = std::function<tensor(tensor gathered)>;
  // depth >= 1: gathered units waiting to be taken, at most. `file`: where the segments live
  // between uses (null: in the requests' `source`). `place`: null keeps them on the host.
  param_fetcher(std::shared_ptr<tp_group> group, int depth, std::shared_ptr<storage::segment_file> file = nullptr,
                place_fn place = {});
  ~param_fetcher();
  param_fetcher(const param_fetcher&) = delete;
  param_fetcher& operator=(const param_fetcher&) = delete;

  // With a segment file: the segments to keep there from now on (after the optimizer's update).
  // They are written before the next unit is read, and let go once written.
  void keep(tensor segments);
  // The step's units in order of use; the previous step's must all have been taken.
  void begin_step(std::vector<request> order);
  bool has_file() const { return file_ != nullptr; }
  // Blocks until the next unit in order is gathered and returns it (frozen). Throws
  // std::logic_error when (chunk, unit) is not the next in order, std::runtime_error with the
  // group's error when its gather failed or the fetcher was stopped.
  tensor take(int chunk, size_t unit);
  // Ends every wait with `why` (the job is stopping).
  void stop(const std::string& why);

 private:
  void run();
  std::shared_ptr<tp_group> group_;
  size_t depth_;
  std::shared_ptr<storage::segment_file> file_;  // used by the worker thread only
  place_fn place_;
  tensor to_keep_;                               // segments not written to file_ yet
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<request> todo_;                         // not gathered yet
  std::deque<std::pair<request, tensor>> ready_;     // gathered, in order
  std::deque<std::pair<int, size_t>> expected_;      // what take() must be asked for next
  std::string error_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace troupe
