// local_device_group: a device_group_engine for members that share one accelerator in this
// process (data-parallel replicas dealt onto one GPU, where NCCL takes no second member). They
// meet in memory, as the in-process collective's ranks do, and reduce with the device's own ops
// (device_ops: copies and add_into) on that device's default stream from the member's thread:
// each member sums its ring segment in member order from member 0's values, then every member
// copies the others' sums. Each call returns once its device work is done (it synchronizes that
// stream), so only the member's own thread waits, as with NCCL. Sums only: the stage averages
// nothing here.
#pragma once

#include <memory>

#include "comm/device_group.hpp"

namespace troupe {

std::shared_ptr<net::device_group_engine> local_device_engine();

}  // namespace troupe
