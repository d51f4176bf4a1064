// gloo_device_engine: a device_group_engine for host-side tests whose members may be in different
// processes, standing where NCCL stands for a GPU job over processes. The fake GPU's memory
// (tests/kernels/fake_gpu.hpp) is host memory, so Gloo reduces the members' buckets in place, as
// NCCL reduces device memory. Like NCCL's, its id is all a member needs to join: the first
// member's make_id serves a key-value store (kept by the engine, in that member's process) and
// names its address; every member connects there and Gloo meets through it. Counts its joins, so
// a process can tell its groups reduced through it. Needs Gloo (refuses every group without it).
// Its pipeline links (join_link) need no Gloo: the sending end's store carries each transfer as a
// key the receiving end takes, in order, on a thread of the end's own standing for NCCL's stream;
// it counts the bytes its sending ends moved.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/collective_backend.hpp"
#include "comm/device_group.hpp"
#include "comm/gloo_group.hpp"
#include "comm/kv_store.hpp"
#include "tests/kernels/fake_streams.hpp"

namespace troupe::test {

// One end of a link: transfer i is key "t<i>" of the sending end's store.
class kv_link final : public net::device_link {
 public:
  kv_link(std::unique_ptr<net::kv_store> store, std::atomic<int64_t>& sent)
      : store_(std::move(store)), sent_(sent), thread_([this] { run(); }) {}
  ~kv_link() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  kv_link(const kv_link&) = delete;
  kv_link& operator=(const kv_link&) = delete;
  void send(const void* data, size_t bytes, done_fn done) override {
    push({true, const_cast<void*>(data), bytes, std::move(done)});
  }
  void recv(void* data, size_t bytes, done_fn done) override { push({false, data, bytes, std::move(done)}); }

 private:
  struct transfer {
    bool send;
    void* data;
    size_t bytes;
    done_fn done;
  };
  void push(transfer t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(t));
    }
    wake_.notify_all();
  }
  bool stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_;
  }
  void run() {
    for (uint64_t i = 0;; ++i) {
      transfer t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      const std::string key = "t" + std::to_string(i);
      try {
        if (t.send) {
          const auto* p = static_cast<const char*>(t.data);
          store_->set(key, std::vector<char>(p, p + t.bytes));
          sent_ += static_cast<int64_t>(t.bytes);
          t.done(std::nullopt);
          continue;
        }
        std::vector<char> got;
        for (bool have = false; !have;) {  // short waits, so the end's destructor is never held long
          if (stopped()) return;
          try {
            got = store_->get(key, 200);
            have = true;
          } catch (const net::net_error&) {
          }
        }
        if (got.size() != t.bytes) {
          t.done("kv_link: " + std::to_string(got.size()) + " bytes arrived for a receive of " + std::to_string(t.bytes));
          continue;
        }
        std::memcpy(t.data, got.data(), got.size());
        t.done(std::nullopt);
      } catch (const std::exception& e) {
        t.done(std::string("kv_link: ") + e.what());
      }
    }
  }

  std::unique_ptr<net::kv_store> store_;
  std::atomic<int64_t>& sent_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<transfer> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: it starts once the rest is in place
};

// A member whose collectives are launched on a fake GPU's stream: each waits for the stream's
// earlier work, which writes what it reads (as NCCL's kernel would run after it).
class settled_member final : public net::group_backend {
 public:
  explicit settled_member(std::unique_ptr<net::group_backend> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  void all_reduce(float* data, int64_t n, net::reduce_op op) override { settle(), inner_->all_reduce(data, n, op); }
  void reduce_scatter(float* data, int64_t n, net::reduce_op op) override {
    settle(), inner_->reduce_scatter(data, n, op);
  }
  void all_gather(float* data, int64_t n) override { settle(), inner_->all_gather(data, n); }
  void broadcast(float* data, int64_t n, int root) override { settle(), inner_->broadcast(data, n, root); }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    settle(), inner_->shift(send, n_send, recv, n_recv);
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    settle(), inner_->all_to_all(send, send_counts, recv, recv_counts);
  }

 private:
  static void settle() {
    if (fake_streams::stream* s = fake_streams::current()) s->synchronize();
  }
  std::unique_ptr<net::group_backend> inner_;
};

class gloo_device_engine final : public net::device_group_engine {
 public:
  // With a refusal: refuses every group with it, so they reduce through the host.
  // Without links: join_link gives none, as an engine that has no links between devices.
  explicit gloo_device_engine(std::string refusal = {}, bool links = true)
      : refusal_(std::move(refusal)), links_(links) {}
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
    auto member = net::connect_gloo_member(rank, world, std::move(store), net::gloo_options{"127.0.0.1", 60000, kSecret});
    ++joins_;
    return member;
  }
  // The fake GPU's ops launched in the stage's calls run later on its stream
  // (tests/kernels/fake_streams.hpp): a member in a stream first waits for what the stream was
  // given before (settled_member), then meets the others at once.
  std::unique_ptr<net::group_backend> join_in_stream(const std::string& id, int rank, int world, int device) override {
    return std::make_unique<settled_member>(join(id, rank, world, device));
  }
  std::unique_ptr<net::device_link> join_link(const std::string& id, bool sender, int) override {
    if (!links_) return nullptr;
    const auto colon = id.rfind(':');
    if (colon == std::string::npos) throw std::invalid_argument("gloo_device_engine: not an id: " + id);
    const auto port = static_cast<uint16_t>(std::stoi(id.substr(colon + 1)));
    return std::make_unique<kv_link>(net::kv_connect(id.substr(0, colon), port, kSecret, sender ? 0u : 1u, 30000),
                                     link_bytes_);
  }
  // Gloo's waits end by its own timeout; the tests that use this engine do not fail jobs.
  void abort(const std::string&) override {}
  int joins() const { return joins_; }
  int64_t link_bytes() const { return link_bytes_; }  // sent over its links, by this process

 private:
  static constexpr const char* kSecret = "gloo-device-engine";
  std::string refusal_;
  bool links_ = true;
  std::mutex mu_;
  std::vector<std::shared_ptr<net::kv_server>> stores_;  // the groups whose first member is here
  std::atomic<int> joins_{0};
  std::atomic<int64_t> link_bytes_{0};
};

}  // namespace troupe::test
