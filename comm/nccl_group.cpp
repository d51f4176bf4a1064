// nccl_group over NCCL (nccl_group.hpp).
#include "comm/nccl_group.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <stdexcept>

#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/completions.hpp"

namespace troupe::net {

namespace {

// A failed call names itself and NCCL's reason; the communicator's last error adds the detail
// NCCL logs only under NCCL_DEBUG (which rank, which device).
void check(ncclResult_t r, const char* call, ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string why = std::string("NCCL ") + call + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) why += std::string(" (") + last + ")";
  throw net_error(why);
}

void check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw net_error(std::string("CUDA ") + call + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

ncclRedOp_t nccl_op(reduce_op op) { return op == reduce_op::average ? ncclAvg : ncclSum; }

char* at(void* data, int64_t offset, dtype t) {
  return static_cast<char*>(data) + static_cast<size_t>(offset) * size_of(t);
}

// NCCL counts are size_t; a negative one is the caller's bug, not a huge transfer.
size_t count_of(int64_t n, const char* what) {
  if (n < 0) throw std::invalid_argument(std::string("nccl ") + what + ": negative count " + std::to_string(n));
  return static_cast<size_t>(n);
}

// Restores the calling thread's current device when a call that needs the group's is done: the
// thread may drive members on several devices.
class on_device {
 public:
  explicit on_device(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~on_device() { cudaSetDevice(previous_); }
  on_device(const on_device&) = delete;
  on_device& operator=(const on_device&) = delete;

 private:
  int previous_ = 0;
};

// ncclGroupStart/End around per-segment calls, ended even when one of them throws: an open group
// would swallow the next operation.
class nccl_call_group {
 public:
  explicit nccl_call_group(ncclComm_t comm) : comm_(comm) { check(ncclGroupStart(), "ncclGroupStart", comm_); }
  void end() {
    open_ = false;
    check(ncclGroupEnd(), "ncclGroupEnd", comm_);
  }
  ~nccl_call_group() {
    if (open_) ncclGroupEnd();
  }
  nccl_call_group(const nccl_call_group&) = delete;
  nccl_call_group& operator=(const nccl_call_group&) = delete;

 private:
  ncclComm_t comm_;
  bool open_ = true;
};

// Uneven ring segments, which NCCL's own reduce-scatter and all-gather cannot take: one call per
// segment rooted at its owner, call(segment's first element, count, owner), launched as one group.
template <class Call>
void per_segment(ncclComm_t comm, void* data, int64_t n, int world, dtype t, Call&& call) {
  nccl_call_group g(comm);
  for (int j = 0; j < world; ++j) {
    const ring::range seg = ring::segment(n, world, j);
    if (seg.count > 0) call(at(data, seg.offset, t), static_cast<size_t>(seg.count), j);
  }
  g.end();
}

}  // namespace

ncclDataType_t nccl_type(dtype t) {
  switch (t) {
    case dtype::f32: return ncclFloat32;
    case dtype::bf16: return ncclBfloat16;
    case dtype::f16: return ncclFloat16;
    case dtype::i32: return ncclInt32;
    case dtype::i64: return ncclInt64;
    case dtype::u8: return ncclUint8;
  }
  throw std::invalid_argument("nccl: no NCCL type for dtype byte " + std::to_string(static_cast<int>(t)));
}

nccl_id make_nccl_id() {
  ncclUniqueId raw;
  check(ncclGetUniqueId(&raw), "ncclGetUniqueId", nullptr);
  nccl_id id;
  static_assert(sizeof raw.internal == std::tuple_size<decltype(id.bytes)>::value);
  std::copy(std::begin(raw.internal), std::end(raw.internal), id.bytes.begin());
  return id;
}

std::string to_bytes(const nccl_id& id) { return std::string(id.bytes.begin(), id.bytes.end()); }

nccl_id nccl_id_from_bytes(const std::string& bytes) {
  nccl_id id;
  if (bytes.size() != id.bytes.size())
    throw net_error("an NCCL communicator id is " + std::to_string(id.bytes.size()) + " bytes, not " +
                    std::to_string(bytes.size()));
  std::copy(bytes.begin(), bytes.end(), id.bytes.begin());
  return id;
}

nccl_group::nccl_group(const nccl_id& id, int rank, int world, int device)
    : rank_(rank), world_(world), device_(device) {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("nccl_group: rank " + std::to_string(rank) + " of " + std::to_string(world));
  on_device here(device);
  ncclUniqueId raw;
  std::copy(id.bytes.begin(), id.bytes.end(), std::begin(raw.internal));
  check(ncclCommInitRank(&comm_, world, raw, rank), "ncclCommInitRank", nullptr);
}

nccl_group::~nccl_group() {
  // An aborted communicator is gone already. Destroy waits for its pending work.
  if (comm_ && !aborted_) ncclCommDestroy(comm_);
}

void nccl_group::live(const char* call) const {
  if (!aborted_) return;
  std::lock_guard<std::mutex> lock(why_mu_);
  throw net_error(std::string("NCCL ") + call + " on an aborted group: " + why_);
}

void nccl_group::all_reduce(void* data, int64_t n, dtype t, reduce_op op, cudaStream_t stream) {
  if (n == 0) return;
  live("all-reduce");
  on_device here(device_);
  check(ncclAllReduce(data, data, count_of(n, "all-reduce"), nccl_type(t), nccl_op(op), comm_, stream), "ncclAllReduce", comm_);
}

void nccl_group::reduce_scatter(void* data, int64_t n, dtype t, reduce_op op, cudaStream_t stream) {
  if (n == 0) return;
  live("reduce-scatter");
  on_device here(device_);
  const size_t total = count_of(n, "reduce-scatter");
  if (total % static_cast<size_t>(world_) == 0) {
    // Even segments: in place, NCCL's condition being that this rank's output is its segment.
    const size_t each = total / static_cast<size_t>(world_);
    check(ncclReduceScatter(data, at(data, rank_ * static_cast<int64_t>(each), t), each, nccl_type(t), nccl_op(op), comm_, stream),
          "ncclReduceScatter", comm_);
    return;
  }
  per_segment(comm_, data, n, world_, t, [&](char* p, size_t count, int owner) {
    check(ncclReduce(p, p, count, nccl_type(t), nccl_op(op), owner, comm_, stream), "ncclReduce", comm_);
  });
}

void nccl_group::all_gather(void* data, int64_t n, dtype t, cudaStream_t stream) {
  if (n == 0) return;
  live("all-gather");
  on_device here(device_);
  const size_t total = count_of(n, "all-gather");
  if (total % static_cast<size_t>(world_) == 0) {
    const size_t each = total / static_cast<size_t>(world_);
    check(ncclAllGather(at(data, rank_ * static_cast<int64_t>(each), t), data, each, nccl_type(t), comm_, stream),
          "ncclAllGather", comm_);
    return;
  }
  per_segment(comm_, data, n, world_, t, [&](char* p, size_t count, int owner) {
    check(ncclBroadcast(p, p, count, nccl_type(t), owner, comm_, stream), "ncclBroadcast", comm_);
  });
}

void nccl_group::broadcast(void* data, int64_t n, dtype t, int root, cudaStream_t stream) {
  if (n == 0) return;
  if (root < 0 || root >= world_) throw std::invalid_argument("nccl broadcast: root " + std::to_string(root) + " of " + std::to_string(world_));
  live("broadcast");
  on_device here(device_);
  check(ncclBroadcast(data, data, count_of(n, "broadcast"), nccl_type(t), root, comm_, stream), "ncclBroadcast", comm_);
}

void nccl_group::send(const void* data, int64_t n, dtype t, int peer, cudaStream_t stream) {
  if (peer < 0 || peer >= world_) throw std::invalid_argument("nccl send: peer " + std::to_string(peer) + " of " + std::to_string(world_));
  live("send");
  on_device here(device_);
  check(ncclSend(data, count_of(n, "send"), nccl_type(t), peer, comm_, stream), "ncclSend", comm_);
}

void nccl_group::recv(void* data, int64_t n, dtype t, int peer, cudaStream_t stream) {
  if (peer < 0 || peer >= world_) throw std::invalid_argument("nccl recv: peer " + std::to_string(peer) + " of " + std::to_string(world_));
  live("recv");
  on_device here(device_);
  check(ncclRecv(data, count_of(n, "recv"), nccl_type(t), peer, comm_, stream), "ncclRecv", comm_);
}

void nccl_group::shift(const void* send, int64_t n_send, void* recv, int64_t n_recv, dtype t, cudaStream_t stream) {
  live("shift");
  on_device here(device_);
  const int next = (rank_ + 1) % world_, prev = (rank_ + world_ - 1) % world_;
  nccl_call_group g(comm_);
  if (n_send > 0) check(ncclSend(send, count_of(n_send, "shift"), nccl_type(t), next, comm_, stream), "ncclSend", comm_);
  if (n_recv > 0) check(ncclRecv(recv, count_of(n_recv, "shift"), nccl_type(t), prev, comm_, stream), "ncclRecv", comm_);
  g.end();
}

void nccl_group::all_to_all(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                            const std::vector<int64_t>& recv_counts, dtype t, cudaStream_t stream) {
  live("all-to-all");
  on_device here(device_);
  nccl_call_group g(comm_);
  int64_t s_at = 0, r_at = 0;
  for (int j = 0; j < world_; ++j) {
    const int64_t ns = send_counts.at(static_cast<size_t>(j)), nr = recv_counts.at(static_cast<size_t>(j));
    if (ns > 0)
      check(ncclSend(at(const_cast<void*>(send), s_at, t), count_of(ns, "all-to-all"), nccl_type(t), j, comm_, stream),
            "ncclSend", comm_);
    if (nr > 0) check(ncclRecv(at(recv, r_at, t), count_of(nr, "all-to-all"), nccl_type(t), j, comm_, stream), "ncclRecv", comm_);
    s_at += ns;
    r_at += nr;
  }
  g.end();
}

void nccl_group::synchronize(cudaStream_t stream) {
  on_device here(device_);
  const cudaError_t e = cudaStreamSynchronize(stream);
  live("synchronize");  // woken by an abort: the communicator is gone
  ncclResult_t async = ncclSuccess;
  check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError", comm_);
  check(async, "(asynchronous error)", comm_);
  check(e, "cudaStreamSynchronize");
}

std::optional<std::string> nccl_group::aborted_why() const {
  std::lock_guard<std::mutex> lock(why_mu_);
  if (!aborted_) return std::nullopt;
  return why_;
}

void nccl_group::abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(why_mu_);
    if (aborted_) return;
    why_ = why;
    aborted_ = true;
  }
  if (comm_) ncclCommAbort(comm_);
}

