// Tests of the passes, each on its own: add_communication inserts exactly the matched
// transfers (including the wrap-around of interleaved chunks) and keeps the compute order;
// add_optimizer_step appends the step; complete() runs both; neither can be applied twice.
#include "schedules/passes.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

#include "schedules/builders.hpp"

namespace troupe::sched {
namespace {

std::string row(const schedule& s, int stage) {
  std::string out;
  for (const action& a : s.stages[static_cast<std::size_t>(stage)])
    out += (out.empty() ? "" : " ") + body_string(a);
  return out;
}

schedule without_communication(schedule s) {
  for (auto& list : s.stages) {
    std::vector<action> kept;
    for (const action& a : list)
      if (!is_communication(a.kind)) kept.push_back(a);
    list = kept;
  }
  return s;
}

TEST(schedules_passes, add_communication_brackets_each_cross_stage_boundary) {
  const schedule s = add_communication(one_f_one_b(3, 2));
  EXPECT_EQ(row(s, 0), "F0 SA0>1 F1 SA1>1 RG0<1 B0 RG1<1 B1");
  EXPECT_EQ(row(s, 1), "RA0<0 F0 SA0>2 RA1<0 F1 SA1>2 RG0<2 B0 SG0>0 RG1<2 B1 SG1>0");
  EXPECT_EQ(row(s, 2), "RA0<1 F0 B0 SG0>1 RA1<1 F1 B1 SG1>1");
}

TEST(schedules_passes, add_communication_wraps_chunks_round_the_devices) {
  const schedule s = add_communication(interleaved_1f1b(2, 2, 2));
  // Model chunks: device 0 holds 0 and 2, device 1 holds 1 and 3. Chunk 1 -> 2 goes 1 -> 0.
  EXPECT_EQ(row(s, 0),
            "F0 SA0>1 F1 SA1>1 RA0<1.c1 F0.c1 SA0>1.c1 RA1<1.c1 F1.c1 SA1>1.c1 "
            "RG0<1.c1 B0.c1 SG0>1.c1 RG1<1.c1 B1.c1 SG1>1.c1 RG0<1 B0 RG1<1 B1");
  EXPECT_EQ(row(s, 1),
            "RA0<0 F0 SA0>0 RA1<0 F1 SA1>0 RA0<0.c1 F0.c1 B0.c1 SG0>0.c1 RA1<0.c1 F1.c1 "
            "B1.c1 SG1>0.c1 RG0<0 B0 SG0>0 RG1<0 B1 SG1>0");
}

TEST(schedules_passes, split_backward_sends_its_gradient_after_the_input_half) {
  const schedule s = add_communication(zb_h1(2, 1));
  EXPECT_EQ(row(s, 0), "F0 SA0>1 RG0<1 I0 W0");
  EXPECT_EQ(row(s, 1), "RA0<0 F0 I0 SG0>0 W0");
}

TEST(schedules_passes, one_device_needs_no_transfers) {
  const schedule compute = interleaved_1f1b(1, 3, 3);
  EXPECT_EQ(add_communication(compute), compute);
}

TEST(schedules_passes, add_communication_keeps_the_compute_order) {
  for (const schedule& s : {gpipe(4, 5), one_f_one_b(5, 3), zb_h1(3, 7), interleaved_1f1b(3, 6, 2)}) {
    const schedule with = add_communication(s);
    EXPECT_EQ(without_communication(with), s) << s.name;
    EXPECT_EQ(with.name, s.name);
  }
}

TEST(schedules_passes, add_optimizer_step_appends_reduce_then_step) {
  const schedule s = add_optimizer_step(gpipe(2, 1));
  EXPECT_EQ(row(s, 0), "F0 B0 R O");
  EXPECT_EQ(row(s, 1), "F0 B0 R O");
  EXPECT_EQ(s.stages[1][3], (action{1, op::optimizer_step, -1, 0, -1}));
}

// complete() is both passes in order: the transfers bracket the compute, and the reduce and step
// come after the last transfer, rows written out by hand.
TEST(schedules_passes, complete_adds_transfers_then_reduce_and_step) {
  const schedule s = complete(gpipe(2, 1));
  EXPECT_EQ(row(s, 0), "F0 SA0>1 RG0<1 B0 R O");
  EXPECT_EQ(row(s, 1), "RA0<0 F0 B0 SG0>0 R O");
}

TEST(schedules_passes, passes_refuse_to_run_twice) {
  const schedule once = add_communication(one_f_one_b(2, 2));
  try {
    add_communication(once);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "add_communication: schedule already has communication: stage 0 has 0SA0>1");
  }
  EXPECT_THROW(add_optimizer_step(add_optimizer_step(once)), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::sched
