// Tests of the passes, each on its own: add_communication inserts exactly the matched
// transfers (including the wrap-around of interleaved chunks) and keeps the compute order;
// add_optimizer_step appends the step; complete() runs both; add_param_fetches brackets every
// weight-reading action with a fetch and a release (the fetch before the action's receive) and
// keeps the order; no pass can be applied twice.
#include "schedules/passes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "schedules/builders.hpp"
#include "schedules/validate.hpp"

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

schedule without_fetches(schedule s) {
  for (auto& list : s.stages) {
    std::vector<action> kept;
    for (const action& a : list)
      if (a.kind != op::fetch_params && a.kind != op::release_params) kept.push_back(a);
    list = kept;
  }
  return s;
}

// Compute-only on one device: every F and B gets its own FP before and RP after, with its
// microbatch; rows written out by hand.
TEST(schedules_passes, add_param_fetches_brackets_every_weight_reading_action_and_no_weight_gradient) {
  EXPECT_EQ(row(add_param_fetches(gpipe(1, 2)), 0), "FP0 F0 RP0 FP1 F1 RP1 FP0 B0 RP0 FP1 B1 RP1");
  // Split backward: I reads the weights, W (the weight gradient) does not and stays unbracketed.
  const schedule z = add_param_fetches(zb_h1(1, 2));
  EXPECT_EQ(row(z, 0), "FP0 F0 RP0 FP0 I0 RP0 W0 FP1 F1 RP1 FP1 I1 RP1 W1");
  EXPECT_EQ(z.stages[0][0], (action{0, op::fetch_params, 0, 0, -1}));
  EXPECT_EQ(z.stages[0][2], (action{0, op::release_params, 0, 0, -1}));
}

// After add_communication: the fetch goes before the receive that feeds the action (so the
// all-gather overlaps the wait), the release right after the compute, before its send.
TEST(schedules_passes, add_param_fetches_puts_the_fetch_before_the_receive_and_the_release_before_the_send) {
  const schedule s = add_param_fetches(complete(one_f_one_b(3, 2)));
  EXPECT_EQ(row(s, 0), "FP0 F0 RP0 SA0>1 FP1 F1 RP1 SA1>1 FP0 RG0<1 B0 RP0 FP1 RG1<1 B1 RP1 R O");
  EXPECT_EQ(row(s, 1),
            "FP0 RA0<0 F0 RP0 SA0>2 FP1 RA1<0 F1 RP1 SA1>2 FP0 RG0<2 B0 RP0 SG0>0 FP1 RG1<2 B1 RP1 SG1>0 R O");
  EXPECT_EQ(row(s, 2), "FP0 RA0<1 F0 RP0 FP0 B0 RP0 SG0>1 FP1 RA1<1 F1 RP1 FP1 B1 RP1 SG1>1 R O");
  const schedule z = add_param_fetches(complete(zb_h1(2, 1)));
  EXPECT_EQ(row(z, 0), "FP0 F0 RP0 SA0>1 FP0 RG0<1 I0 RP0 W0 R O");
  EXPECT_EQ(row(z, 1), "FP0 RA0<0 F0 RP0 FP0 I0 RP0 SG0>0 W0 R O");
}

TEST(schedules_passes, add_param_fetches_carries_the_chunk_of_interleaved_actions) {
  const schedule s = add_param_fetches(complete(interleaved_1f1b(2, 2, 2)));
  EXPECT_EQ(row(s, 1),
            "FP0 RA0<0 F0 RP0 SA0>0 FP1 RA1<0 F1 RP1 SA1>0 FP0.c1 RA0<0.c1 F0.c1 RP0.c1 FP0.c1 B0.c1 "
            "RP0.c1 SG0>0.c1 FP1.c1 RA1<0.c1 F1.c1 RP1.c1 FP1.c1 B1.c1 RP1.c1 SG1>0.c1 FP0 RG0<0 B0 "
            "RP0 SG0>0 FP1 RG1<0 B1 RP1 SG1>0 R O");
  EXPECT_EQ(s.stages[1][10], (action{1, op::fetch_params, 0, 1, -1}));
}

// Removing the fetches gives back exactly the input, compute-only or complete; every F, B and I
// gets one FP and one RP of its own; the result validates wherever its input does.
TEST(schedules_passes, add_param_fetches_keeps_the_given_order_and_validates) {
  for (const schedule& compute : {gpipe(4, 5), one_f_one_b(5, 3), zb_h1(3, 7), interleaved_1f1b(3, 6, 2),
                                  gpipe(1, 3), zb_h1(1, 4), interleaved_1f1b(1, 3, 3)}) {
    for (const schedule& s : {compute, complete(compute)}) {
      const schedule with = add_param_fetches(s);
      EXPECT_EQ(without_fetches(with), s) << s.name;
      for (std::size_t d = 0; d < s.stages.size(); ++d) {
        const auto count = [](const std::vector<action>& list, auto pred) {
          return std::count_if(list.begin(), list.end(), [&](const action& a) { return pred(a.kind); });
        };
        const auto reads = count(s.stages[d], [](op k) { return reads_weights(k); });
        EXPECT_EQ(count(with.stages[d], [](op k) { return k == op::fetch_params; }), reads);
        EXPECT_EQ(count(with.stages[d], [](op k) { return k == op::release_params; }), reads);
      }
      if (validate(s).ok()) {
        const validation v = validate(with);
        EXPECT_TRUE(v.ok()) << s.name << ": " << v.error;
      }
    }
  }
}

TEST(schedules_passes, add_param_fetches_refuses_a_schedule_that_already_fetches) {
  const schedule once = add_param_fetches(complete(one_f_one_b(2, 2)));
  try {
    add_param_fetches(once);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "add_param_fetches: schedule already has parameter fetches: stage 0 has 0FP0");
  }
  schedule released_only = gpipe(1, 1);
  released_only.stages[0].push_back(action{0, op::release_params, -1, 0, -1});
  EXPECT_THROW(add_param_fetches(released_only), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::sched
