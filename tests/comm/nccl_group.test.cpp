// nccl_group (comm/nccl_group.hpp) on real GPUs: every collective and point-to-point call against
// the sums the CPU computes, in fp32 and bf16, with even and uneven ring segments, one member per
// device (one thread each). Without a CUDA device the binary exits 77 (skipped); the cases that
// need two or more devices skip themselves on a one-GPU machine, saying so, since NCCL takes one
// rank per device.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_group.hpp"
#include "comm/ring_schedule.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {
namespace {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

// Device copy of a host vector, in f32 or bf16, and back as floats.
struct device_buffer {
  void* p = nullptr;
  int64_t n = 0;
  dtype t = dtype::f32;
  device_buffer(const std::vector<float>& host, dtype type) : n(static_cast<int64_t>(host.size())), t(type) {
    cudaMalloc(&p, host.size() * size_of(t) + 1);
    if (t == dtype::f32) {
      cudaMemcpy(p, host.data(), host.size() * 4, cudaMemcpyHostToDevice);
    } else {
      std::vector<__nv_bfloat16> b(host.size());
      for (size_t i = 0; i < host.size(); ++i) b[i] = __float2bfloat16(host[i]);
      cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
    }
  }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  std::vector<float> to_host() const {
    std::vector<float> out(static_cast<size_t>(n));
    if (t == dtype::f32) {
      cudaMemcpy(out.data(), p, out.size() * 4, cudaMemcpyDeviceToHost);
    } else {
      std::vector<__nv_bfloat16> b(out.size());
      cudaMemcpy(b.data(), p, b.size() * 2, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < b.size(); ++i) out[i] = __bfloat162float(b[i]);
    }
    return out;
  }
};

// Runs body(rank, group, stream) on `world` threads, member r on device r; failures of any member
// are collected and reported by rank.
void run_members(int world, const std::function<void(int, nccl_group&, cudaStream_t)>& body) {
  const nccl_id id = make_nccl_id();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(r);
        nccl_group g(id, r, world, r);
        cudaStream_t s;
        cudaStreamCreate(&s);
        body(r, g, s);
        g.synchronize(s);
        cudaStreamDestroy(s);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "member " << r;
}

// Rank r's input: integers scaled by the world, so sums and averages are exact in bf16 as well.
std::vector<float> input(int r, int world, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(world * (r + 1 + i % 5));
  return x;
}

float reduced(int world, int64_t i, reduce_op op) {
  float sum = 0;
  for (int r = 0; r < world; ++r) sum += static_cast<float>(world * (r + 1 + i % 5));
  return op == reduce_op::average ? sum / static_cast<float>(world) : sum;
}

struct shape_case {
  int64_t n;
  dtype t;
  reduce_op op;
};

const std::vector<shape_case>& cases() {
  // 12 splits evenly over 1-4 members; 10 and 7 do not (NCCL's grouped per-segment calls).
  static const std::vector<shape_case> c = {{12, dtype::f32, reduce_op::sum},
                                            {10, dtype::f32, reduce_op::average},
                                            {7, dtype::bf16, reduce_op::sum},
                                            {12, dtype::bf16, reduce_op::average},
                                            {1 << 20, dtype::f32, reduce_op::sum}};
  return c;
}

void check_collectives(int world) {
  for (const shape_case& c : cases()) {
    SCOPED_TRACE("n " + std::to_string(c.n) + (c.t == dtype::bf16 ? " bf16" : " f32") +
                 (c.op == reduce_op::average ? " average" : " sum"));
    std::vector<std::vector<float>> all_reduce(static_cast<size_t>(world)), reduce_scatter(all_reduce),
        all_gather(all_reduce), broadcast(all_reduce);
    run_members(world, [&](int r, nccl_group& g, cudaStream_t s) {
      device_buffer ar(input(r, world, c.n), c.t), rs(input(r, world, c.n), c.t), bc(input(r, world, c.n), c.t);
      // All-gather input: rank r's own segment filled with r + 1, the rest with garbage.
      std::vector<float> ag_in(static_cast<size_t>(c.n), -7.0f);
      const ring::range own = ring::segment(c.n, world, r);
      for (int64_t i = 0; i < own.count; ++i) ag_in[static_cast<size_t>(own.offset + i)] = static_cast<float>(r + 1);
      device_buffer ag(ag_in, c.t);
      g.all_reduce(ar.p, c.n, c.t, c.op, s);
      g.reduce_scatter(rs.p, c.n, c.t, c.op, s);
      g.all_gather(ag.p, c.n, c.t, s);
      g.broadcast(bc.p, c.n, c.t, world - 1, s);
      g.synchronize(s);
      all_reduce[static_cast<size_t>(r)] = ar.to_host();
      reduce_scatter[static_cast<size_t>(r)] = rs.to_host();
      all_gather[static_cast<size_t>(r)] = ag.to_host();
      broadcast[static_cast<size_t>(r)] = bc.to_host();
    });
    for (int r = 0; r < world; ++r) {
      const auto R = static_cast<size_t>(r);
      ASSERT_EQ(all_reduce[R].size(), static_cast<size_t>(c.n)) << "member " << r << " has no result";
      const ring::range own = ring::segment(c.n, world, r);
      const std::vector<float> root_input = input(world - 1, world, c.n);
      for (int64_t i = 0; i < c.n; ++i) {
        const auto I = static_cast<size_t>(i);
        ASSERT_EQ(all_reduce[R][I], reduced(world, i, c.op)) << "all-reduce, member " << r << ", element " << i;
        if (i >= own.offset && i < own.offset + own.count) {
          ASSERT_EQ(reduce_scatter[R][I], reduced(world, i, c.op)) << "reduce-scatter, member " << r << ", element " << i;
        }
        int owner = 0;
        while (i >= ring::segment(c.n, world, owner).offset + ring::segment(c.n, world, owner).count) ++owner;
        ASSERT_EQ(all_gather[R][I], static_cast<float>(owner + 1)) << "all-gather, member " << r << ", element " << i;
        ASSERT_EQ(broadcast[R][I], root_input[I]) << "broadcast, member " << r << ", element " << i;
      }
    }
  }
}

TEST(NcclGroup, OneMemberCollectivesLeaveTheValuesAsTheyAre) { check_collectives(1); }

TEST(NcclGroup, CollectivesOverEveryDeviceEqualTheCpuSums) {
  const int world = device_count();
  if (world < 2) GTEST_SKIP() << "one CUDA device: NCCL takes one member per device, so a group of two needs two";
  check_collectives(world);
}

TEST(NcclGroup, SendAndRecvPassActivationsAroundARing) {
  const int world = device_count();
  if (world < 2) GTEST_SKIP() << "one CUDA device: point to point needs two members, on two devices";
  const int64_t n = 1000;
  std::vector<std::vector<float>> got(static_cast<size_t>(world));
  run_members(world, [&](int r, nccl_group& g, cudaStream_t s) {
    device_buffer out(input(r, world, n), dtype::bf16), in(std::vector<float>(n, 0.0f), dtype::bf16);
    // Even ranks send first, odd ones receive first: NCCL matches each pair's calls in order.
    const int right = (r + 1) % world, left = (r + world - 1) % world;
    if (r % 2 == 0) {
      g.send(out.p, n, dtype::bf16, right, s);
      g.recv(in.p, n, dtype::bf16, left, s);
    } else {
      g.recv(in.p, n, dtype::bf16, left, s);
      g.send(out.p, n, dtype::bf16, right, s);
    }
    g.synchronize(s);
    got[static_cast<size_t>(r)] = in.to_host();
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], input((r + world - 1) % world, world, n)) << "member " << r;
}

TEST(NcclGroup, TwoMembersOnOneDeviceAreRefusedWithNcclsReason) {
  const nccl_id id = make_nccl_id();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        nccl_group g(id, r, 2, 0);
      } catch (const net_error& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("ncclCommInitRank"), std::string::npos) << e;
    EXPECT_NE(e.find("invalid usage"), std::string::npos) << e;
  }
}

