// local_tp_group: members post their buffers, meet at a barrier, each sums its own ring segment
// from everyone's buffers into a scratch row, meet again, and copy every row back. Two barriers
// per call; nobody writes a buffer another member may still be reading.
#include "comm/tp_groups.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include "comm/ring_schedule.hpp"

namespace troupe::net {

namespace {

struct shared_state {
  explicit shared_state(int n, local_tp_options o) : size(n), opts(o), data(n), counts(n), splits(n), scratch(n) {}
  const int size;
  const local_tp_options opts;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  std::string aborted;  // non-empty: every wait ends with this
  std::vector<float*> data;
  std::vector<int64_t> counts;
  std::vector<const std::vector<int64_t>*> splits;  // an all-to-all's send counts, by member
  std::vector<std::vector<float>> scratch;

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (aborted.empty()) aborted = why;
    cv.notify_all();
  }

  // Everyone arrives, or the wait ends with an error; `what` names the call for that error.
  void barrier(int rank, const char* what, uint64_t call) {
    std::unique_lock<std::mutex> lock(mu);
    if (!aborted.empty()) throw std::runtime_error(aborted);
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const bool met = cv.wait_for(lock, std::chrono::milliseconds(opts.timeout_ms),
                                 [&] { return generation != gen || !aborted.empty(); });
    if (generation != gen) return;
    if (met) throw std::runtime_error(aborted);
    aborted = "tensor-parallel group: rank " + std::to_string(rank) + " waited " +
              std::to_string(opts.timeout_ms / 1000.0) + " s in " + what + " #" + std::to_string(call) +
              " for the other " + std::to_string(size - 1) + " member(s)";
    cv.notify_all();
    throw std::runtime_error(aborted);
  }
};

class local_member final : public tp_group {
 public:
  local_member(std::shared_ptr<shared_state> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }

  void all_reduce_sum(float* data, int64_t n) override {
    sum_own_segment(data, n, "all_reduce_sum");
    for (int j = 0; j < s_->size; ++j) {
      const ring::range sj = ring::segment(n, s_->size, j);
      ring::copy(data + sj.offset, s_->scratch[static_cast<size_t>(j)].data(), sj.count);
    }
  }

  void reduce_scatter_sum(float* data, int64_t n) override {
    sum_own_segment(data, n, "reduce_scatter_sum");
    const ring::range mine = ring::segment(n, s_->size, rank_);
    ring::copy(data + mine.offset, s_->scratch[static_cast<size_t>(rank_)].data(), mine.count);
  }

  // Everyone's buffers posted, this member's ring segment summed in ring order into its scratch
  // row, and everyone past that: the rows are complete and no buffer is read any more.
  void sum_own_segment(float* data, int64_t n, const char* what) {
    post(data, n, what);
    const int P = s_->size;
    const ring::range seg = ring::segment(n, P, rank_);
    std::vector<float>& out = s_->scratch[static_cast<size_t>(rank_)];
    out.resize(static_cast<size_t>(seg.count));
    const int first = ring::right_of(rank_, P);  // the segment's sum starts at rank j + 1
    ring::copy(out.data(), s_->data[static_cast<size_t>(first)] + seg.offset, seg.count);
    for (int k = 2; k <= P; ++k) {
      const int q = (rank_ + k) % P;
      ring::add(out.data(), out.data(), s_->data[static_cast<size_t>(q)] + seg.offset, seg.count);
    }
    s_->barrier(rank_, what, calls_);
  }

  void all_gather(float* data, int64_t n) override {
    post(data, n, "all_gather");
    const int P = s_->size;
    for (int j = 0; j < P; ++j) {
      if (j == rank_) continue;
      const ring::range sj = ring::segment(n, P, j);
      ring::copy(data + sj.offset, s_->data[static_cast<size_t>(j)] + sj.offset, sj.count);
    }
    s_->barrier(rank_, "all_gather", calls_);  // nobody changes its buffer before all have read it
  }

  // The previous member's send read from its memory once both have posted theirs.
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    ++calls_;
    s_->data[static_cast<size_t>(rank_)] = const_cast<float*>(send);  // only read, by the next member
    s_->counts[static_cast<size_t>(rank_)] = n_send;
    s_->barrier(rank_, "shift", calls_);
    const int prev = ring::left_of(rank_, s_->size);
    std::string why;
    if (s_->counts[static_cast<size_t>(prev)] != n_recv)
      why = "tensor-parallel group: shift #" + std::to_string(calls_) + " on rank " + std::to_string(rank_) +
            " expects " + std::to_string(n_recv) + " elements but rank " + std::to_string(prev) + " sends " +
            std::to_string(s_->counts[static_cast<size_t>(prev)]) + " (the ranks run different schedules)";
    else
      ring::copy(recv, s_->data[static_cast<size_t>(prev)], n_recv);
    s_->barrier(rank_, "shift", calls_);  // nobody changes its send before the next member read it
    fail_after_reads(why);
  }