namespace {

class nccl_member final : public group_backend {
 public:
  explicit nccl_member(std::shared_ptr<nccl_group> g) : g_(std::move(g)) {
    on_device here(g_->device());
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~nccl_member() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  nccl_member(const nccl_member&) = delete;
  nccl_member& operator=(const nccl_member&) = delete;
  int rank() const override { return g_->rank(); }
  int world() const override { return g_->world(); }
  void all_reduce(float* data, int64_t n, reduce_op op) override {
    g_->all_reduce(data, n, dtype::f32, op, stream_);
    g_->synchronize(stream_);
  }
  void reduce_scatter(float* data, int64_t n, reduce_op op) override {
    g_->reduce_scatter(data, n, dtype::f32, op, stream_);
    g_->synchronize(stream_);
  }
  void all_gather(float* data, int64_t n) override {
    g_->all_gather(data, n, dtype::f32, stream_);
    g_->synchronize(stream_);
  }
  void broadcast(float* data, int64_t n, int root) override {
    g_->broadcast(data, n, dtype::f32, root, stream_);
    g_->synchronize(stream_);
  }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    g_->shift(send, n_send, recv, n_recv, dtype::f32, stream_);
    g_->synchronize(stream_);
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    g_->all_to_all(send, send_counts, recv, recv_counts, dtype::f32, stream_);
    g_->synchronize(stream_);
  }

