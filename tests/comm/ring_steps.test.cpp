// A ring step (tp_group::shift) and the all-to-all (kernels/tp_group.hpp), on every back end a
// group of ranks can run on here: members meeting in memory (blocks read straight from each
// other), the TCP ring (blocks passed along the ring) and Gloo (its alltoallv), each member on a
// thread of its own. Sizes differ per member and per pair (zeros included), so a block that lands
// one slot off, or a receive that takes the wrong member's count, shows.
// (MPI's is run by tests/cli/mpi_backend.test.sh under mpirun, NCCL's on GPUs only.)
#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/collective_backend.hpp"
#include "comm/gloo_group.hpp"
#include "comm/kv_store.hpp"
#include "comm/tcp_ring.hpp"
#include "comm/tp_groups.hpp"
#include "kernels/tp_group.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {

using group = std::vector<std::shared_ptr<tp_group>>;

group tcp_group(int n) {
  std::promise<uint16_t> port;
  auto port_known = port.get_future().share();
  std::vector<std::future<std::unique_ptr<tcp_ring>>> joining;
  for (int r = 0; r < n; ++r)
    joining.push_back(std::async(std::launch::async, [&, r] {
      ring_options o;
      o.chunk_bytes = 64;  // many chunks per step
      if (r == 0) o.on_master_listening = [&](uint16_t p) { port.set_value(p); };
      const uint16_t at = r == 0 ? 0 : port_known.get();
      return tcp_ring::connect(launch_env{r, n, "127.0.0.1", at, "test"}, "s3cret", o);
    }));
  group g;
  for (auto& j : joining) g.push_back(backend_tp_group(std::shared_ptr<group_backend>(j.get())));
  return g;
}

group gloo_group(int n) {
  auto server = std::make_shared<kv_server>("127.0.0.1", 0, "s3cret");
  std::vector<std::future<std::unique_ptr<group_backend>>> joining;
  for (int r = 0; r < n; ++r)
    joining.push_back(std::async(std::launch::async, [&, r] {
      std::shared_ptr<kv_store> store = r == 0 ? std::shared_ptr<kv_store>(server)
                                               : std::shared_ptr<kv_store>(kv_connect("127.0.0.1", server->port(),
                                                                                      "s3cret", r, 5000));
      return connect_gloo_member(r, n, store, gloo_options{"127.0.0.1", 20000, "s3cret"});
    }));
  group g;
  for (auto& j : joining) g.push_back(backend_tp_group(std::shared_ptr<group_backend>(j.get())));
  return g;
}

group make(const std::string& kind, int n) {
  if (kind == "local") return make_local_tp_group(n, {20000});
  if (kind == "tcp") return tcp_group(n);
  return gloo_group(n);
}

// Runs body(member) for every member, each on its own thread; rethrows the first failure.
void on_every_member(const group& g, const std::function<void(tp_group&)>& body) {
  std::vector<std::future<void>> running;
  for (const auto& m : g) running.push_back(std::async(std::launch::async, [&body, m] { body(*m); }));
  for (auto& r : running) r.get();
}

// Floats member o sends member d: some pairs send nothing.
int64_t count(int o, int d) { return (o * 7 + d * 3) % 5; }
float value(int o, int d, int64_t i) { return static_cast<float>(o * 1000 + d * 100 + i); }

class RingSteps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "gloo" && !backend_built(backend_kind::gloo)) GTEST_SKIP() << "built without Gloo";
  }
};

TEST_P(RingSteps, AShiftDeliversEachMembersBufferToTheNextWhateverItsSize) {
  for (int n : {2, 3, 4}) {
    const group g = make(GetParam(), n);
    on_every_member(g, [n](tp_group& m) {
      const int r = m.rank(), prev = (r + n - 1) % n;
      for (int step = 0; step < 3; ++step) {  // three steps in a row: no step's bytes reach another
        const int64_t out_n = 1 + r * 37 + step, in_n = 1 + prev * 37 + step;
        std::vector<float> out(static_cast<size_t>(out_n)), in(static_cast<size_t>(in_n), -1.0f);
        for (int64_t i = 0; i < out_n; ++i) out[static_cast<size_t>(i)] = value(r, step, i);
        m.shift(out.data(), out_n, in.data(), in_n);
        for (int64_t i = 0; i < in_n; ++i)
          ASSERT_EQ(in[static_cast<size_t>(i)], value(prev, step, i)) << "member " << r << " step " << step << " of " << n;
      }
    });
  }
}

