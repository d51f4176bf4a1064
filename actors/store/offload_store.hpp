// offload_store: the actor over one io_uring file store (storage/uring_store.hpp) that holds
// what a rank offloads to NVMe. It answers store_write / store_read (messages.hpp) in the order
// they come, each with a store_done, on its own thread: the I/O of one tile runs while its
// client (an optimizer shard) updates the next, and within one request the ring keeps up to
// queue_depth blocks in flight. Include only from actors/ (CAF).
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>

#include "kernels/device_memory.hpp"
#include "storage/uring_store.hpp"

namespace troupe {

// Creates `path` (bytes, rounded up to the block size) and removes it when the actor ends.
// Buffers it reads into are charged to `host` (may be null) as buffers. Detached. Throws what
// the uring_store constructor throws (a missing folder, a full disk), before spawning.
caf::actor spawn_offload_store(caf::actor_system& sys, const std::string& path, int64_t bytes,
                               storage::uring_options opt, std::shared_ptr<device_memory> host);

}  // namespace troupe
