// All-reduce through each of troupe's collective back ends as a stage drives it (a bucket handed
// over in a collective_request to the net_collective actor, answered with the sum) beside the engine called
// directly, in one run: Open MPI's MPI_Allreduce, Gloo's ring all-reduce (its own context over a
// file store) and troupe's TCP ring called from the main thread. Rounds of a back end and its raw
// engine alternate (after a barrier each); medians; bus bandwidth as NCCL defines it (2 (N-1)/N
// bytes per byte). Started by mpirun, which also carries each rendezvous's address; rank 0 prints
// one line per back end and size. A back end this build lacks (Gloo) is reported as not built.
//
// usage: mpirun -np N backend_bench [MiB ...]   (default 1 16 64)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "actors/run/runtime_config.hpp"
#include "actors/messages.hpp"
#include "actors/process/net_actors.hpp"
#include "bench/gloo_peer.hpp"
#include "comm/gloo_group.hpp"
#include "comm/kv_store.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/ring_schedule.hpp"
#include "comm/tcp_ring.hpp"

namespace {

using namespace troupe;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int rank_of() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_of() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

// Rank 0's value of `v`, on every rank.
template <typename T>
T from_rank_0(T v) {
  MPI_Bcast(&v, sizeof v, MPI_BYTE, 0, MPI_COMM_WORLD);
  return v;
}

std::string text_from_rank_0(std::string s) {
  int n = static_cast<int>(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  s.resize(static_cast<size_t>(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return s;
}

// troupe's TCP ring over every rank: rank 0 listens on any port and tells the others over MPI.
std::shared_ptr<net::group_backend> tcp_member() {
  const int rank = rank_of(), world = world_of();
  launch_env env{rank, world, "127.0.0.1", 0, "bench"};
  if (rank != 0) {
    env.master_port = from_rank_0<uint16_t>(0);
    return net::tcp_ring::connect(env, "bench-secret");
  }
  std::promise<uint16_t> port;
  net::ring_options o;
  o.on_master_listening = [&](uint16_t p) { port.set_value(p); };
  auto ring = std::async(std::launch::async, [&] { return net::tcp_ring::connect(env, "bench-secret", o); });
  from_rank_0(port.get_future().get());
  return ring.get();
}

// troupe's Gloo back end over every rank: rank 0 serves the kv store.
std::shared_ptr<net::group_backend> gloo_member() {
  const int rank = rank_of(), world = world_of();
  std::shared_ptr<net::kv_store> store;
  uint16_t port = 0;
  if (rank == 0) {
    auto server = std::make_shared<net::kv_server>("127.0.0.1", 0, "bench-secret");
    port = server->port();
    store = server;
  }
  port = from_rank_0(port);
  if (rank != 0) store = net::kv_connect("127.0.0.1", port, "bench-secret", static_cast<uint32_t>(rank), 30000);
  return net::connect_gloo_member(rank, world, store, net::gloo_options{"127.0.0.1", 60000, "bench-secret"});
}

struct row {
  const char* backend;
  const char* raw_name;
  std::function<void(float*, int64_t)> raw;  // the engine called directly, in place
  std::shared_ptr<net::group_backend> member;
};

void measure(caf::actor_system& sys, const row& b, const std::vector<double>& sizes) {
  const int rank = rank_of(), world = world_of();
  net_collective_args a;
  a.make_backend = [m = b.member] { return m; };
  caf::actor collective = spawn_net_collective(sys, std::move(a));
  caf::scoped_actor self{sys};
  int64_t seq = 0;
  for (double mib : sizes) {
    const int64_t n = static_cast<int64_t>(mib * (1 << 20) / 4);
    std::vector<float> x(static_cast<size_t>(n), 1.0f);
    // As a stage does, each bucket is a tensor of its own handed over to the collective; it is
    // made (and its pages touched) before the clock starts, as the raw engine's buffer is.
    auto bucket = [&] {
      tensor t({n}, std::vector<float>(x));
      t.freeze();
      return t;
    };
    tensor answer;  // let go of after the clock stops, as a stage copies the sum out and lets go later
    auto through_actor = [&](tensor t) {
      self->request(collective, caf::infinite,
                    collective_request{seq++, static_cast<int32_t>(ring::op_kind::all_reduce_sum), 0, n, std::move(t)})
          .receive([&](collective_result& r) { answer = std::move(r.data); }, [](caf::error&) { std::abort(); });
    };
    b.raw(x.data(), n);  // warm-up both paths
    through_actor(bucket());
    const int rounds = mib <= 1 ? 60 : mib <= 16 ? 20 : 10;
    std::vector<double> raw_s, actor_s;
    for (int r = 0; r < rounds; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      b.raw(x.data(), n);
      raw_s.push_back(MPI_Wtime() - t0);
      tensor t = bucket();
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = MPI_Wtime();
      through_actor(std::move(t));
      actor_s.push_back(MPI_Wtime() - t0);
      answer = tensor();
    }
    const double a_med = median(actor_s), r_med = median(raw_s);
    const double bytes = static_cast<double>(n) * 4 * 2 * (world - 1) / world;
    if (rank == 0)
      std::printf("%-5s %-14s %5d %5.0f %7d %10.3f %10.3f %9.2f %9.2f %8.3f\n", b.backend, b.raw_name, world, mib,
                  rounds, r_med * 1e3, a_med * 1e3, bytes / r_med / 1e9, bytes / a_med / 1e9, a_med / r_med);
    std::fflush(stdout);
  }
  caf::anon_send_exit(collective, caf::exit_reason::user_shutdown);
  self->wait_for(collective);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int rank = rank_of(), world = world_of();
  std::vector<double> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {1, 16, 64};
  {
    net::mpi_groups groups({rank});  // one group: every process, as a data-parallel group of the mesh
    caf::actor_system_config cfg;
    configure_runtime(cfg);
    caf::actor_system sys{cfg};
    if (rank == 0)
      std::printf("%-5s %-14s %5s %5s %7s %10s %10s %9s %9s %8s\n", "back", "raw engine", "ranks", "MiB", "rounds",
                  "raw ms", "troupe ms", "raw GB/s", "trp GB/s", "trp/raw");
    std::vector<row> rows;
    rows.push_back({"mpi", "MPI_Allreduce",
                    [](float* d, int64_t n) {
                      MPI_Allreduce(MPI_IN_PLACE, d, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                    },
                    groups.take(0)});
    if (net::backend_built(net::backend_kind::gloo) && bench::gloo_built()) {
      std::string dir;
      if (rank == 0) {
        char tmpl[] = "/tmp/backend_bench.XXXXXX";
        dir = mkdtemp(tmpl);
      }
      dir = text_from_rank_0(dir);
      std::shared_ptr<bench::gloo_ring> raw = bench::connect_gloo_ring(rank, world, dir);
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) std::filesystem::remove_all(dir);
      rows.push_back({"gloo", "Gloo ring", [raw](float* d, int64_t n) { raw->all_reduce_sum(d, static_cast<size_t>(n)); },
                      gloo_member()});
    } else if (rank == 0) {
      std::printf("gloo  not built: this troupe has no Gloo (install libgloo-dev and reconfigure)\n");
    }
    std::shared_ptr<net::group_backend> ring = tcp_member();
    rows.push_back({"tcp", "tcp_ring",
                    [ring](float* d, int64_t n) { ring->all_reduce(d, n, net::reduce_op::sum); }, ring});
    for (const row& b : rows) measure(sys, b, sizes);
  }
  MPI_Finalize();
  return 0;
}