TEST_P(RingSteps, AllToAllDeliversEveryPairsBlockWhateverItsSizeZeroIncluded) {
  for (int n : {2, 3, 4}) {
    const group g = make(GetParam(), n);
    on_every_member(g, [n](tp_group& m) {
      const int r = m.rank();
      std::vector<int64_t> counts, expected;
      std::vector<float> send;
      int64_t total = 0;
      for (int d = 0; d < n; ++d) {
        counts.push_back(count(r, d));
        expected.push_back(count(d, r));
        total += count(d, r);
        for (int64_t i = 0; i < count(r, d); ++i) send.push_back(value(r, d, i));
      }
      std::vector<float> got(static_cast<size_t>(total) + 1, -1.0f);  // one more: nothing lands past the blocks
      m.all_to_all(send.data(), counts, got.data(), expected);
      int64_t at = 0;
      for (int o = 0; o < n; ++o) {
        for (int64_t i = 0; i < count(o, r); ++i)
          ASSERT_EQ(got[static_cast<size_t>(at + i)], value(o, r, i)) << "from member " << o << " to " << r << " of " << n;
        at += count(o, r);
      }
      ASSERT_EQ(got.back(), -1.0f) << "member " << r << " of " << n;
    });
  }
}

INSTANTIATE_TEST_SUITE_P(EveryBackEnd, RingSteps, ::testing::Values("local", "tcp", "gloo"),
                         [](const auto& info) { return info.param; });

// Rank 1 sends 3 floats where rank 0 expects 4: each member's error, empty where none.
std::vector<std::string> mismatched_shift(const group& g) {
  std::vector<std::string> errors(2);
  on_every_member(g, [&](tp_group& m) {
    std::vector<float> out(4), in(8);
    try {
      m.shift(out.data(), m.rank() == 0 ? 4 : 3, in.data(), 4);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(m.rank())] = e.what();
    }
  });
  return errors;
}

TEST(RingSteps, AShiftWhoseReceiverExpectsAnotherSizeFailsNamingBothInMemory) {
  const std::vector<std::string> errors = mismatched_shift(make_local_tp_group(2, {20000}));
  EXPECT_NE(errors[0].find("expects 4 elements but rank 1 sends 3"), std::string::npos) << errors[0];
}

// Rank 1 sends rank 0 two floats where rank 0 expects three: each member's error, empty where none.
std::vector<std::string> mismatched_all_to_all(const group& g) {
  std::vector<std::string> errors(2);
  on_every_member(g, [&](tp_group& m) {
    std::vector<float> out(8, 1.0f), in(8);
    const std::vector<int64_t> send = m.rank() == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{2, 1};
    try {
      m.all_to_all(out.data(), send, in.data(), m.rank() == 0 ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{3, 1});
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(m.rank())] = e.what();
    }
  });
  return errors;
}

TEST(RingSteps, AnAllToAllWhoseReceiverExpectsAnotherSizeFailsNamingBothInMemoryAndOverTcp) {
  std::vector<std::string> errors = mismatched_all_to_all(make_local_tp_group(2, {20000}));
  EXPECT_NE(errors[0].find("expects 3 elements from rank 1, which sends 2"), std::string::npos) << errors[0];
  errors = mismatched_all_to_all(tcp_group(2));
  EXPECT_NE(errors[0].find("expects 3 floats from rank 1, which sends 2"), std::string::npos) << errors[0];
}

TEST(RingSteps, AShiftWhoseReceiverExpectsAnotherSizeFailsNamingItOverTcp) {
  const std::vector<std::string> errors = mismatched_shift(tcp_group(2));
  EXPECT_NE(errors[0].find("collective mismatch"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("runs shift"), std::string::npos) << errors[0];
}

}  // namespace