TEST(NcclGroup, AnIdOfTheWrongLengthIsRefusedNamingIt) {
  EXPECT_EQ(nccl_id_from_bytes(to_bytes(make_nccl_id())).bytes.size(), static_cast<size_t>(NCCL_UNIQUE_ID_BYTES));
  try {
    nccl_id_from_bytes("short");
    FAIL() << "no exception";
  } catch (const net_error& e) {
    EXPECT_NE(std::string(e.what()).find("not 5"), std::string::npos) << e.what();
  }
}

TEST(NcclGroup, TheBackendAdapterAllReducesDeviceFloats) {
  std::vector<float> got;
  const nccl_id id = make_nccl_id();
  cudaSetDevice(0);
  auto g = std::make_shared<nccl_group>(id, 0, 1, 0);
  auto backend = nccl_backend(g);
  device_buffer x(input(0, 1, 9), dtype::f32);
  backend->all_reduce(static_cast<float*>(x.p), 9, reduce_op::sum);
  EXPECT_EQ(x.to_host(), input(0, 1, 9));
  EXPECT_EQ(backend->world(), 1);
}

// The job's engine: one id made, joined by a member per device (each on its thread, as each
// member's collective actor does), all-reducing device floats to the CPU's sums.
TEST(NcclGroup, TheEnginesMembersJoinWithOneIdAndAllReduceTheirDevicesFloats) {
  const int world = device_count();
  if (world < 2) GTEST_SKIP() << "NCCL takes one member per GPU: this needs 2 GPUs, the machine has " << world;
  const std::shared_ptr<device_group_engine> engine = nccl_engine();
  std::vector<int> devices;
  for (int r = 0; r < world; ++r) devices.push_back(r);
  ASSERT_EQ(engine->refuses(devices), "");
  const std::string id = engine->make_id();
  std::vector<std::vector<float>> got(static_cast<size_t>(world));
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        std::unique_ptr<group_backend> member = engine->join(id, r, world, r);
        cudaSetDevice(r);
        device_buffer x(input(r, world, 10), dtype::f32);
        member->all_reduce(static_cast<float*>(x.p), 10, reduce_op::sum);
        got[static_cast<size_t>(r)] = x.to_host();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "member " << r;
    ASSERT_EQ(got[static_cast<size_t>(r)].size(), 10u) << "member " << r;
    for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(got[static_cast<size_t>(r)][static_cast<size_t>(i)], reduced(world, i, reduce_op::sum));
  }
}