  // A mismatch found while the others may still read this member's buffer fails the group only
  // once every member is past reading (the second barrier), so no buffer goes while read.
  void fail_after_reads(const std::string& why) {
    if (why.empty()) return;
    s_->abort(why);
    throw std::logic_error(why);
  }

  // Each member reads its block straight from every member's posted send buffer.
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    ++calls_;
    s_->data[static_cast<size_t>(rank_)] = const_cast<float*>(send);  // only read, by every member
    s_->splits[static_cast<size_t>(rank_)] = &send_counts;
    s_->barrier(rank_, "all_to_all", calls_);
    int64_t at = 0;
    std::string why;
    for (int j = 0; j < s_->size && why.empty(); ++j) {
      const std::vector<int64_t>& theirs = *s_->splits[static_cast<size_t>(j)];
      int64_t from = 0;
      for (int i = 0; i < rank_; ++i) from += theirs[static_cast<size_t>(i)];
      if (theirs[static_cast<size_t>(rank_)] != recv_counts[static_cast<size_t>(j)]) {
        why = "tensor-parallel group: all_to_all #" + std::to_string(calls_) + " on rank " + std::to_string(rank_) +
              " expects " + std::to_string(recv_counts[static_cast<size_t>(j)]) + " elements from rank " +
              std::to_string(j) + ", which sends " + std::to_string(theirs[static_cast<size_t>(rank_)]) +
              " (the ranks run different schedules)";
        break;
      }
      ring::copy(recv + at, s_->data[static_cast<size_t>(j)] + from, recv_counts[static_cast<size_t>(j)]);
      at += recv_counts[static_cast<size_t>(j)];
    }
    s_->barrier(rank_, "all_to_all", calls_);  // nobody changes its send before every member read it
    fail_after_reads(why);
  }

  const std::shared_ptr<shared_state>& state() const { return s_; }

 private:
  void post(float* data, int64_t n, const char* what) {
    ++calls_;
    s_->data[static_cast<size_t>(rank_)] = data;
    s_->counts[static_cast<size_t>(rank_)] = n;
    s_->barrier(rank_, what, calls_);
    for (int j = 0; j < s_->size; ++j)
      if (s_->counts[static_cast<size_t>(j)] != n) {
        const std::string why = "tensor-parallel group: " + std::string(what) + " #" + std::to_string(calls_) +
                                " has " + std::to_string(n) + " elements on rank " + std::to_string(rank_) +
                                " but " + std::to_string(s_->counts[static_cast<size_t>(j)]) + " on rank " +
                                std::to_string(j) + " (the ranks run different schedules)";
        s_->abort(why);
        throw std::logic_error(why);
      }
  }

  std::shared_ptr<shared_state> s_;
  int rank_;
  uint64_t calls_ = 0;
};

class backend_member final : public tp_group {
 public:
  explicit backend_member(std::shared_ptr<group_backend> b) : b_(std::move(b)) {}
  int rank() const override { return b_->rank(); }
  int size() const override { return b_->world(); }
  void all_reduce_sum(float* data, int64_t n) override { b_->all_reduce(data, n, reduce_op::sum); }
  void all_gather(float* data, int64_t n) override { b_->all_gather(data, n); }
  void reduce_scatter_sum(float* data, int64_t n) override { b_->reduce_scatter(data, n, reduce_op::sum); }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    b_->shift(send, n_send, recv, n_recv);
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    b_->all_to_all(send, send_counts, recv, recv_counts);
  }

 private:
  std::shared_ptr<group_backend> b_;
};

