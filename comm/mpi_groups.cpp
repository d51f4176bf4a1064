// mpi_groups over Open MPI (mpi_groups.hpp). Errors come back as net_error (MPI_ERRORS_RETURN on
// every communicator), never as MPI's default abort of the whole job.
#include "comm/mpi_groups.hpp"

// The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {

bool mpi_built() { return true; }

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw net_error(std::string("MPI ") + what + ": " + std::string(text, static_cast<size_t>(len)));
}

void finalize_at_exit() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

void init_once() {
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready) return;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "init");
  std::atexit(finalize_at_exit);
  if (provided < MPI_THREAD_MULTIPLE)
    throw net_error("MPI provides thread level " + std::to_string(provided) +
                    ", troupe needs MPI_THREAD_MULTIPLE (each group's collectives run on their own thread)");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

int count_of(int64_t n) {
  if (n > INT_MAX) throw net_error("MPI: " + std::to_string(n) + " elements exceed an int count");
  return static_cast<int>(n);
}

constexpr int shift_tag = 7;  // a ring step's messages, apart from anything else on the communicator

class mpi_member final : public group_backend {
 public:
  explicit mpi_member(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &world_);
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void all_reduce(float* data, int64_t n, reduce_op op) override {
    check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(n), MPI_FLOAT, MPI_SUM, comm_), "all-reduce");
    if (op == reduce_op::average) ring::scale(data, n, 1.0f / static_cast<float>(world_));
  }
  void reduce_scatter(float* data, int64_t n, reduce_op op) override {
    std::vector<int> counts = segment_counts(n);
    check(MPI_Reduce_scatter(MPI_IN_PLACE, data, counts.data(), MPI_FLOAT, MPI_SUM, comm_), "reduce-scatter");
    // MPI leaves this rank's part at the front; troupe's layout keeps it at its ring segment.
    const ring::range seg = ring::segment(n, world_, rank_);
    std::memmove(data + seg.offset, data, static_cast<size_t>(seg.count) * sizeof(float));
    if (op == reduce_op::average) ring::scale(data + seg.offset, seg.count, 1.0f / static_cast<float>(world_));
  }
  void all_gather(float* data, int64_t n) override {
    std::vector<int> counts = segment_counts(n), displs(counts.size());
    for (int j = 0; j < world_; ++j) displs[static_cast<size_t>(j)] = count_of(ring::segment(n, world_, j).offset);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), MPI_FLOAT, comm_),
          "all-gather");
  }
  void broadcast(float* data, int64_t n, int root) override {
    check(MPI_Bcast(data, count_of(n), MPI_FLOAT, root, comm_), "broadcast");
  }
  void all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                  const std::vector<int64_t>& recv_counts) override {
    std::vector<int> sc, sd, rc, rd;
    int64_t s_at = 0, r_at = 0;
    for (int j = 0; j < world_; ++j) {
      sc.push_back(count_of(send_counts.at(static_cast<size_t>(j))));
      sd.push_back(count_of(s_at));
      rc.push_back(count_of(recv_counts.at(static_cast<size_t>(j))));
      rd.push_back(count_of(r_at));
      s_at += send_counts[static_cast<size_t>(j)];
      r_at += recv_counts[static_cast<size_t>(j)];
    }
    check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, comm_), "all-to-all");
  }
  void shift(const float* send, int64_t n_send, float* recv, int64_t n_recv) override {
    const int next = ring::right_of(rank_, world_), prev = ring::left_of(rank_, world_);
    MPI_Status status;
    check(MPI_Sendrecv(send, count_of(n_send), MPI_FLOAT, next, shift_tag, recv, count_of(n_recv), MPI_FLOAT, prev,
                       shift_tag, comm_, &status),
          "shift");
    int got = 0;
    MPI_Get_count(&status, MPI_FLOAT, &got);
    if (got != n_recv)
      throw net_error("MPI shift: rank " + std::to_string(rank_) + " expected " + std::to_string(n_recv) +
                      " floats from rank " + std::to_string(prev) + ", which sent " + std::to_string(got));
  }

 private:
  std::vector<int> segment_counts(int64_t n) const {
    std::vector<int> c(static_cast<size_t>(world_));
    for (int j = 0; j < world_; ++j) c[static_cast<size_t>(j)] = count_of(ring::segment(n, world_, j).count);
    return c;
  }
  MPI_Comm comm_;
  int rank_ = 0, world_ = 1;
};

}  // namespace

struct mpi_groups::impl {
  std::map<int, MPI_Comm> comms;  // group -> its communicator (groups this process is in)
  std::map<int, bool> taken;
  int rank = 0, size = 1;
};

mpi_groups::mpi_groups(const std::vector<int>& member_of) : impl_(std::make_unique<impl>()) {
  init_once();
  MPI_Comm_rank(MPI_COMM_WORLD, &impl_->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &impl_->size);
  for (size_t g = 0; g < member_of.size(); ++g) {
    MPI_Comm comm = MPI_COMM_NULL;
    const int m = member_of[g];
    check(MPI_Comm_split(MPI_COMM_WORLD, m >= 0 ? 0 : MPI_UNDEFINED, m >= 0 ? m : 0, &comm), "communicator split");
    if (comm != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      impl_->comms[static_cast<int>(g)] = comm;
    }
  }
}

mpi_groups::~mpi_groups() {
  for (auto& [g, comm] : impl_->comms) MPI_Comm_free(&comm);
}

int mpi_groups::world_rank() const { return impl_->rank; }

std::string mpi_groups::broadcast_text(const std::string& text, int root) {
  int n = impl_->rank == root ? count_of(static_cast<int64_t>(text.size())) : 0;
  check(MPI_Bcast(&n, 1, MPI_INT, root, MPI_COMM_WORLD), "broadcast");
  std::string out = impl_->rank == root ? text : std::string(static_cast<size_t>(n), '\0');
  check(MPI_Bcast(out.data(), n, MPI_CHAR, root, MPI_COMM_WORLD), "broadcast");
  return out;
}
int mpi_groups::world_size() const { return impl_->size; }

std::unique_ptr<group_backend> mpi_groups::take(int group) {
  auto it = impl_->comms.find(group);
  if (it == impl_->comms.end()) throw std::logic_error("mpi_groups: this process is not in group " + std::to_string(group));
  if (impl_->taken[group]) throw std::logic_error("mpi_groups: group " + std::to_string(group) + " taken twice");
  impl_->taken[group] = true;
  return std::make_unique<mpi_member>(it->second);
}

}  // namespace troupe::net
