// Where each data-parallel group of a mesh reduces (actors/plan/accelerators.hpp's
// choose_device_groups, the rule the job's links and its memory plan share): on its devices when
// every member has an accelerator and the engine takes them, and, for an engine whose devices
// serve one group at most (NCCL), never on a GPU an earlier group engaged.
#include <gtest/gtest.h>

#include <vector>

#include "actors/plan/accelerators.hpp"
#include "tests/actors/fake_device_group.hpp"

using namespace troupe;

namespace {

sched::mesh mesh_of(int dp, int pp) {
  sched::mesh m;
  m.dp = dp;
  m.pp = pp;
  return m;
}

std::vector<device_group_choice> choices(const device_engines& engines, const sched::mesh& m,
                                         const std::vector<device>& by_rank, bool across_processes = false) {
  return choose_device_groups(engines, m, [&](int r) { return by_rank.at(static_cast<size_t>(r)); }, sched::axis::dp,
                              across_processes);
}

std::shared_ptr<test::fake_device_group_engine> fake(std::string refusal = {}, bool one_group_per_device = false) {
  return std::make_shared<test::fake_device_group_engine>(std::move(refusal), one_group_per_device);
}

const device cpu{};
device gpu(int i) { return device{device_type::cuda, i}; }

}  // namespace

TEST(DeviceGroups, EveryGroupOnGpusOfItsOwnReducesThere) {
  const auto nccl_like = fake("", true);
  // dp 2 x pp 2: stage 0's group is ranks 0 and 2, stage 1's ranks 1 and 3.
  const auto c = choices({nccl_like}, mesh_of(2, 2), {gpu(0), gpu(1), gpu(2), gpu(3)});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_TRUE(c[0].on_devices);
  EXPECT_TRUE(c[1].on_devices);
  EXPECT_EQ(c[0].engine, nccl_like);
  EXPECT_EQ(c[0].why + c[1].why, "");
}

TEST(DeviceGroups, ASecondGroupOnAnEngagedGpuMeetsOnTheHostNamingTheGroupThatHoldsIt) {
  const auto nccl_like = fake("", true);
  const auto c = choices({nccl_like}, mesh_of(2, 2), {gpu(0), gpu(0), gpu(1), gpu(1)});
  EXPECT_TRUE(c[0].on_devices);
  EXPECT_FALSE(c[1].on_devices);
  EXPECT_EQ(c[1].why, "fake-nccl serves one group per device, and cuda:0 serves data-parallel group 0");
  // An engine without that rule takes both.
  const auto d = choices({fake()}, mesh_of(2, 2), {gpu(0), gpu(0), gpu(1), gpu(1)});
  EXPECT_TRUE(d[0].on_devices && d[1].on_devices);
}

TEST(DeviceGroups, AMemberOnTheCpuOrNoEngineOrARefusalMeetsOnTheHost) {
  const auto c = choices({fake()}, mesh_of(2, 1), {gpu(0), cpu});
  EXPECT_FALSE(c[0].on_devices);
  EXPECT_EQ(c[0].why, "") << "a CPU member is no refusal: the group simply meets on the host";
  const auto r = choices({fake("two members on one GPU")}, mesh_of(2, 1), {gpu(0), gpu(0)});
  EXPECT_FALSE(r[0].on_devices);
  EXPECT_EQ(r[0].why, "two members on one GPU");
  EXPECT_FALSE(choose_device_groups({}, mesh_of(2, 1), [](int r) { return gpu(r); })[0].on_devices);
  // One replica has no group to reduce.
  EXPECT_FALSE(choices({fake()}, mesh_of(1, 2), {gpu(0), gpu(1)})[0].on_devices);
}

