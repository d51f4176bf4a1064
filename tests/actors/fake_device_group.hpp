// fake_device_group: a device_group_engine for host-side tests, standing where NCCL stands for a
// job on the fake GPU (tests/kernels/fake_gpu.hpp). The members of one group meet in host memory;
// a reduction adds the members' values in member order (with two members, the bits of either
// order, so a dp 2 job matches the CPU's ring bit for bit), in the ring's layout as NCCL's is. Every pointer it is given must lie in
// the fake device's memory, and it records the ids it made, who joined with which, and how many
// reductions ran. It takes any devices unless told to refuse them, or to serve one group per device.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/local_device_group.hpp"
#include "comm/device_group.hpp"
#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"
#include "tests/kernels/fake_gpu.hpp"

namespace troupe::test {

class fake_device_group_engine final : public net::device_group_engine {
 public:
  // Every rank of a fake-GPU job is on cuda:7, so by default the fake lets a device serve any
  // number of groups.
  explicit fake_device_group_engine(std::string refusal = {}, bool one_group_per_device = false)
      : refusal_(std::move(refusal)), one_group_per_device_(one_group_per_device) {}

  std::string name() const override { return "fake-nccl"; }
  std::string refuses(const std::vector<int>&) const override { return refusal_; }
  bool one_group_per_device() const override { return one_group_per_device_; }
  // Its members meet in this process's memory; a test may say it spans processes, to see who
  // chooses it for a group that does.
  bool spans_processes() const override { return spans_processes_; }
  void set_spans_processes(bool on) { spans_processes_ = on; }
  std::string make_id() override {
    std::lock_guard<std::mutex> lock(mu_);
    ids_.push_back("fake-group-" + std::to_string(ids_.size()));
    return ids_.back();
  }
  std::unique_ptr<net::group_backend> join(const std::string& id, int rank, int world, int) override {
    std::shared_ptr<meeting> m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<meeting>& slot = meetings_[id];
      if (!slot) slot = std::make_shared<meeting>(world);
      m = slot;
      joined_[id].push_back(rank);
    }
    m->barrier();  // joining is collective, as NCCL's is
    return std::make_unique<member>(m, rank, this);
  }
  // The fake device's values are written when its work runs (on the fake queue's thread, in
  // order), so a member in a stream meets the others as a plain one does; counted apart.
  std::unique_ptr<net::group_backend> join_in_stream(const std::string& id, int rank, int world, int device) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++in_stream_joins_;
    }
    return join(id, rank, world, device);
  }
  int64_t in_stream_joins() const { return counted(in_stream_joins_); }
  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = why;
    for (auto& [id, m] : meetings_) m->abort(why);
    held_.notify_all();
  }
  // Fault injection: member `rank`'s collective number `call` (counting from 0, every kind, in
  // every group) fails, as a member whose peer died would, before it meets the others; they wait
  // for it until the job aborts the engine.
  void fail(int rank, int64_t call) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_rank_ = rank;
    fail_call_ = call;
  }
  // Fault injection: member `rank`'s collective number `call` never returns (a wedged peer, a
  // hung kernel) until the engine is aborted.
  void hold(int rank, int64_t call) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_rank_ = rank;
    hold_call_ = call;
  }
  bool aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return !aborted_.empty();
  }

  std::vector<std::string> ids() const {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_;
  }
  // The members that joined with `id`, in the order they did.
  std::vector<int> joined(const std::string& id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = joined_.find(id);
    return it == joined_.end() ? std::vector<int>{} : it->second;
  }
  int64_t all_reduces() const { return counted(all_reduces_); }
  int64_t reduce_scatters() const { return counted(reduce_scatters_); }
  int64_t all_gathers() const { return counted(all_gathers_); }

 private:
  using meeting = group_meeting;

  class member final : public net::group_backend {
   public:
    member(std::shared_ptr<meeting> m, int rank, fake_device_group_engine* engine)
        : m_(std::move(m)), rank_(rank), engine_(engine) {}
    int rank() const override { return rank_; }
    int world() const override { return m_->world(); }
    void all_reduce(float* data, int64_t n, net::reduce_op op) override {
      reduce(data, n, op, {0, n}, &fake_device_group_engine::all_reduces_);
    }
    // In the ring's layout (comm/ring_schedule.hpp), as NCCL's group is: this member's segment.
    void reduce_scatter(float* data, int64_t n, net::reduce_op op) override {
      reduce(data, n, op, ring::segment(n, m_->world(), rank_), &fake_device_group_engine::reduce_scatters_);
    }
    void all_gather(float* data, int64_t n) override {
      engine_->injected(rank_);
      settle_stream();
      EXPECT_TRUE(n == 0 || fake_memory()->owns(data)) << "an all-gather of values outside the device's memory";
      m_->values[static_cast<size_t>(rank_)] = data;
      m_->barrier();  // every member's segment is in place
      for (int r = 0; r < m_->world(); ++r) {
        const ring::range seg = ring::segment(n, m_->world(), r);
        if (r != rank_) std::copy(m_->values[static_cast<size_t>(r)] + seg.offset, m_->values[static_cast<size_t>(r)] + seg.offset + seg.count, data + seg.offset);
      }
      m_->barrier();  // every member has read the others' segments
      count(&fake_device_group_engine::all_gathers_);
    }
    // The stage's collectives are the three above (a GPU stage takes no context group, whose
    // ring steps are the only shifts); nothing else reaches a device group.
    void broadcast(float*, int64_t, int) override {
      throw std::logic_error("fake device group: broadcast was never meant to reach it");
    }
    void shift(const float*, int64_t, float*, int64_t) override {
      throw std::logic_error("fake device group: a ring step was never meant to reach it");
    }
    void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override {
      throw std::logic_error("fake device group: an all-to-all was never meant to reach it");
    }

   private:
    // Elements [part.offset, +part.count) of data end as the members' sum over them, added in
    // member order from member 0's value (0 + x would turn -0 into +0).
    void reduce(float* data, int64_t n, net::reduce_op op, ring::range part, int64_t fake_device_group_engine::*counter) {
      engine_->injected(rank_);
      settle_stream();
      EXPECT_TRUE(n == 0 || fake_memory()->owns(data)) << "a reduction of values outside the device's memory";
      m_->values[static_cast<size_t>(rank_)] = data;
      m_->barrier();  // every member's values are in place
      const float* first = m_->values[0] + part.offset;
      std::vector<float> sum(first, first + part.count);
      for (size_t r = 1; r < m_->values.size(); ++r)
        for (int64_t i = 0; i < part.count; ++i) sum[static_cast<size_t>(i)] += m_->values[r][part.offset + i];
      if (op == net::reduce_op::average)
        for (float& x : sum) x /= static_cast<float>(m_->world());
      m_->barrier();  // every member has read the others' values: each may overwrite its own
      std::copy(sum.begin(), sum.end(), data + part.offset);
      count(counter);
    }
    // Launched from a stream (fake_streams.hpp), a collective reads what the stream's earlier
    // work writes: the member waits for that work, then meets the others at once (as if NCCL's
    // kernel ran the moment it was launched; what comes after it on the stream comes after).
    static void settle_stream() {
      if (fake_streams::stream* s = fake_streams::current()) s->synchronize();
    }
    void count(int64_t fake_device_group_engine::*which) {
      std::lock_guard<std::mutex> lock(engine_->mu_);
      ++(engine_->*which);
    }
    std::shared_ptr<meeting> m_;
    int rank_;
    fake_device_group_engine* engine_;
  };

  // Throws for the collective fail() named; waits for an abort in the one hold() named.
  void injected(int rank) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t call = calls_of_[rank]++;
    if (rank == fail_rank_ && call == fail_call_)
      throw net::net_error("injected failure of member " + std::to_string(rank) + "'s collective " + std::to_string(call));
    if (rank == hold_rank_ && call == hold_call_) {
      held_.wait(lock, [&] { return !aborted_.empty(); });
      throw net::net_error("fake device group aborted: " + aborted_);
    }
  }

  const std::string refusal_;
  const bool one_group_per_device_;
  bool spans_processes_ = false;
  mutable std::mutex mu_;
  std::string aborted_;
  int fail_rank_ = -1, hold_rank_ = -1;
  int64_t fail_call_ = -1, hold_call_ = -1;
  std::condition_variable held_;
  std::map<int, int64_t> calls_of_;
  std::vector<std::string> ids_;
  std::map<std::string, std::shared_ptr<meeting>> meetings_;
  std::map<std::string, std::vector<int>> joined_;
  int64_t all_reduces_ = 0, reduce_scatters_ = 0, all_gathers_ = 0, in_stream_joins_ = 0;

  int64_t counted(const int64_t& n) const {
    std::lock_guard<std::mutex> lock(mu_);
    return n;
  }
};

}  // namespace troupe::test
