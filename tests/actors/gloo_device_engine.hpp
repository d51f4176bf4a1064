// gloo_device_engine: a device_group_engine for host-side tests whose members may be in different
// processes, standing where NCCL stands for a GPU job over processes. The fake GPU's memory
// (tests/kernels/fake_gpu.hpp) is host memory, so Gloo reduces the members' buckets in place, as
// NCCL reduces device memory. Like NCCL's, its id is all a member needs to join: the first
// member's make_id serves a key-value store (kept by the engine, in that member's process) and
// names its address; every member connects there and Gloo meets through it. Counts its joins, so
// a process can tell its groups reduced through it. Needs Gloo (refuses every group without it).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/collective_backend.hpp"
#include "comm/device_group.hpp"
#include "comm/gloo_group.hpp"
#include "comm/kv_store.hpp"

namespace troupe::test {

class gloo_device_engine final : public net::device_group_engine {
 public:
  // With a refusal: refuses every group with it, so they reduce through the host.
  explicit gloo_device_engine(std::string refusal = {}) : refusal_(std::move(refusal)) {}
  std::string name() const override { return "gloo-devices"; }
  std::string refuses(const std::vector<int>&) const override {
    if (!refusal_.empty()) return refusal_;
    return net::backend_built(net::backend_kind::gloo) ? "" : "this build has no Gloo";
  }
  bool one_group_per_device() const override { return false; }  // every fake GPU is cuda:7
  bool spans_processes() const override { return true; }
  std::string make_id() override {
    auto store = std::make_shared<net::kv_server>("127.0.0.1", 0, kSecret);
    const std::string id = "127.0.0.1:" + std::to_string(store->port());
    std::lock_guard<std::mutex> lock(mu_);
    stores_.push_back(std::move(store));
    return id;
  }
  std::unique_ptr<net::group_backend> join(const std::string& id, int rank, int world, int) override {
    const auto colon = id.rfind(':');
    if (colon == std::string::npos) throw std::invalid_argument("gloo_device_engine: not an id: " + id);
    const auto port = static_cast<uint16_t>(std::stoi(id.substr(colon + 1)));
    std::shared_ptr<net::kv_store> store =
        net::kv_connect(id.substr(0, colon), port, kSecret, static_cast<uint32_t>(rank), 30000);
    auto member = net::connect_gloo_member(rank, world, std::move(store), net::gloo_options{"127.0.0.1", 60000});
    ++joins_;
    return member;
  }
  // The fake GPU's values are written as its work runs, in the stage's calls (the helper's fake
  // devices launch in the caller, as cuda_queue does), so a member in a stream meets the others
  // as a plain one does.
  std::unique_ptr<net::group_backend> join_in_stream(const std::string& id, int rank, int world, int device) override {
    return join(id, rank, world, device);
  }
  // Gloo's waits end by its own timeout; the tests that use this engine do not fail jobs.
  void abort(const std::string&) override {}
  int joins() const { return joins_; }

 private:
  static constexpr const char* kSecret = "gloo-device-engine";
  std::string refusal_;
  std::mutex mu_;
  std::vector<std::shared_ptr<net::kv_server>> stores_;  // the groups whose first member is here
  std::atomic<int> joins_{0};
};

}  // namespace troupe::test
