// Tests of validate(): hand-written bad schedules are refused with the first offending
// instruction named (receive without send, send without receive, cycle, backward before
// forward, input not arrived, memory bound, bad operands), peak live activations, and ZeRO-3
// parameter residency (compute of an unfetched chunk or microbatch, a fetch twice, a release
// without its fetch, a fetch still held at the end) with the peak of fetches held.
#include "schedules/validate.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "schedules/builders.hpp"
#include "schedules/passes.hpp"

namespace troupe::sched {
namespace {

// A schedule from its text form with a default header, e.g. rows {"F0 SA0>1", "RA0<0 F0"}.
schedule from_rows(int num_microbatches, const std::vector<std::string>& rows, int v = 1) {
  std::string text = "schedule test stages=" + std::to_string(rows.size()) +
                     " microbatches=" + std::to_string(num_microbatches) +
                     " virtual=" + std::to_string(v) + "\n";
  for (std::size_t d = 0; d < rows.size(); ++d)
    text += "stage " + std::to_string(d) + ":" + (rows[d].empty() ? "" : " " + rows[d]) + "\n";
  return parse_schedule(text);
}

void expect_refused(const validation& v, const std::string& error, int stage, int index) {
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.error, error);
  EXPECT_EQ(v.stage, stage);
  EXPECT_EQ(v.action_index, index);
}

TEST(schedules_validate, accepts_a_minimal_two_stage_step) {
  const validation v = validate(from_rows(1, {"F0 SA0>1 RG0<1 B0 R O", "RA0<0 F0 B0 SG0>0 R O"}));
  EXPECT_TRUE(v.ok()) << v.error;
  EXPECT_EQ(v.stage, -1);
  EXPECT_EQ(v.peak_live_activations, (std::vector<int>{1, 1}));
}

TEST(schedules_validate, refuses_a_cycle_as_deadlock_naming_every_waiting_stage) {
  // Stage 0 waits for a gradient before sending the activation stage 1 waits for.
  const validation v = validate(from_rows(1, {"F0 RG0<1 SA0>1 B0", "RA0<0 F0 B0 SG0>0"}));
  expect_refused(v, "deadlock: stage 0 waits at action 1 (RG0<1), stage 1 waits at action 0 (RA0<0)",
                 0, 1);
}

TEST(schedules_validate, refuses_a_deadlock_deep_in_a_builder_schedule) {
  schedule s = complete(one_f_one_b(2, 4));
  // Stage 1 receives microbatch 1 before microbatch 0 while stage 0 sends them in order: fine.
  // But make stage 0 wait for microbatch 3's gradient before sending microbatch 3's input.
  auto& row0 = s.stages[0];
  const auto send3 = std::find(row0.begin(), row0.end(), parse_action("0SA3>1"));
  const auto recv3 = std::find(row0.begin(), row0.end(), parse_action("0RG3<1"));
  ASSERT_TRUE(send3 < recv3);
  std::iter_swap(send3, recv3);
  const validation v = validate(s);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.error.rfind("deadlock: stage 0 waits at action ", 0), 0u) << v.error;
  EXPECT_NE(v.error.find("(RG3<1), stage 1 waits at action "), std::string::npos) << v.error;
  EXPECT_NE(v.error.find("(RA3<0)"), std::string::npos) << v.error;
}

TEST(schedules_validate, refuses_a_receive_without_its_send) {
  schedule s = complete(one_f_one_b(2, 4));
  auto& row0 = s.stages[0];
  row0.erase(std::find(row0.begin(), row0.end(), parse_action("0SA3>1")));
  // Stage 1's list: RA0 F0 B0 SG0 RA1 F1 B1 SG1 RA2 F2 B2 SG2 RA3 ... -> RA3 is action 12.
  expect_refused(validate(s), "stage 1, action 12 (RA3<0): receive has no matching send", 1, 12);
}

TEST(schedules_validate, refuses_a_send_without_its_receive) {
  expect_refused(validate(from_rows(1, {"F0 SA0>1 SA0>1 RG0<1 B0", "RA0<0 F0 B0 SG0>0"})),
                 "stage 0, action 2 (SA0>1): send has no matching receive", 0, 2);
}

TEST(schedules_validate, refuses_backward_before_its_forward) {
  expect_refused(validate(from_rows(2, {"F0 B1 F1 B0"})),
                 "stage 0, action 1 (B1): backward of microbatch 1 on chunk 0 before its forward",
                 0, 1);
  expect_refused(validate(from_rows(1, {"F0 W0 I0"})),
                 "stage 0, action 1 (W0): backward_weight of microbatch 0 on chunk 0 before its "
                 "backward_input", 0, 1);
}

