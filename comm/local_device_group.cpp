// local_device_group (local_device_group.hpp): members on one device, meeting in memory.
#include "comm/local_device_group.hpp"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"
#include "kernels/device_ops.hpp"

namespace troupe {

namespace {

// A group_meeting, and each member's summed segment while an all-reduce or reduce-scatter runs.
struct meeting : group_meeting {
  explicit meeting(int n) : group_meeting(n), reduced(static_cast<size_t>(n)) {}
  std::vector<tensor> reduced;
};

class member final : public net::group_backend {
 public:
  member(std::shared_ptr<meeting> m, int rank, device where, bool in_stream)
      : m_(std::move(m)), rank_(rank), ops_(ops_for(where)), in_stream_(in_stream) {}
  int rank() const override { return rank_; }
  int world() const override { return m_->world(); }
  void all_reduce(float* data, int64_t n, net::reduce_op op) override {
    begin();
    reduce_own_segment(data, n, op);
    for (int r = 0; r < m_->world(); ++r) place(r, data, n);  // every segment, this member's too
    done();
  }
  void reduce_scatter(float* data, int64_t n, net::reduce_op op) override {
    begin();
    reduce_own_segment(data, n, op);
    place(rank_, data, n);
    done();
  }
  void all_gather(float* data, int64_t n) override {
    begin();
    m_->values[static_cast<size_t>(rank_)] = data;
    m_->barrier();  // every member's segment is in place
    for (int r = 0; r < m_->world(); ++r) {
      const ring::range seg = ring::segment(n, m_->world(), r);
      if (r != rank_ && seg.count > 0)
        ops_.copy_floats(data + seg.offset, m_->values[static_cast<size_t>(r)] + seg.offset, seg.count);
    }
    ops_.synchronize();
    m_->barrier();  // every member has read the others' segments: each may write its own again
  }
  // The previous member's send read straight from its memory; nobody leaves before all have read.
  void shift(const float* send, int64_t, float* recv, int64_t n_recv) override {
    begin();
    m_->values[static_cast<size_t>(rank_)] = const_cast<float*>(send);  // only read, by the next member
    m_->barrier();
    const int prev = ring::left_of(rank_, m_->world());
    if (n_recv > 0) ops_.copy_floats(recv, m_->values[static_cast<size_t>(prev)], n_recv);
    ops_.synchronize();
    m_->barrier();
  }
  // Over the ring steps above: a GPU stage's groups take no all-to-all yet (cp and experts run on
  // the CPU), and this keeps the members' values where they are.
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    ring::all_to_all_over_ring([this](const float* s, int64_t ns, float* r, int64_t nr) { shift(s, ns, r, nr); },
                               m_->world(), rank_, send, send_counts, recv, recv_counts);
  }
  void broadcast(float*, int64_t, int) override {
    throw std::logic_error("local device group: a stage's collectives are all-reduces, reduce-scatters, all-gathers and ring steps");
  }

 private:
  // The device current; in a stream, what the caller launched before has run: the others read
  // this member's values from their threads once they meet.
  void begin() {
    ops_.make_current();
    if (in_stream_) ops_.synchronize();
  }
  // This member's ring segment, summed over the members in member order into a buffer of its
  // own, once every member's values are in place; afterwards every member's sum is ready.
  void reduce_own_segment(float* data, int64_t n, net::reduce_op op) {
    if (op != net::reduce_op::sum) throw std::logic_error("local device group: sums only");
    m_->values[static_cast<size_t>(rank_)] = data;
    m_->barrier();
    const ring::range seg = ring::segment(n, m_->world(), rank_);
    tensor sum = ops_.empty({seg.count});
    if (seg.count > 0) {
      ops_.copy_floats(f32_out(sum), m_->values[0] + seg.offset, seg.count);  // not 0 + x: -0 stays -0
      for (int r = 1; r < m_->world(); ++r) ops_.add_into(f32_out(sum), m_->values[static_cast<size_t>(r)] + seg.offset, seg.count);
    }
    ops_.synchronize();
    m_->reduced[static_cast<size_t>(rank_)] = std::move(sum);
    m_->barrier();  // every segment is summed; nobody has written its values yet
  }
  // Member r's summed segment into this member's values.
  void place(int r, float* data, int64_t n) {
    const ring::range seg = ring::segment(n, m_->world(), r);
    if (seg.count > 0) ops_.copy_floats(data + seg.offset, f32(m_->reduced[static_cast<size_t>(r)]), seg.count);
  }
  void done() {
    ops_.synchronize();
    m_->barrier();  // every member has its values: the summed segments may go
    m_->reduced[static_cast<size_t>(rank_)] = tensor();
  }

  std::shared_ptr<meeting> m_;
  int rank_;
  const device_ops& ops_;
  const bool in_stream_;  // called from the thread that launches on the values' stream
};

class engine final : public net::device_group_engine {
 public:
  std::string name() const override { return "the device's own ops"; }
  std::string refuses(const std::vector<int>& devices) const override {
    for (size_t i = 1; i < devices.size(); ++i)
      if (devices[i] != devices[0])
        return "members on one GPU only, and these are on cuda:" + std::to_string(devices[0]) + " and cuda:" +
               std::to_string(devices[i]);
    return {};
  }
  // Its kernels are plain ones that finish by themselves: a GPU serves any number of its groups.
  bool one_group_per_device() const override { return false; }
  std::string make_id() override {
    std::lock_guard<std::mutex> lock(mu_);
    return "local-" + std::to_string(next_id_++);
  }
  std::unique_ptr<net::group_backend> join(const std::string& id, int rank, int world, int device_index) override {
    return joined(id, rank, world, device_index, false);
  }
  std::unique_ptr<net::group_backend> join_in_stream(const std::string& id, int rank, int world,
                                                     int device_index) override {
    return joined(id, rank, world, device_index, true);
  }
  void abort(const std::string& why) override {
    std::map<std::string, std::shared_ptr<meeting>> joined;
    {
      std::lock_guard<std::mutex> lock(mu_);
      joined.swap(meetings_);
    }
    for (auto& [id, m] : joined) m->abort(why);
  }

 private:
  std::unique_ptr<net::group_backend> joined(const std::string& id, int rank, int world, int device_index,
                                             bool in_stream) {
    std::shared_ptr<meeting> m;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<meeting>& slot = meetings_[id];
      if (!slot) slot = std::make_shared<meeting>(world);
      m = slot;
    }
    m->barrier();  // as NCCL's: a member is joined once all are
    return std::make_unique<member>(m, rank, device{device_type::cuda, device_index}, in_stream);
  }

  std::mutex mu_;
  int64_t next_id_ = 0;
  std::map<std::string, std::shared_ptr<meeting>> meetings_;  // joined since the last abort
};

}  // namespace

void group_meeting::barrier() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t gen = generation_;
  if (why_.empty() && ++waiting_ == world_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != gen || !why_.empty(); });
  if (!why_.empty()) throw net::net_error("device group aborted: " + why_);
}

void group_meeting::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  why_ = why;
  cv_.notify_all();
}

std::shared_ptr<net::device_group_engine> local_device_engine() { return std::make_shared<engine>(); }

}  // namespace troupe
