// Tests of the schedule type: chunk layout arithmetic, message keys, the text form's exact
// round trip and its error messages, and the golden files under golden/ (complete schedules of
// each builder, and small ones with the ZeRO-3 fetches). Set TROUPE_UPDATE_GOLDEN=1 to rewrite
// the goldens, then review the git diff.
#include "schedules/schedule.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "schedules/builders.hpp"
#include "schedules/passes.hpp"

namespace troupe::sched {
namespace {

TEST(schedules_schedule, chunk_layout_is_megatrons) {
  schedule s;
  s.num_stages = 4;
  s.virtual_stages = 3;
  EXPECT_EQ(num_model_chunks(s), 12);
  EXPECT_EQ(model_chunk(s, 1, 0), 1);
  EXPECT_EQ(model_chunk(s, 1, 2), 9);  // device 1 holds model chunks 1, 5, 9
  EXPECT_EQ(stage_of(s, 9), 1);
  EXPECT_EQ(chunk_of(s, 9), 2);
  // Activation out of device 3's chunk 0 (model chunk 3) goes to device 0's chunk 1.
  EXPECT_EQ(expected_peer(s, action{3, op::send_act, 0, 0, 0}), 0);
  EXPECT_EQ(expected_peer(s, action{0, op::recv_act, 0, 1, 3}), 3);
  EXPECT_EQ(key_of(s, action{3, op::send_act, 5, 0, 0}), key_of(s, action{0, op::recv_act, 5, 1, 3}));
  EXPECT_EQ(key_of(s, action{0, op::send_grad, 5, 1, 3}), key_of(s, action{3, op::recv_grad, 5, 0, 0}));
  EXPECT_FALSE(key_of(s, action{3, op::send_act, 5, 0, 0}) == key_of(s, action{3, op::recv_grad, 5, 0, 0}));
  EXPECT_EQ(expected_peer(s, action{3, op::send_act, 0, 2, 0}), -1);  // last model chunk
  EXPECT_EQ(expected_peer(s, action{0, op::recv_act, 0, 0, 1}), -1);  // first model chunk
}

TEST(schedules_schedule, text_form_is_exact) {
  const schedule s = complete(one_f_one_b(2, 2));
  const std::string text = to_string(s);
  EXPECT_EQ(text,
            "schedule 1f1b stages=2 microbatches=2 virtual=1\n"
            "stage 0: F0 SA0>1 F1 SA1>1 RG0<1 B0 RG1<1 B1 R O\n"
            "stage 1: RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 R O\n");
  EXPECT_EQ(parse_schedule(text), s);
}

TEST(schedules_schedule, every_builder_round_trips_through_text) {
  for (int P = 1; P <= 4; ++P) {
    for (int M : {1, 4, 8}) {
      std::vector<schedule> all = {gpipe(P, M), one_f_one_b(P, M), zb_h1(P, M)};
      if (M % P == 0) all.push_back(interleaved_1f1b(P, M, 3));
      for (const schedule& compute_only : all) {
        for (const schedule& s : {compute_only, complete(compute_only), add_param_fetches(complete(compute_only))}) {
          const std::string text = to_string(s);
          ASSERT_EQ(parse_schedule(text), s) << text;
          ASSERT_EQ(to_string(parse_schedule(text)), text);
        }
      }
    }
  }
}

TEST(schedules_schedule, empty_stage_rows_round_trip) {
  schedule s;
  s.name = "empty";
  s.num_stages = 2;
  s.stages.resize(2);
  EXPECT_EQ(to_string(s), "schedule empty stages=2 microbatches=1 virtual=1\nstage 0:\nstage 1:\n");
  EXPECT_EQ(parse_schedule(to_string(s)), s);
}

void expect_parse_error(const std::string& text, const std::string& fragment) {
  try {
    parse_schedule(text);
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(schedules_schedule, parse_errors_name_the_line) {
  const std::string header = "schedule x stages=2 microbatches=1 virtual=1\n";
  expect_parse_error("", "line 1: empty text");
  expect_parse_error("schedule x stages=1 microbatches=1 virtual=1", "missing final newline");
  expect_parse_error("plan x stages=1 microbatches=1 virtual=1\nstage 0:\n", "line 1");
  expect_parse_error("schedule x stages=01 microbatches=1 virtual=1\nstage 0:\n", "bad number");
  expect_parse_error(header + "stage 0: F0\n", "expected 2 stage lines");
  expect_parse_error(header + "stage 0: F0\nstage 2: F0\n", "line 3: expected \"stage 1:\"");
  expect_parse_error(header + "stage 0: F0  B0\nstage 1:\n", "line 2: empty action");
  expect_parse_error(header + "stage 0: F0\nstage 1: F0 X1\n", "line 3: parse_action: \"X1\"");
  expect_parse_error(header + "stage 0:F0\nstage 1:\n", "expected a space");
  expect_parse_error(header + "stage 0: F0 \nstage 1:\n", "empty action");
}

// Golden schedules: the complete step of each builder, as committed text.
std::string golden_path(const std::string& name) {
  return std::string(TROUPE_SCHEDULES_GOLDEN_DIR) + "/" + name + ".txt";
}

void expect_golden(const std::string& name, const schedule& s) {
  const std::string actual = to_string(s);
  if (std::getenv("TROUPE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(golden_path(name)) << actual;
    GTEST_SKIP() << "rewrote " << golden_path(name);
  }
  std::ifstream in(golden_path(name));
  ASSERT_TRUE(in) << "missing " << golden_path(name) << " (run with TROUPE_UPDATE_GOLDEN=1)";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string expected = buffer.str();
  EXPECT_EQ(parse_schedule(expected), s) << "golden " << name << " differs; actual:\n" << actual;
  EXPECT_EQ(expected, actual);
}

TEST(schedules_golden, gpipe_p4_m8) { expect_golden("gpipe_p4_m8", complete(gpipe(4, 8))); }
TEST(schedules_golden, one_f_one_b_p4_m8) {
  expect_golden("1f1b_p4_m8", complete(one_f_one_b(4, 8)));
}
TEST(schedules_golden, interleaved_1f1b_p4_m8_v2) {
  expect_golden("interleaved_1f1b_p4_m8_v2", complete(interleaved_1f1b(4, 8, 2)));
}
TEST(schedules_golden, zb_h1_p4_m8) { expect_golden("zb_h1_p4_m8", complete(zb_h1(4, 8))); }

// The ZeRO-3 step: the complete schedule with every F, B and I bracketed by FP and RP.
TEST(schedules_golden, gpipe_p1_m2_fetch) {
  expect_golden("gpipe_p1_m2_fetch", add_param_fetches(complete(gpipe(1, 2))));
}
TEST(schedules_golden, one_f_one_b_p2_m4_fetch) {
  expect_golden("1f1b_p2_m4_fetch", add_param_fetches(complete(one_f_one_b(2, 4))));
}
TEST(schedules_golden, interleaved_1f1b_p2_m4_v2_fetch) {
  expect_golden("interleaved_1f1b_p2_m4_v2_fetch", add_param_fetches(complete(interleaved_1f1b(2, 4, 2))));
}
TEST(schedules_golden, zb_h1_p2_m4_fetch) {
  expect_golden("zb_h1_p2_m4_fetch", add_param_fetches(complete(zb_h1(2, 4))));
}

}  // namespace
}  // namespace troupe::sched
