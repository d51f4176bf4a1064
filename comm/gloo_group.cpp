// connect_gloo_member over Debian's Gloo (gloo_group.hpp). Gloo's exceptions come back as
// net_error naming the collective, so the owning actor reports them like a broken ring.
#include "comm/gloo_group.hpp"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <climits>
#include <cstring>

#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {

bool gloo_built() { return true; }

namespace {

// Gloo's rendezvous Store over troupe's kv_store: the one place Gloo's pair addresses cross.
class kv_gloo_store final : public gloo::rendezvous::Store {
 public:
  kv_gloo_store(std::shared_ptr<kv_store> kv, int timeout_ms) : kv_(std::move(kv)), timeout_ms_(timeout_ms) {}
  void set(const std::string& key, const std::vector<char>& data) override { kv_->set(key, data); }
  std::vector<char> get(const std::string& key) override { return kv_->get(key, timeout_ms_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(timeout_ms_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& k : keys) kv_->get(k, static_cast<int>(timeout.count()));
  }

 private:
  std::shared_ptr<kv_store> kv_;
  int timeout_ms_;
};

int count_of(int64_t n) {
  if (n > INT_MAX) throw net_error("Gloo: " + std::to_string(n) + " elements exceed an int count");
  return static_cast<int>(n);
}

template <typename F>
void gloo_call(const char* what, F&& f) {
  try {
    f();
  } catch (const net_error&) {
    throw;
  } catch (const std::exception& e) {
    throw net_error(std::string("Gloo ") + what + ": " + e.what());
  }
}

class gloo_member final : public group_backend {
 public:
  gloo_member(std::shared_ptr<gloo::rendezvous::Context> ctx, std::shared_ptr<kv_store> store)
      : ctx_(std::move(ctx)), store_(std::move(store)) {}
  int rank() const override { return ctx_->rank; }
  int world() const override { return ctx_->size; }

  void all_reduce(float* data, int64_t n, reduce_op op) override {
    if (n == 0) return;
    gloo_call("all-reduce", [&] {
      gloo::AllreduceOptions o(ctx_);
      o.setOutput(data, static_cast<size_t>(n));
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(o);
    });
    if (op == reduce_op::average) ring::scale(data, n, 1.0f / static_cast<float>(world()));
  }

  void reduce_scatter(float* data, int64_t n, reduce_op op) override {
    if (n == 0) return;
    std::vector<int> counts(static_cast<size_t>(world()));
    for (int j = 0; j < world(); ++j) counts[static_cast<size_t>(j)] = count_of(ring::segment(n, world(), j).count);
    gloo_call("reduce-scatter", [&] {
      gloo::ReduceScatterHalvingDoubling<float> rs(ctx_, {data}, count_of(n), counts);
      rs.run();
    });
    // Gloo leaves this rank's part at the front; troupe's layout keeps it at its ring segment.
    const ring::range seg = ring::segment(n, world(), rank());
    std::memmove(data + seg.offset, data, static_cast<size_t>(seg.count) * sizeof(float));
    if (op == reduce_op::average) ring::scale(data + seg.offset, seg.count, 1.0f / static_cast<float>(world()));
  }

  void all_gather(float* data, int64_t n) override {
    if (n == 0) return;
    std::vector<size_t> counts(static_cast<size_t>(world()));
    for (int j = 0; j < world(); ++j) counts[static_cast<size_t>(j)] = static_cast<size_t>(ring::segment(n, world(), j).count);
    gloo_call("all-gather", [&] {
      gloo::AllgathervOptions o(ctx_);
      o.setOutput(data, std::move(counts));  // no input: this rank's segment is already in place
      gloo::allgatherv(o);
    });
  }

  void broadcast(float* data, int64_t n, int root) override {
    if (n == 0) return;
    gloo_call("broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(data, static_cast<size_t>(n));
      o.setRoot(root);
      gloo::broadcast(o);
    });
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::shared_ptr<kv_store> store_;  // the first member's serves the others for as long as the group lives
};

}  // namespace

std::unique_ptr<group_backend> connect_gloo_member(int rank, int world, std::shared_ptr<kv_store> store,
                                                   const gloo_options& opts) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("connect_gloo_member: rank " + std::to_string(rank) + " of " + std::to_string(world));
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  gloo_call("rendezvous", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = opts.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
    ctx->setTimeout(std::chrono::milliseconds(opts.timeout_ms));
    kv_gloo_store gs(store, opts.timeout_ms);
    ctx->connectFullMesh(gs, device);
  });
  return std::make_unique<gloo_member>(std::move(ctx), std::move(store));
}

}  // namespace troupe::net
