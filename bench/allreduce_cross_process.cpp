// Cross-process all-reduce bus bandwidth on one machine: troupe's TCP ring (comm/tcp_ring) or
// Gloo's ring over its TCP transport, WORLD processes forked by this program, float sums of 1,
// 16 and 64 MiB by default. Rank 0 prints one line per size. Bus bandwidth is NCCL's
// definition, bytes × 2(N−1)/N / time. It deliberately does not run Open MPI: mpirun starts
// that one (allreduce_mpi.cpp), and bench/cross_process_allreduce.sh runs all side by side.
//
// usage: allreduce_cross_process troupe|gloo WORLD [MiB ...]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/tcp_ring.hpp"
#include "bench/gloo_peer.hpp"


namespace {

using clock_type = std::chrono::steady_clock;

int iterations(double mib) { return mib <= 1 ? 30 : mib <= 16 ? 8 : 4; }

// Runs `allreduce` on every size and prints rank 0's figures. `allreduce(p, n)` sums in place.
template <class F>
void measure(const char* backend, int rank, int world, const std::vector<double>& sizes, F&& allreduce) {
  for (double mib : sizes) {
    const auto n = static_cast<int64_t>(mib * (1 << 20) / 4);
    std::vector<float> x(static_cast<size_t>(n), 1.0f);
    float token = 1.0f;
    allreduce(x.data(), n);  // warm-up: connections, page faults
    allreduce(&token, 1);    // a barrier, so every rank starts timing together
    const int iters = iterations(mib);
    const auto t0 = clock_type::now();
    for (int i = 0; i < iters; ++i) allreduce(x.data(), n);
    const double s = std::chrono::duration<double>(clock_type::now() - t0).count() / iters;
    const double bus = static_cast<double>(n) * 4 * 2 * (world - 1) / world / s / 1e9;
    if (rank == 0)
      std::printf("%-10s %d %6.0f MiB %9.2f ms %7.2f GB/s\n", backend, world, mib, s * 1e3, bus);
    std::fflush(stdout);
  }
}

int run_troupe(int rank, int world, uint16_t port, int port_pipe, const std::vector<double>& sizes) {
  troupe::launch_env env;
  env.rank = rank;
  env.world_size = world;
  env.master_port = port;
  troupe::net::ring_options o;
  if (const char* c = std::getenv("TROUPE_RING_CHUNK_BYTES")) o.chunk_bytes = std::strtoul(c, nullptr, 10);
  if (const char* b = std::getenv("TROUPE_RING_SOCKET_BUFFER")) o.socket_buffer_bytes = std::atoi(b);
  o.on_master_listening = [&](uint16_t p) {
    if (write(port_pipe, &p, sizeof p) != sizeof p) std::exit(2);
  };
  auto ring = troupe::net::tcp_ring::connect(env, "bench-secret", o);
  measure("troupe", rank, world, sizes,
          [&](float* p, int64_t n) { ring->all_reduce(p, n, troupe::net::reduce_op::sum); });
  return 0;
}

int run_gloo(int rank, int world, const std::string& dir, const std::vector<double>& sizes) {
  auto ring = troupe::bench::connect_gloo_ring(rank, world, dir);
  measure("gloo", rank, world, sizes, [&](float* p, int64_t n) { ring->all_reduce_sum(p, static_cast<size_t>(n)); });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s troupe|gloo WORLD [MiB ...]\n", argv[0]);
    return 2;
  }
  const std::string backend = argv[1];
  const int world = std::atoi(argv[2]);
  std::vector<double> sizes;
  for (int i = 3; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {1, 16, 64};
  if (backend == "gloo" && !troupe::bench::gloo_built()) {
    std::fprintf(stderr, "built without Gloo (install libgloo-dev and reconfigure)\n");
    return 77;
  }
  char tmpl[] = "/tmp/troupe-gloo-XXXXXX";
  const std::string dir = backend == "gloo" ? mkdtemp(tmpl) : "";
  int port_pipe[2];
  if (pipe(port_pipe) != 0) return 2;
  uint16_t port = 0;
  std::vector<pid_t> kids;
  // Fork every rank before any thread exists; rank 0 first, to learn the port it bound.
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 2;
      try {
        if (backend == "gloo") rc = run_gloo(r, world, dir, sizes);
        if (backend == "troupe") rc = run_troupe(r, world, port, port_pipe[1], sizes);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::_Exit(rc);
    }
    kids.push_back(pid);
    if (r == 0 && backend == "troupe" && read(port_pipe[0], &port, sizeof port) != sizeof port) return 2;
  }
  int status_all = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) status_all = 1;
  }
  if (!dir.empty() && std::system(("rm -rf " + dir).c_str()) != 0) status_all = 1;
  return status_all;
}