 private:
  std::shared_ptr<nccl_group> g_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<group_backend> nccl_backend(std::shared_ptr<nccl_group> group) {
  return std::make_unique<nccl_member>(std::move(group));
}

namespace {

// A member whose calls are enqueued on the caller's stream and return at once: the collective
// runs between the kernels launched there before and after it.
class nccl_stream_member final : public group_backend {
 public:
  nccl_stream_member(std::shared_ptr<nccl_group> g, std::function<cudaStream_t()> stream)
      : g_(std::move(g)), stream_(std::move(stream)) {}
  int rank() const override { return g_->rank(); }
  int world() const override { return g_->world(); }
  void all_reduce(float* data, int64_t n, reduce_op op) override {
    g_->all_reduce(data, n, dtype::f32, op, stream_());
  }
  void reduce_scatter(float* data, int64_t n, reduce_op op) override {
    g_->reduce_scatter(data, n, dtype::f32, op, stream_());
  }
  void all_gather(float* data, int64_t n) override { g_->all_gather(data, n, dtype::f32, stream_()); }
  void broadcast(float* data, int64_t n, int root) override {
    g_->broadcast(data, n, dtype::f32, root, stream_());
  }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    g_->shift(send, n_send, recv, n_recv, dtype::f32, stream_());
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    g_->all_to_all(send, send_counts, recv, recv_counts, dtype::f32, stream_());
  }