// Joins at its first call, so the members' joins meet from their own threads.
class device_member final : public tp_group {
 public:
  struct shared {  // the group's: once aborted, a member that has not joined never will
    std::mutex mu;
    std::string aborted;
  };
  device_member(std::shared_ptr<device_group_engine> e, std::function<std::string()> id, int rank, int size,
                int device, std::shared_ptr<shared> group)
      : engine_(std::move(e)), id_(std::move(id)), rank_(rank), size_(size), device_(device), group_(std::move(group)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, int64_t n) override { joined().all_reduce(data, n, reduce_op::sum); }
  void all_gather(float* data, int64_t n) override { joined().all_gather(data, n); }
  void reduce_scatter_sum(float* data, int64_t n) override { joined().reduce_scatter(data, n, reduce_op::sum); }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    joined().shift(send, n_send, recv, n_recv);
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    joined().all_to_all(send, send_counts, recv, recv_counts);
  }
  void abort(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(group_->mu);
      if (group_->aborted.empty()) group_->aborted = why;
    }
    engine_->abort(why);
  }

 private:
  group_backend& joined() {
    if (!backend_) {
      {
        std::lock_guard<std::mutex> lock(group_->mu);
        if (!group_->aborted.empty()) throw std::runtime_error("tensor-parallel group aborted: " + group_->aborted);
      }
      backend_ = engine_->join_in_stream(id_(), rank_, size_, device_);
    }
    return *backend_;
  }
  std::shared_ptr<device_group_engine> engine_;
  std::function<std::string()> id_;
  int rank_, size_, device_;
  std::shared_ptr<shared> group_;
  std::unique_ptr<group_backend> backend_;
};

}  // namespace

template <class F>
void logged_tp_group::logged(const char* op, int64_t n, F call) {
  const auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  const double started = now();
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seq = next_seq_++;
    calls_.push_back(tp_call{seq, op, n, started, 0, false});
    if (calls_.size() > keep_) calls_.pop_front();
  }
  auto finish = [&](bool failed) {
    const double t = now();
    std::lock_guard<std::mutex> lock(mu_);
    seconds_ += t - started;
    for (auto& c : calls_)
      if (c.seq == seq) c.finished_at = t, c.failed = failed;
  };
  try {
    call();
  } catch (...) {
    finish(true);
    throw;
  }
  finish(false);
}

void logged_tp_group::all_reduce_sum(float* data, int64_t n) {
  logged("all-reduce", n, [&] { inner_->all_reduce_sum(data, n); });
}
void logged_tp_group::all_gather(float* data, int64_t n) {
  logged("all-gather", n, [&] { inner_->all_gather(data, n); });
}
void logged_tp_group::reduce_scatter_sum(float* data, int64_t n) {
  logged("reduce-scatter", n, [&] { inner_->reduce_scatter_sum(data, n); });
}
void logged_tp_group::shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) {
  logged("shift", n_send, [&] { inner_->shift(send, n_send, recv, n_recv); });
}
void logged_tp_group::all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                                 const std::vector<int64_t>& recv_counts) {
  int64_t n = 0;
  for (int64_t c : send_counts) n += c;
  logged("all-to-all", n, [&] { inner_->all_to_all(send, send_counts, recv, recv_counts); });
}
double logged_tp_group::seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seconds_;
}
std::vector<tp_call> logged_tp_group::recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {calls_.begin(), calls_.end()};
}

std::vector<std::shared_ptr<tp_group>> make_local_tp_group(int size, local_tp_options opts) {
  if (size < 1) throw std::invalid_argument("make_local_tp_group: size " + std::to_string(size));
  auto s = std::make_shared<shared_state>(size, opts);
  std::vector<std::shared_ptr<tp_group>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_shared<local_member>(s, r));
  return out;
}

std::vector<std::shared_ptr<tp_group>> make_device_tp_group(const std::shared_ptr<device_group_engine>& engine,
                                                            const std::vector<int>& devices) {
  const std::string id = engine->make_id();
  auto group = std::make_shared<device_member::shared>();
  const int size = static_cast<int>(devices.size());
  std::vector<std::shared_ptr<tp_group>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_shared<device_member>(engine, [id] { return id; }, r, size,
                                                  devices[static_cast<size_t>(r)], group));
  return out;
}

std::shared_ptr<tp_group> spanning_device_tp_member(std::shared_ptr<device_group_engine> engine,
                                                    std::function<std::string()> id, int rank, int size, int device) {
  return std::make_shared<device_member>(std::move(engine), std::move(id), rank, size, device,
                                         std::make_shared<device_member::shared>());
}

void abort_local_tp_group(const std::shared_ptr<tp_group>& member, const std::string& why) {
  if (auto* l = dynamic_cast<logged_tp_group*>(member.get())) return abort_local_tp_group(l->inner(), why);
  if (auto* m = dynamic_cast<local_member*>(member.get())) m->state()->abort(why);
  if (auto* d = dynamic_cast<device_member*>(member.get())) d->abort(why);
}

std::shared_ptr<tp_group> backend_tp_group(std::shared_ptr<group_backend> backend) {
  return std::make_shared<backend_member>(std::move(backend));
}

}  // namespace troupe::net
