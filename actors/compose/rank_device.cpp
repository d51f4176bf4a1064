// A rank's device and memory ledgers (rank_parts.hpp).
#include <thread>

#include "actors/compose/rank_parts.hpp"

namespace troupe {

rank_device compose_device(const rank_site& r, const std::function<std::shared_ptr<device_queue>(int rank)>& device_of) {
  rank_device d;
  if (device_of) d.queue = device_of(r.rank);
  const std::string where = d.queue ? d.queue->where().to_string() : std::string("cpu");
  d.memory = device_memory::make("rank " + std::to_string(r.rank) + " (" + where + ")", r.cfg.device_memory);
  d.host_memory = device_memory::make("host of rank " + std::to_string(r.rank));  // counted for offload only
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  d.pin_cpu = r.cfg.pin_threads ? static_cast<int>(static_cast<unsigned>(r.rank) % cores) : -1;
  return d;
}

}  // namespace troupe
