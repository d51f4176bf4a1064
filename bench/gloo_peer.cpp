// Gloo's ring all-reduce as a peer (see gloo_peer.hpp); compiled only where CMake found Gloo.
#include "bench/gloo_peer.hpp"

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace troupe::bench {

namespace {

class gloo_ring_impl final : public gloo_ring {
 public:
  explicit gloo_ring_impl(std::shared_ptr<gloo::rendezvous::Context> ctx) : ctx_(std::move(ctx)) {}
  void all_reduce_sum(float* data, size_t n) override {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(data, n);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
};

}  // namespace

bool gloo_built() { return true; }

std::unique_ptr<gloo_ring> connect_gloo_ring(int rank, int world, const std::string& store_dir) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  gloo::rendezvous::FileStore store(store_dir);
  ctx->connectFullMesh(store, dev);
  return std::make_unique<gloo_ring_impl>(std::move(ctx));
}

}  // namespace troupe::bench