TEST(schedules_validate, refuses_compute_before_its_input_arrived) {
  expect_refused(validate(from_rows(1, {"F0 SA0>1 RG0<1 B0", "F0 RA0<0 B0 SG0>0"})),
                 "stage 1, action 0 (F0): forward of microbatch 0 on chunk 0 before its input arrived",
                 1, 0);
  // Compute-only schedules have no receives at all, so with P > 1 they are refused.
  EXPECT_FALSE(validate(one_f_one_b(2, 2)).ok());
  EXPECT_TRUE(validate(one_f_one_b(1, 2)).ok());
  // Interleaved on one device: chunk 1 consumes chunk 0's output locally.
  expect_refused(validate(from_rows(1, {"F0.c1 F0 B0.c1 B0"}, 2)),
                 "stage 0, action 0 (F0.c1): forward of microbatch 0 on chunk 1 before its input "
                 "arrived", 0, 0);
  expect_refused(validate(from_rows(1, {"F0 F0.c1 B0 B0.c1"}, 2)),
                 "stage 0, action 2 (B0): backward of microbatch 0 on chunk 0 before its gradient "
                 "arrived", 0, 2);
}

TEST(schedules_validate, refuses_exceeding_the_memory_bound) {
  const schedule g = complete(gpipe(2, 4));  // stage 0: F0 SA0>1 F1 SA1>1 F2 SA2>1 F3 ...
  expect_refused(validate(g, 3), "stage 0, action 6 (F3): 4 live activations exceed the bound of 3",
                 0, 6);
  EXPECT_TRUE(validate(g, 4).ok());
  const schedule o = complete(one_f_one_b(4, 8));
  EXPECT_TRUE(validate(o, 4).ok());
  const validation v = validate(o, 3);
  EXPECT_EQ(v.stage, 0);
  EXPECT_NE(v.error.find("4 live activations exceed the bound of 3"), std::string::npos) << v.error;
}

