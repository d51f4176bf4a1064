// device_queue (device_queue.hpp): the stream-ordered default of stage_out.
#include "kernels/device_queue.hpp"

#include <memory>
#include <utility>

#include "kernels/device_ops.hpp"

namespace troupe {

void device_queue::stage_out(const tensor& x, std::function<void(tensor)> done) {
  auto host = std::make_shared<tensor>();
  enqueue([x, host] { *host = ops_for(x.where()).host_copy(x); });
  when_done([host, done = std::move(done)]() mutable { done(std::move(*host)); });
}

}  // namespace troupe
