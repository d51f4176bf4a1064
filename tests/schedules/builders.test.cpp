// Tests of the builders: exact per-stage orders for small cases, that every builder does each
// microbatch's forward and backward exactly once per chunk, that argument errors name the
// argument, and that the complete step of every builder validates over P in 1..8, M in 1..16.
#include "schedules/builders.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "schedules/passes.hpp"
#include "schedules/validate.hpp"

namespace troupe::sched {
namespace {

// One stage's compute list written in the text form, for compact expectations.
std::string row(const schedule& s, int stage) {
  std::string out;
  for (const action& a : s.stages[static_cast<std::size_t>(stage)])
    out += (out.empty() ? "" : " ") + body_string(a);
  return out;
}

TEST(schedules_builders, gpipe_runs_all_forwards_then_all_backwards) {
  const schedule s = gpipe(2, 3);
  EXPECT_EQ(s.name, "gpipe");
  EXPECT_EQ(s.num_stages, 2);
  EXPECT_EQ(s.num_microbatches, 3);
  EXPECT_EQ(s.virtual_stages, 1);
  EXPECT_EQ(row(s, 0), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(row(s, 1), "F0 F1 F2 B0 B1 B2");
}

TEST(schedules_builders, one_f_one_b_warms_up_then_alternates) {
  const schedule s = one_f_one_b(4, 8);
  EXPECT_EQ(s.name, "1f1b");
  EXPECT_EQ(row(s, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(row(s, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(row(s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  // Fewer microbatches than stages: the warm-up is capped at M.
  EXPECT_EQ(row(one_f_one_b(4, 2), 0), "F0 F1 B0 B1");
}

TEST(schedules_builders, interleaved_follows_megatrons_group_order) {
  const schedule s = interleaved_1f1b(2, 4, 2);
  EXPECT_EQ(s.name, "interleaved_1f1b");
  EXPECT_EQ(s.virtual_stages, 2);
  // Device 0: warm-up (2-1-0)*2 + (2-1)*2 = 4 forwards, groups of 2 microbatches per chunk.
  EXPECT_EQ(row(s, 0), "F0 F1 F0.c1 F1.c1 F2 B0.c1 F3 B1.c1 F2.c1 B0 F3.c1 B1 B2.c1 B3.c1 B2 B3");
  // Device 1: warm-up (2-1-1)*2 + 2 = 2 forwards.
  EXPECT_EQ(row(s, 1), "F0 F1 F0.c1 B0.c1 F1.c1 B1.c1 F2 B0 F3 B1 F2.c1 B2.c1 F3.c1 B3.c1 B2 B3");
}

TEST(schedules_builders, zb_h1_defers_up_to_stage_index_weight_halves) {
  const schedule s = zb_h1(4, 6);
  EXPECT_EQ(s.name, "zb_h1");
  // The last stage (3) lets three W wait; stage 0 none.
  EXPECT_EQ(row(s, 0), "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 I3 W3 I4 W4 I5 W5");
  EXPECT_EQ(row(s, 1), "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 I4 W3 I5 W4 W5");
  EXPECT_EQ(row(s, 3), "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 W3 W4 W5");
}

// Every builder does, on each stage and chunk, one forward and one full backward (or one
// backward_input and one backward_weight) per microbatch and nothing else.
void expect_each_unit_once(const schedule& s) {
  for (int d = 0; d < s.num_stages; ++d) {
    std::map<std::pair<int, int>, std::map<op, int>> seen;
    for (const action& a : s.stages[static_cast<std::size_t>(d)]) {
      ASSERT_EQ(a.stage, d);
      ASSERT_TRUE(is_compute(a.kind)) << a;
      ASSERT_EQ(a.peer, -1);
      ++seen[{a.microbatch, a.chunk}][a.kind];
    }
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(s.num_microbatches * s.virtual_stages));
    for (const auto& [unit, counts] : seen) {
      const bool split = counts.count(op::backward_input) > 0;
      EXPECT_EQ(counts.at(op::forward), 1);
      EXPECT_EQ(counts.size(), split ? 3u : 2u) << s.name << " stage " << d;
      EXPECT_EQ(counts.at(split ? op::backward_weight : op::backward), 1);
    }
  }
}

TEST(schedules_builders, every_unit_forwarded_and_backwarded_once) {
  for (int P = 1; P <= 5; ++P) {
    for (int M = 1; M <= 10; ++M) {
      expect_each_unit_once(gpipe(P, M));
      expect_each_unit_once(one_f_one_b(P, M));
      expect_each_unit_once(zb_h1(P, M));
      for (int v = 1; v <= 3 && M % P == 0; ++v) expect_each_unit_once(interleaved_1f1b(P, M, v));
    }
  }
}

void expect_invalid(const std::function<void()>& build, const std::string& fragment) {
  try {
    build();
    ADD_FAILURE() << "no exception; expected one naming " << fragment;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(schedules_builders, bad_arguments_name_the_argument) {
  expect_invalid([] { gpipe(0, 4); }, "gpipe: num_stages must be >= 1, got 0");
  expect_invalid([] { gpipe(2, 0); }, "gpipe: num_microbatches must be >= 1, got 0");
  expect_invalid([] { one_f_one_b(-1, 4); }, "one_f_one_b: num_stages");
  expect_invalid([] { one_f_one_b(4, -3); }, "one_f_one_b: num_microbatches");
  expect_invalid([] { zb_h1(0, 4); }, "zb_h1: num_stages");
  expect_invalid([] { zb_h1(4, 0); }, "zb_h1: num_microbatches");
  expect_invalid([] { interleaved_1f1b(0, 4, 2); }, "interleaved_1f1b: num_stages");
  expect_invalid([] { interleaved_1f1b(2, 0, 2); }, "interleaved_1f1b: num_microbatches");
  expect_invalid([] { interleaved_1f1b(2, 4, 0); }, "interleaved_1f1b: virtual_stages");
  expect_invalid([] { interleaved_1f1b(4, 6, 2); },
                 "num_microbatches (6) must be a multiple of num_stages (4)");
}

TEST(schedules_builders, complete_schedules_validate_for_all_small_shapes) {
  int checked = 0;
  for (int P = 1; P <= 8; ++P) {
    for (int M = 1; M <= 16; ++M) {
      std::vector<schedule> all = {gpipe(P, M), one_f_one_b(P, M), zb_h1(P, M)};
      for (int v = 1; v <= 4 && M % P == 0; ++v) all.push_back(interleaved_1f1b(P, M, v));
      for (const schedule& s : all) {
        const validation result = validate(complete(s));
        ASSERT_TRUE(result.ok()) << s.name << " P=" << P << " M=" << M
                                 << " v=" << s.virtual_stages << ": " << result.error;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 8 * 16 * 3 + 4 * (16 + 8 + 5 + 4 + 3 + 2 + 2 + 2));
}

}  // namespace
}  // namespace troupe::sched