// The build's engines: replicas sharing one GPU reduce with its own ops, replicas with a GPU each
// through NCCL (where built); a group over two GPUs with two members on one of them through the
// host, with both refusals.
TEST(DeviceGroups, TheBuildsEnginesTakeASharedGpuLocallyAndGpusOfTheirOwnThroughNccl) {
  const device_engines build = gpu_group_engines();
  const auto shared = choices(build, mesh_of(2, 1), {gpu(0), gpu(0)});
  ASSERT_TRUE(shared[0].on_devices);
  EXPECT_EQ(shared[0].engine->name(), "the device's own ops");
  const auto own = choices(build, mesh_of(2, 1), {gpu(0), gpu(1)});
  if (build.size() == 1) {  // a build without CUDA
    EXPECT_FALSE(own[0].on_devices);
    return;
  }
  ASSERT_TRUE(own[0].on_devices);
  EXPECT_EQ(own[0].engine->name(), "nccl");
  const auto mixed = choices(build, mesh_of(3, 1), {gpu(0), gpu(0), gpu(1)});
  EXPECT_FALSE(mixed[0].on_devices);
  EXPECT_EQ(mixed[0].why,
            "members on one GPU only, and these are on cuda:0 and cuda:1; NCCL takes one member per GPU: cuda:0 holds members 0 and 1");
}

// A data-parallel group across processes reduces on its GPUs only when asked (--backend nccl:
// processes sharing a GPU would have NCCL refuse it) and through an engine whose members may be
// in other processes; one that meets in a process's memory is named as the reason. A GPU is known
// within its process only (each machine has its cuda:0), so a process's cuda:0 is not another's,
// and an engine's rule of one member per GPU applies within each process.
TEST(DeviceGroups, AGroupAcrossProcessesTakesOnlyAnEngineThatSpansThemWhenAskedAndEachProcessHasItsOwnGpus) {
  sched::mesh m = mesh_of(2, 2);
  m.processes = 4;  // one rank each: dp groups {0, 2} and {1, 3}, each across two processes
  const std::vector<device> gpus = {gpu(0), gpu(0), gpu(0), gpu(0)};  // four machines' cuda:0
  const auto local = fake("", true), spanning = fake("", true);
  spanning->set_spans_processes(true);
  for (const auto& g : choices({local, spanning}, m, gpus)) {
    EXPECT_FALSE(g.on_devices) << "not asked to reduce across processes on the devices";
    EXPECT_EQ(g.why, "");
  }
  const auto c = choices({local, spanning}, m, gpus, true);
  ASSERT_EQ(c.size(), 2u);
  for (const auto& g : c) {
    EXPECT_TRUE(g.on_devices);
    EXPECT_EQ(g.engine, spanning);
    EXPECT_EQ(g.why, "");
  }
  const auto only_local = choices({local}, m, gpus, true);
  EXPECT_FALSE(only_local[0].on_devices);
  EXPECT_EQ(only_local[0].why, "fake-nccl joins the members of one process, and this group spans processes");
  // In one process the same mesh takes the local engine, and the one-group-per-GPU rule holds there.
  m.processes = 1;
  const auto one = choices({local, spanning}, m, gpus, true);
  EXPECT_TRUE(one[0].on_devices);
  EXPECT_EQ(one[0].engine, local);
  EXPECT_FALSE(one[1].on_devices) << "cuda:0 serves group 0 in the one process";
  const device_engines build = gpu_group_engines();
  if (build.size() == 1) return;  // a build without CUDA: no NCCL to span processes
  // NCCL over two processes of two ranks each: two GPUs a process take it, one GPU twice in a
  // process does not.
  sched::mesh four = mesh_of(4, 1);
  four.processes = 2;
  const auto own = choices(build, four, {gpu(0), gpu(1), gpu(0), gpu(1)}, true);
  ASSERT_TRUE(own[0].on_devices);
  EXPECT_EQ(own[0].engine->name(), "nccl");
  const auto twice = choices(build, four, {gpu(0), gpu(0), gpu(1), gpu(1)}, true);
  EXPECT_FALSE(twice[0].on_devices);
  EXPECT_NE(twice[0].why.find("NCCL takes one member per GPU: cuda:0 holds members 0 and 1"), std::string::npos)
      << twice[0].why;
}

