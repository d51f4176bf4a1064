// One rank of a multi-process tcp_ring test, started by tcp_ring.test.cpp (fork/exec): joins the
// ring, runs every collective on sizes around the chunk and segment boundaries, and compares each
// result bitwise with ring::serial_ring (the reduction order evaluated in one thread, which the
// in-process group is held to as well) on the same deterministic inputs, so every rank also
// agrees with every other. Exit 0: all equal; 1: a mismatch; 2: an
// error (message on stderr). It deliberately has no gtest: it is a process, not a test.
//
// usage: tcp_ring_helper RANK WORLD MASTER_ADDR MASTER_PORT SECRET [CHUNK_BYTES]
//   rank 0 with MASTER_PORT 0 binds any port and prints "PORT <n>" on stdout first.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/tcp_ring.hpp"

using troupe::net::reduce_op;
namespace ring = troupe::ring;

namespace {

float input(int rank, int64_t i) {
  // Values of mixed magnitude, so that a different summation order changes low bits.
  const int64_t h = (i * 7919 + rank * 104729) % 2003;
  return static_cast<float>(h) / 7.0f - 140.0f + static_cast<float>(rank) * 1e-3f + (i % 5 == 0 ? 3e4f : 0.0f);
}

std::vector<float> inputs_of(int rank, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = input(rank, i);
  return x;
}

std::vector<float> serial_reduce(int N, int64_t n, bool average) {
  std::vector<std::vector<float>> x;
  for (int r = 0; r < N; ++r) x.push_back(inputs_of(r, n));
  return ring::serial_ring(average ? ring::op_kind::all_reduce_average : ring::op_kind::all_reduce_sum, x, n)[0];
}

int failures = 0;
void expect_equal(const char* what, int64_t n, const float* got, const float* want, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      std::fprintf(stderr, "%s n=%lld: element %lld is %.9g, expected %.9g\n", what, static_cast<long long>(n),
                   static_cast<long long>(i), static_cast<double>(got[i]), static_cast<double>(want[i]));
      ++failures;
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s RANK WORLD MASTER_ADDR MASTER_PORT SECRET [CHUNK_BYTES]\n", argv[0]);
    return 2;
  }
  troupe::launch_env env;
  env.rank = std::stoi(argv[1]);
  env.world_size = std::stoi(argv[2]);
  env.master_addr = argv[3];
  env.master_port = static_cast<uint16_t>(std::stoi(argv[4]));
  env.source = "flags";
  troupe::net::ring_options opts;
  if (argc > 6) opts.chunk_bytes = std::stoul(argv[6]);
  opts.io_timeout_ms = 20000;
  opts.rendezvous.timeout_ms = 20000;
  opts.on_master_listening = [](uint16_t port) {
    std::printf("PORT %u\n", port);
    std::fflush(stdout);
  };
  try {
    auto tcp = troupe::net::tcp_ring::connect(env, argv[5], opts);
    const int N = env.world_size, r = env.rank;
    // 0 and sizes below N leave segments empty; 1001 and 4099 are not divisible by 2, 3 or 4;
    // 70001 floats span many 4 KiB chunks per segment.
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{4099}, int64_t{70001}}) {
      for (bool average : {false, true}) {
        const auto want = serial_reduce(N, n, average);
        auto x = inputs_of(r, n);
        tcp->all_reduce(x.data(), n, average ? reduce_op::average : reduce_op::sum);
        expect_equal(average ? "all_reduce average" : "all_reduce sum", n, x.data(), want.data(), n);
        auto y = inputs_of(r, n);
        tcp->reduce_scatter(y.data(), n, average ? reduce_op::average : reduce_op::sum);
        const auto seg = ring::segment(n, N, r);
        expect_equal("reduce_scatter", n, y.data() + seg.offset, want.data() + seg.offset, seg.count);
      }
      // all_gather: each rank contributes its own segment of its inputs.
      std::vector<float> g(static_cast<size_t>(n), -1.0f), full(static_cast<size_t>(n));
      for (int j = 0; j < N; ++j) {
        const auto seg = ring::segment(n, N, j);
        const auto xj = inputs_of(j, n);
        std::memcpy(full.data() + seg.offset, xj.data() + seg.offset, static_cast<size_t>(seg.count) * 4);
        if (j == r) std::memcpy(g.data() + seg.offset, xj.data() + seg.offset, static_cast<size_t>(seg.count) * 4);
      }
      tcp->all_gather(g.data(), n);
      expect_equal("all_gather", n, g.data(), full.data(), n);
      const int root = N - 1;
      auto b = r == root ? inputs_of(root, n) : std::vector<float>(static_cast<size_t>(n), 0.0f);
      tcp->broadcast(b.data(), n, root);
      expect_equal("broadcast", n, b.data(), inputs_of(root, n).data(), n);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank, e.what());
    return 2;
  }
  return failures == 0 ? 0 : 1;
}