TEST(schedules_validate, reports_peak_live_activations) {
  EXPECT_EQ(validate(complete(gpipe(3, 5))).peak_live_activations, (std::vector<int>{5, 5, 5}));
  EXPECT_EQ(validate(complete(one_f_one_b(4, 8))).peak_live_activations,
            (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(validate(complete(zb_h1(4, 8))).peak_live_activations, (std::vector<int>{4, 4, 4, 4}));
}

TEST(schedules_validate, refuses_bad_operands) {
  expect_refused(validate(from_rows(2, {"F2 B2"})),
                 "stage 0, action 0 (F2): microbatch out of range [0, 2)", 0, 0);
  expect_refused(validate(from_rows(1, {"F0 B0 F0.c1"})),
                 "stage 0, action 2 (F0.c1): chunk out of range [0, 1)", 0, 2);
  expect_refused(validate(from_rows(1, {"F0 SA0>2 RG0<1 B0", "RA0<0 F0 B0 SG0>0", ""})),
                 "stage 0, action 1 (SA0>2): peer must be stage 1, which holds the neighbouring chunk",
                 0, 1);
  expect_refused(validate(from_rows(1, {"F0 SG0>1 B0", "F0 B0"})),
                 "stage 0, action 1 (SG0>1): no neighbouring chunk to exchange with", 0, 1);
  schedule s = complete(gpipe(2, 1));
  s.stages[1][1].stage = 0;
  expect_refused(validate(s), "stage 1, action 1 (F0): action names stage 0", 1, 1);
  s = gpipe(1, 1);
  s.stages.push_back({});
  EXPECT_EQ(validate(s).error, "schedule has 2 stage lists for num_stages 1");
  s = gpipe(1, 1);
  s.num_microbatches = 0;
  EXPECT_FALSE(validate(s).ok());
}

TEST(schedules_validate, refuses_repeats_and_missing_work) {
  expect_refused(validate(from_rows(1, {"F0 F0 B0"})),
                 "stage 0, action 1 (F0): forward of microbatch 0 on chunk 0 repeated", 0, 1);
  const validation missing = validate(from_rows(2, {"F0 B0"}));
  EXPECT_EQ(missing.error, "stage 0: microbatch 1 on chunk 0 is never forwarded");
  EXPECT_EQ(missing.stage, 0);
  EXPECT_EQ(missing.action_index, -1);
  EXPECT_EQ(validate(from_rows(2, {"F0 F1 B0"})).error,
            "stage 0: microbatch 1 on chunk 0 is never freed (no backward)");
  EXPECT_TRUE(validate(from_rows(2, {"F0 F1"})).ok()) << "a forward-only schedule is fine";
}

TEST(schedules_validate, checks_the_optimizer_step_and_parameter_residency) {
  expect_refused(validate(from_rows(2, {"F0 B0 R F1 B1 O"})),
                 "stage 0, action 2 (R): reduce_grads before the weight gradient of microbatch 1 "
                 "on chunk 0", 0, 2);
  expect_refused(validate(from_rows(1, {"F0 B0 O R"})),
                 "stage 0, action 2 (O): optimizer_step before reduce_grads", 0, 2);
  EXPECT_TRUE(validate(from_rows(1, {"F0 B0 O"})).ok());
  EXPECT_TRUE(validate(from_rows(1, {"FP F0 RP FP B0 RP O"})).ok());
  expect_refused(validate(from_rows(1, {"FP F0 RP B0"})),
                 "stage 0, action 3 (B0): backward of microbatch 0 on chunk 0 while the chunk's "
                 "parameters are not fetched",
                 0, 3);
  expect_refused(validate(from_rows(1, {"F0 B0 RP"})),
                 "stage 0, action 2 (RP): release_params of chunk 0 without a fetch", 0, 2);
}

TEST(schedules_validate, refuses_a_forward_of_an_unfetched_chunk_naming_the_action) {
  expect_refused(validate(from_rows(2, {"FP0 F0 RP0 F1"})),
                 "stage 0, action 3 (F1): forward of microbatch 1 on chunk 0 while the chunk's "
                 "parameters are not fetched",
                 0, 3);
  // Fetched for another microbatch of the chunk is not fetched for this one.
  expect_refused(validate(from_rows(2, {"FP0 F1 RP0 FP0 F0 RP0"})),
                 "stage 0, action 1 (F1): forward of microbatch 1 on chunk 0 while the chunk's "
                 "parameters are not fetched",
                 0, 1);
  // The pass's output with one fetch taken out: stage 1 runs B1 right after the release of F1.
  schedule s = add_param_fetches(complete(one_f_one_b(2, 2)));
  auto& row1 = s.stages[1];  // FP0 RA0<0 F0 RP0 FP0 B0 RP0 SG0>0 FP1 RA1<0 F1 RP1 FP1 B1 RP1 SG1>0 R O
  ASSERT_EQ(row1[12], parse_action("1FP1"));
  row1.erase(row1.begin() + 12);
  expect_refused(validate(s),
                 "stage 1, action 12 (B1): backward of microbatch 1 on chunk 0 while the chunk's "
                 "parameters are not fetched",
                 1, 12);
}

TEST(schedules_validate, backward_weight_reads_no_weights_and_needs_no_fetch) {
  EXPECT_TRUE(validate(from_rows(1, {"FP0 F0 RP0 FP0 I0 RP0 W0"})).ok());
  expect_refused(validate(from_rows(1, {"FP0 F0 RP0 I0 W0"})),
                 "stage 0, action 3 (I0): backward_input of microbatch 0 on chunk 0 while the chunk's "
                 "parameters are not fetched",
                 0, 3);
}

TEST(schedules_validate, a_chunk_never_fetched_on_its_stage_is_not_checked) {
  // One device, two chunks: chunk 0 is fetched, chunk 1 never is (its parameters stay resident).
  EXPECT_TRUE(validate(from_rows(1, {"FP0 F0 RP0 F0.c1 B0.c1 FP0 B0 RP0"}, 2)).ok());
  expect_refused(validate(from_rows(1, {"FP0 F0 RP0 FP0.c1 F0.c1 RP0.c1 B0.c1 FP0 B0 RP0"}, 2)),
                 "stage 0, action 6 (B0.c1): backward of microbatch 0 on chunk 1 while the chunk's "
                 "parameters are not fetched",
                 0, 6);
}

TEST(schedules_validate, a_fetch_without_a_microbatch_covers_every_microbatch_of_its_chunk) {
  const validation v = validate(from_rows(2, {"FP F0 F1 B0 B1 RP"}));
  EXPECT_TRUE(v.ok()) << v.error;
  EXPECT_EQ(v.peak_fetched, (std::vector<int>{1}));
  expect_refused(validate(from_rows(2, {"FP F0 RP FP0 F1"})),
                 "stage 0, action 4 (F1): forward of microbatch 1 on chunk 0 while the chunk's "
                 "parameters are not fetched",
                 0, 4);
}

TEST(schedules_validate, refuses_a_fetch_issued_twice_without_a_release) {
  expect_refused(validate(from_rows(1, {"FP0 FP0 F0 RP0 RP0"})),
                 "stage 0, action 1 (FP0): fetch_params of microbatch 0 on chunk 0 while action 0 (FP0) "
                 "holds them: fetched twice without a release",
                 0, 1);
  // A chunk-wide fetch and a per-microbatch one of the same chunk overlap, in either order.
  expect_refused(validate(from_rows(1, {"FP FP0 F0 RP0 RP"})),
                 "stage 0, action 1 (FP0): fetch_params of microbatch 0 on chunk 0 while action 0 (FP) "
                 "holds them: fetched twice without a release",
                 0, 1);
  expect_refused(validate(from_rows(2, {"FP1 FP F0 F1 RP RP1"})),
                 "stage 0, action 1 (FP): fetch_params of chunk 0 while action 0 (FP1) holds them: "
                 "fetched twice without a release",
                 0, 1);
  // Fetch, release, fetch again is the pass's own pattern.
  EXPECT_TRUE(validate(from_rows(1, {"FP0 F0 RP0 FP0 B0 RP0"})).ok());
}

TEST(schedules_validate, refuses_a_release_without_its_fetch) {
  expect_refused(validate(from_rows(2, {"FP0 F0 RP1 FP1 F1 RP1"})),
                 "stage 0, action 2 (RP1): release_params of microbatch 1 on chunk 0 without a fetch",
                 0, 2);
  expect_refused(validate(from_rows(1, {"FP F0 RP0 RP"})),
                 "stage 0, action 2 (RP0): release_params of microbatch 0 on chunk 0 without a fetch",
                 0, 2);
}

TEST(schedules_validate, refuses_a_step_that_ends_with_parameters_fetched_naming_the_fetch) {
  expect_refused(validate(from_rows(2, {"FP0 F0 RP0 FP1 F1"})),
                 "stage 0, action 3 (FP1): parameters of microbatch 1 on chunk 0 still fetched when "
                 "the step ends (no release_params)",
                 0, 3);
  // A fetch put in front of each row of a complete schedule and never released.
  schedule s = complete(gpipe(2, 2));
  for (int d = 0; d < 2; ++d) {
    auto& row = s.stages[static_cast<std::size_t>(d)];
    row.insert(row.begin(), action{d, op::fetch_params, -1, 0, -1});
  }
  expect_refused(validate(s),
                 "stage 0, action 0 (FP): parameters of chunk 0 still fetched when the step ends "
                 "(no release_params)",
                 0, 0);
}

TEST(schedules_validate, fetched_peak_of_one_f_one_b_is_one_per_stage) {
  EXPECT_EQ(validate(add_param_fetches(complete(one_f_one_b(4, 8)))).peak_fetched,
            (std::vector<int>{1, 1, 1, 1}));
  for (const schedule& s : {complete(gpipe(3, 4)), complete(interleaved_1f1b(2, 4, 2)), complete(zb_h1(3, 6))}) {
    const validation with = validate(add_param_fetches(s));
    ASSERT_TRUE(with.ok()) << with.error;
    EXPECT_EQ(with.peak_fetched, std::vector<int>(s.stages.size(), 1)) << s.name;
    EXPECT_EQ(with.peak_live_activations, validate(s).peak_live_activations) << s.name;
    EXPECT_EQ(validate(s).peak_fetched, std::vector<int>(s.stages.size(), 0)) << s.name;
  }
}

TEST(schedules_validate, fetched_peak_counts_chunk_and_microbatch_pairs_held_at_once) {
  const validation v = validate(from_rows(2, {"FP0 FP1 F0 F1 RP0 RP1 FP0 FP1 B1 B0 RP1 RP0"}));
  EXPECT_TRUE(v.ok()) << v.error;
  EXPECT_EQ(v.peak_fetched, (std::vector<int>{2}));
  const validation chunks = validate(from_rows(1, {"FP FP.c1 F0 F0.c1 B0.c1 B0 RP.c1 RP"}, 2));
  EXPECT_TRUE(chunks.ok()) << chunks.error;
  EXPECT_EQ(chunks.peak_fetched, (std::vector<int>{2}));
}

}  // namespace
}  // namespace troupe::sched