// Tensor-parallel groups choose first: their collectives sit inside every layer's compute. On
// GPUs an NCCL-like engine's tp groups engage, a data-parallel group over those GPUs reduces
// through the host and says which tensor-parallel group holds them.
TEST(DeviceGroups, TensorParallelGroupsTakeTheExclusiveEngineFirstAndDataParallelOnesThenMeetOnTheHost) {
  const auto nccl_like = fake("", true);
  sched::mesh m = mesh_of(2, 1);
  m.tp = 2;  // ranks 0,1 are replica 0's tp group, 2,3 replica 1's; dp groups {0,2} and {1,3}
  const std::vector<device> gpus = {gpu(0), gpu(1), gpu(2), gpu(3)};
  auto by_rank = [&](int r) { return gpus.at(static_cast<size_t>(r)); };
  const auto tp = choose_device_groups({nccl_like}, m, by_rank, sched::axis::tp);
  ASSERT_EQ(tp.size(), 2u);
  EXPECT_TRUE(tp[0].on_devices && tp[1].on_devices);
  const auto dp = choose_device_groups({nccl_like}, m, by_rank);
  ASSERT_EQ(dp.size(), 2u);
  for (const auto& c : dp) {
    EXPECT_FALSE(c.on_devices);
    EXPECT_NE(c.why.find("tensor-parallel group"), std::string::npos) << c.why;
  }
  // An engine that serves any number of groups per device takes both kinds.
  const auto shared = fake();
  EXPECT_TRUE(choose_device_groups({shared}, m, by_rank)[0].on_devices);
  EXPECT_TRUE(choose_device_groups({shared}, m, by_rank, sched::axis::tp)[1].on_devices);
  EXPECT_NO_THROW(check_tp_groups_on_devices({nccl_like}, m, by_rank));
}

// A tensor-parallel group on accelerators has no host path: one with members on the host and on
// a GPU, or on devices no engine takes, is refused naming the group and the reason.
TEST(DeviceGroups, ATensorParallelGroupNoEngineTakesOrHalfOnTheHostIsRefusedByName) {
  sched::mesh m = mesh_of(1, 1);
  m.tp = 2;
  auto expect_refused = [&](const device_engines& engines, const std::vector<device>& by_rank, const std::string& part) {
    try {
      check_tp_groups_on_devices(engines, m, [&](int r) { return by_rank.at(static_cast<size_t>(r)); });
      FAIL() << "accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("tensor-parallel group 0"), std::string::npos) << what;
      EXPECT_NE(what.find(part), std::string::npos) << what;
    }
  };
  expect_refused({fake()}, {cpu, gpu(0)}, "on the host and on accelerators");
  expect_refused({fake("the test refuses them")}, {gpu(0), gpu(1)}, "the test refuses them");
  expect_refused({}, {gpu(0), gpu(1)}, "none was given");
  EXPECT_NO_THROW(check_tp_groups_on_devices({}, m, [](int) { return cpu; }));
}

// Across processes (a process per GPU, --backend nccl) a tensor-parallel group sums on its GPUs
// through an engine that spans processes; one that only meets in a process is refused by name,
// since the group's layers have no host path on GPUs. Without across_processes the check leaves
// such groups to the config's own refusal.
TEST(DeviceGroups, ATensorParallelGroupAcrossProcessesTakesAnEngineThatSpansThemOrIsRefusedByName) {
  sched::mesh m = mesh_of(1, 1);
  m.tp = 2;
  m.processes = 2;
  const std::vector<device> gpus = {gpu(0), gpu(0)};  // two machines' cuda:0, or --device cuda:0,cuda:1's
  auto by_rank = [&](int r) { return gpus.at(static_cast<size_t>(r)); };
  const auto local = fake(), spanning = fake();
  spanning->set_spans_processes(true);
  const auto tp = choose_device_groups({local, spanning}, m, by_rank, sched::axis::tp, true);
  ASSERT_EQ(tp.size(), 1u);
  EXPECT_TRUE(tp[0].on_devices);
  EXPECT_EQ(tp[0].engine, spanning);
  EXPECT_NO_THROW(check_tp_groups_on_devices({local, spanning}, m, by_rank, true));
  EXPECT_NO_THROW(check_tp_groups_on_devices({local}, m, by_rank, false));
  try {
    check_tp_groups_on_devices({local}, m, by_rank, true);
    FAIL() << "a group across processes took an engine of one process";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("joins the members of one process, and this group spans processes"),
              std::string::npos)
        << e.what();
  }
}
