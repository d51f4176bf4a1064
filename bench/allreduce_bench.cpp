// All-reduce bus bandwidth in one run: troupe's collective actor group (N ranks in this process,
// tensors by reference), Gloo's ring all-reduce over loopback TCP (N forked processes, same sizes)
// and the single-core memory-copy limit, all measured by this program. Bus bandwidth is NCCL's
// definition, bytes × 2(N−1)/N / time; memcpy is bytes copied / time on one thread. Medians.
// It does not measure cross-process troupe (see allreduce_cross_process.cpp).
//
// usage: allreduce_bench   (prints one markdown table; env TROUPE_CHUNK_KB sets the chunk size,
// TROUPE_BENCH_NO_GLOO=1 skips Gloo, e.g. under perf)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "actors/collective/collective.hpp"
#include "actors/messages.hpp"
#include "bench/gloo_peer.hpp"


namespace {

using clock_type = std::chrono::steady_clock;
const int kRanks[] = {2, 4};
const int kMiB[] = {1, 16, 64};

int iterations(int mib) { return mib <= 1 ? 200 : mib <= 16 ? 50 : 20; }  // short runs are noisy here
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }
double bus_gbps(int64_t bytes, int ranks, double s) { return static_cast<double>(bytes) * 2 * (ranks - 1) / ranks / s / 1e9; }

double memcpy_gbps(int mib) {
  const size_t bytes = static_cast<size_t>(mib) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> t;
  for (int i = 0; i < iterations(mib); ++i) {
    const auto t0 = clock_type::now();
    std::memcpy(b.data(), a.data(), bytes);
    t.push_back(seconds_since(t0));
    a[static_cast<size_t>(i) % bytes] = b[bytes - 1];  // keep the copy observable
  }
  return static_cast<double>(bytes) / median(t) / 1e9;
}

// One forked rank: connect, warm up, time every size; rank 0 writes the medians to `out`.
void gloo_rank(int rank, int ranks, const std::string& dir, int out) {
  auto ring = troupe::bench::connect_gloo_ring(rank, ranks, dir);
  for (int mib : kMiB) {
    std::vector<float> x((static_cast<size_t>(mib) << 20) / 4, 1.0f);
    std::vector<double> t;
    for (int i = -1; i < iterations(mib); ++i) {
      const auto t0 = clock_type::now();
      ring->all_reduce_sum(x.data(), x.size());
      if (i >= 0) t.push_back(seconds_since(t0));
    }
    const double s = median(t);
    if (rank == 0 && write(out, &s, sizeof s) != sizeof s) std::_Exit(3);
  }
}

// Seconds per size for Gloo with `ranks` forked processes; empty when Gloo is not measured.
std::vector<double> gloo_seconds(int ranks) {
  if (!troupe::bench::gloo_built() || std::getenv("TROUPE_BENCH_NO_GLOO")) return {};
  char tmpl[] = "/tmp/troupe-gloo-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  int fds[2];
  if (pipe(fds) != 0) return {};
  std::vector<pid_t> kids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      gloo_rank(r, ranks, dir, fds[1]);
      std::_Exit(0);
    }
    kids.push_back(pid);
  }
  close(fds[1]);
  std::vector<double> out(std::size(kMiB), 0.0);
  for (double& s : out)
    if (read(fds[0], &s, sizeof s) != sizeof s) s = 0;
  close(fds[0]);
  for (pid_t p : kids) waitpid(p, nullptr, 0);
  return out;
}

std::vector<double> troupe_seconds(caf::actor_system& sys, int ranks) {
  auto group = troupe::spawn_collective_group(sys, ranks, troupe::collective_options_from_env());
  std::vector<double> out;
  int64_t seq = 0;
  for (int mib : kMiB) {
    const int64_t n = (int64_t{mib} << 20) / 4;
    std::vector<troupe::tensor> in;
    for (int r = 0; r < ranks; ++r) in.emplace_back(troupe::shape_t{n}, std::vector<float>(static_cast<size_t>(n), 1.0f));
    std::vector<double> t;
    for (int i = -1; i < iterations(mib); ++i) {
      const auto t0 = clock_type::now();
      auto res = troupe::run_collective(sys, group, seq++, troupe::ring::op_kind::all_reduce_sum, in, n);
      if (i >= 0) t.push_back(seconds_since(t0));
      if (res[0][n - 1] != static_cast<float>(ranks)) std::fprintf(stderr, "wrong sum!\n");
    }
    out.push_back(median(t));
  }
  for (auto& a : group) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return out;
}

}  // namespace

int main() {
  // Gloo first: fork before any CAF thread exists.
  std::vector<std::vector<double>> gloo;
  for (int ranks : kRanks) gloo.push_back(gloo_seconds(ranks));
  if (gloo.front().empty()) std::fprintf(stderr, "Gloo is not measured (not built, or TROUPE_BENCH_NO_GLOO set)\n");
  std::vector<double> copy;
  for (int mib : kMiB) copy.push_back(memcpy_gbps(mib));
  caf::actor_system_config cfg;
  troupe::add_message_types(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  std::printf("| N | size | troupe in-process (GB/s) | Gloo TCP loopback (GB/s) | troupe / Gloo | memcpy 1 core (GB/s) | troupe / memcpy |\n");
  std::printf("|---|-----:|------:|------:|------:|------:|------:|\n");
  for (size_t k = 0; k < std::size(kRanks); ++k) {
    const int ranks = kRanks[k];
    auto ours = troupe_seconds(sys, ranks);
    for (size_t i = 0; i < std::size(kMiB); ++i) {
      const int64_t bytes = int64_t{kMiB[i]} << 20;
      const double t = bus_gbps(bytes, ranks, ours[i]);
      if (gloo[k].empty() || gloo[k][i] <= 0) {
        std::printf("| %d | %d MiB | %.2f | not measured | - | %.2f | %.2f |\n", ranks, kMiB[i], t, copy[i], t / copy[i]);
        continue;
      }
      const double g = bus_gbps(bytes, ranks, gloo[k][i]);
      std::printf("| %d | %d MiB | %.2f | %.2f | %.2f | %.2f | %.2f |\n", ranks, kMiB[i], t, g, t / g, copy[i], t / copy[i]);
    }
  }
  return 0;
}