 private:
  std::shared_ptr<nccl_group> g_;
  std::function<cudaStream_t()> stream_;
};

}  // namespace

namespace {

// One direction of a pipeline pair: member 0 sends, member 1 receives, on the link's own stream,
// so a transfer waits for nothing but its peer. Completion is a host function on that stream;
// an abort lets the stream run on, so the function checks the group and reports it.
class nccl_link final : public device_link {
 public:
  nccl_link(std::shared_ptr<nccl_group> g, bool sender) : g_(std::move(g)), peer_(sender ? 1 : 0) {
    on_device here(g_->device());
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~nccl_link() override {
    if (stream_) cudaStreamDestroy(stream_);  // returns at once; what is pending still completes
  }
  nccl_link(const nccl_link&) = delete;
  nccl_link& operator=(const nccl_link&) = delete;
  void send(const void* data, size_t bytes, done_fn done) override {
    g_->send(data, static_cast<int64_t>(bytes), dtype::u8, peer_, stream_);
    when_done(std::move(done));
  }
  void recv(void* data, size_t bytes, done_fn done) override {
    g_->recv(data, static_cast<int64_t>(bytes), dtype::u8, peer_, stream_);
    when_done(std::move(done));
  }

 private:
  // On the completion thread, not the driver's: the group handle may be the last one, and its
  // destructor calls ncclCommDestroy, which a host function must not.
  void when_done(done_fn done) {
    on_device here(g_->device());
    try {
      cuda::after(stream_, "a pipeline transfer over NCCL on cuda:" + std::to_string(g_->device()),
                  [done, g = g_] { done(g->aborted_why()); },
                  [done](const std::string& why) { done(why); });
    } catch (const cuda::error& e) {
      throw net_error(e.what());
    }
  }

  std::shared_ptr<nccl_group> g_;
  int peer_;
  cudaStream_t stream_ = nullptr;
};

class nccl_engine_impl final : public device_group_engine {
 public:
  explicit nccl_engine_impl(std::function<cudaStream_t()> caller_stream) : caller_stream_(std::move(caller_stream)) {}
  void abort(const std::string& why) override {
    std::vector<std::weak_ptr<nccl_group>> made;
    {
      std::lock_guard<std::mutex> lock(mu_);
      made.swap(made_);
    }
    for (const auto& g : made)
      if (auto live = g.lock()) live->abort(why);
  }
  std::string name() const override { return "nccl"; }
  // NCCL since 2.5 refuses a second rank on a device ("Duplicate GPU detected").
  std::string refuses(const std::vector<int>& devices) const override {
    for (size_t i = 0; i < devices.size(); ++i)
      for (size_t j = i + 1; j < devices.size(); ++j)
        if (devices[i] == devices[j])
          return "NCCL takes one member per GPU: cuda:" + std::to_string(devices[i]) + " holds members " +
                 std::to_string(i) + " and " + std::to_string(j);
    return {};
  }
  bool one_group_per_device() const override { return true; }
  bool spans_processes() const override { return true; }
  std::string make_id() override { return to_bytes(make_nccl_id()); }
  std::unique_ptr<group_backend> join(const std::string& id, int rank, int world, int device) override {
    return nccl_backend(made(id, rank, world, device));
  }
  std::unique_ptr<group_backend> join_in_stream(const std::string& id, int rank, int world, int device) override {
    if (!caller_stream_)
      throw std::logic_error("nccl engine: made without a way to find the caller's stream (nccl_engine's argument)");
    return std::make_unique<nccl_stream_member>(made(id, rank, world, device), caller_stream_);
  }
  std::unique_ptr<device_link> join_link(const std::string& id, bool sender, int device) override {
    return std::make_unique<nccl_link>(made(id, sender ? 0 : 1, 2, device), sender);
  }

 private:
  std::shared_ptr<nccl_group> made(const std::string& id, int rank, int world, int device) {
    auto g = std::make_shared<nccl_group>(nccl_id_from_bytes(id), rank, world, device);
    std::lock_guard<std::mutex> lock(mu_);
    made_.erase(std::remove_if(made_.begin(), made_.end(), [](const auto& w) { return w.expired(); }), made_.end());
    made_.push_back(g);
    return g;
  }

  std::function<cudaStream_t()> caller_stream_;
  std::mutex mu_;
  std::vector<std::weak_ptr<nccl_group>> made_;  // joined since the last abort
};

}  // namespace

std::shared_ptr<device_group_engine> nccl_engine(std::function<cudaStream_t()> caller_stream) {
  return std::make_shared<nccl_engine_impl>(std::move(caller_stream));
}

}  // namespace troupe::net