// The engine's links, one per direction of a pipeline pair, each end on its own thread: both ends
// send before they receive (1F1B's steady state: an activation forward while a gradient comes
// back), which over one communicator would wait forever; every byte of both arrives, and each
// completion comes back as a callback.
TEST(NcclGroup, TheEnginesLinksCarryBothDirectionsOfAPipelinePairAtOnce) {
  const int world = device_count();
  if (world < 2) GTEST_SKIP() << "NCCL takes one member per GPU: a link needs 2 GPUs, the machine has " << world;
  const std::shared_ptr<device_group_engine> engine = nccl_engine();
  const std::string forward_id = engine->make_id(), backward_id = engine->make_id();
  const int64_t n = 3 << 20;  // bytes: far above NCCL's eager buffers, so a send waits for its receive
  std::vector<std::vector<float>> got(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int end = 0; end < 2; ++end)
    threads.emplace_back([&, end] {
      try {
        // End 0 sends forward and receives backward; end 1 the other way round. Both join the
        // forward link first (a join returns once both ends are in), then the backward one.
        std::unique_ptr<device_link> out, in;
        if (end == 0) {
          out = engine->join_link(forward_id, true, 0);
          in = engine->join_link(backward_id, false, 0);
        } else {
          in = engine->join_link(forward_id, false, 1);
          out = engine->join_link(backward_id, true, 1);
        }
        ASSERT_TRUE(out && in);
        cudaSetDevice(end);
        device_buffer mine(input(end, 2, n / 4), dtype::f32), theirs(std::vector<float>(n / 4, 0.0f), dtype::f32);
        std::promise<std::optional<std::string>> sent, received;
        out->send(mine.p, static_cast<size_t>(n), [&](std::optional<std::string> e) { sent.set_value(e); });
        in->recv(theirs.p, static_cast<size_t>(n), [&](std::optional<std::string> e) { received.set_value(e); });
        const auto s = sent.get_future().get(), r = received.get_future().get();
        if (s) throw std::runtime_error("send: " + *s);
        if (r) throw std::runtime_error("recv: " + *r);
        got[static_cast<size_t>(end)] = theirs.to_host();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(end)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int end = 0; end < 2; ++end) {
    EXPECT_EQ(errors[static_cast<size_t>(end)], "") << "end " << end;
    EXPECT_EQ(got[static_cast<size_t>(end)], input(1 - end, 2, n / 4)) << "end " << end << " got the other's floats";
  }
}

}  // namespace
}  // namespace troupe::net

#define TROUPE_GPU_TEST_BINARY "comm_nccl_group_test"
#include "tests/gpu_test_main.hpp"
