// offload_store: a detached actor answering reads and writes of its io_uring store in order.
#include "actors/store/offload_store.hpp"

#include <chrono>

#include "actors/actor_failure.hpp"
#include "actors/messages.hpp"

namespace troupe {

namespace {

struct store_state {
  std::unique_ptr<storage::uring_store> store;
  std::shared_ptr<device_memory> host;
  static inline const char* name = "offload_store";
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

caf::behavior offload_store(caf::stateful_actor<store_state>* self, std::shared_ptr<storage::uring_store> store,
                            std::shared_ptr<device_memory> host) {
  auto& st = self->state;
  st.store.reset(new storage::uring_store(std::move(*store)));
  st.host = std::move(host);
  name_failures(self, [self] { return std::make_pair("the offload store " + self->state.store->path(), int64_t{-1}); });
  return {
      [self](const store_write& w) {
        const auto t0 = std::chrono::steady_clock::now();
        self->state.store->write(w.offset, w.data.data(), w.data.numel() * static_cast<int64_t>(sizeof(float)));
        return store_done{tensor(), seconds_since(t0)};
      },
      [self](const store_read& r) {
        const auto t0 = std::chrono::steady_clock::now();
        tensor out = tensor::uninitialized({r.count});
        if (self->state.host) self->state.host->charge(out, memory_kind::buffers);
        self->state.store->read(r.offset, out.data(), r.count * static_cast<int64_t>(sizeof(float)));
        out.freeze();
        return store_done{std::move(out), seconds_since(t0)};
      },
  };
}

}  // namespace

caf::actor spawn_offload_store(caf::actor_system& sys, const std::string& path, int64_t bytes,
                               storage::uring_options opt, std::shared_ptr<device_memory> host) {
  opt.remove_on_close = true;
  // Opened here, so a bad folder or a full disk is an error of the caller's, before any actor runs.
  auto store = std::make_shared<storage::uring_store>(path, bytes, opt);
  return sys.spawn<caf::detached>(offload_store, std::move(store), std::move(host));
}

}  // namespace troupe
