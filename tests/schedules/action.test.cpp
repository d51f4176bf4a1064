// Tests of the action text form: canonical spellings, exact round trips in both directions,
// and refusal of every non-canonical or malformed spelling. No schedules are involved here.
#include "schedules/action.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::sched {
namespace {

constexpr op all_ops[] = {op::forward,        op::backward,     op::backward_input,
                          op::backward_weight, op::send_act,     op::recv_act,
                          op::send_grad,       op::recv_grad,    op::reduce_grads,
                          op::fetch_params,    op::release_params, op::optimizer_step};

TEST(schedules_action, spells_each_op_compactly) {
  EXPECT_EQ(to_string(action{1, op::forward, 3, 0, -1}), "1F3");
  EXPECT_EQ(to_string(action{0, op::backward, 0, 0, -1}), "0B0");
  EXPECT_EQ(to_string(action{2, op::backward_input, 5, 1, -1}), "2I5.c1");
  EXPECT_EQ(to_string(action{3, op::backward_weight, 7, 2, -1}), "3W7.c2");
  EXPECT_EQ(to_string(action{0, op::send_act, 3, 0, 1}), "0SA3>1");
  EXPECT_EQ(to_string(action{1, op::recv_act, 3, 0, 0}), "1RA3<0");
  EXPECT_EQ(to_string(action{1, op::send_grad, 2, 0, 0}), "1SG2>0");
  EXPECT_EQ(to_string(action{0, op::recv_grad, 2, 1, 1}), "0RG2<1.c1");
  EXPECT_EQ(to_string(action{0, op::reduce_grads, -1, 0, -1}), "0R");
  EXPECT_EQ(to_string(action{3, op::optimizer_step, -1, 0, -1}), "3O");
  EXPECT_EQ(to_string(action{0, op::fetch_params, -1, 1, -1}), "0FP.c1");
  EXPECT_EQ(to_string(action{12, op::release_params, 4, 0, -1}), "12RP4");
  EXPECT_EQ(body_string(action{12, op::release_params, 4, 0, -1}), "RP4");
}

TEST(schedules_action, every_representable_action_round_trips) {
  int checked = 0;
  for (op kind : all_ops) {
    for (int stage : {0, 1, 10}) {
      for (int microbatch : {-1, 0, 7, 123}) {
        if (microbatch < 0 && needs_microbatch(kind)) continue;
        for (int chunk : {0, 1, 12}) {
          const int peer = is_communication(kind) ? (stage + 1) % 3 : -1;
          const action a{stage, kind, microbatch, chunk, peer};
          const std::string text = to_string(a);
          ASSERT_EQ(parse_action(text), a) << text;
          ASSERT_EQ(to_string(parse_action(text)), text);
          ASSERT_EQ(parse_action(body_string(a), stage), a) << body_string(a);
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 8 * 3 * 3 * 3 + 4 * 3 * 4 * 3);
}

TEST(schedules_action, canonical_strings_parse_back_to_themselves) {
  for (const char* text : {"1F3", "0B0", "2I5.c1", "3W7.c2", "0SA3>1", "1RA3<0", "1SG2>0",
                           "0RG2<1.c1", "0R", "3O", "0FP.c1", "12RP4", "4F10.c10"}) {
    EXPECT_EQ(to_string(parse_action(text)), text);
  }
  const action a = parse_action("1RA3<0.c2");
  EXPECT_EQ(a.stage, 1);
  EXPECT_EQ(a.kind, op::recv_act);
  EXPECT_EQ(a.microbatch, 3);
  EXPECT_EQ(a.chunk, 2);
  EXPECT_EQ(a.peer, 0);
  const action r = parse_action("2R");
  EXPECT_EQ(r.kind, op::reduce_grads);
  EXPECT_EQ(r.microbatch, -1);
  EXPECT_EQ(r.peer, -1);
}

// The ZeRO-3 pass's actions carry a microbatch and a chunk.
TEST(schedules_action, fetch_and_release_of_a_microbatch_on_a_chunk_round_trip) {
  const action fetch{1, op::fetch_params, 3, 1, -1};
  const action release{1, op::release_params, 3, 1, -1};
  EXPECT_EQ(to_string(fetch), "1FP3.c1");
  EXPECT_EQ(body_string(release), "RP3.c1");
  EXPECT_EQ(parse_action("1FP3.c1"), fetch);
  EXPECT_EQ(parse_action("RP3.c1", 1), release);
  EXPECT_THROW(parse_action("1FP3.c0"), std::invalid_argument);
  EXPECT_THROW(parse_action("1FP3>0"), std::invalid_argument);
}

TEST(schedules_action, forward_backward_and_backward_input_read_weights_backward_weight_does_not) {
  std::vector<op> reading;
  for (op kind : all_ops)
    if (reads_weights(kind)) reading.push_back(kind);
  EXPECT_EQ(reading, (std::vector<op>{op::forward, op::backward, op::backward_input}));
}

TEST(schedules_action, refuses_non_canonical_and_malformed_text) {
  const std::vector<std::string> bad = {
      "",       "F3",      "1",       "1X3",   "1F",     "1F03",   "01F3",  "1F3.c0",
      "1F3.c",  "1F3.x1",  "1F3.c01", "1SA3",  "1SA3<2", "1RA3>2", "1F3>2", "1F3 ",
      " 1F3",   "1F-1",    "1RA<2",   "1SA3>", "1R.c",   "1O>1",   "1F3c1", "1F99999999999"};
  for (const std::string& text : bad) {
    EXPECT_THROW(parse_action(text), std::invalid_argument) << '"' << text << '"';
  }
  EXPECT_THROW(parse_action("1F3", 0), std::invalid_argument);  // body form has no stage
  EXPECT_THROW(parse_action("F3", -1), std::invalid_argument);
  try {
    parse_action("1F03");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("\"1F03\""), std::string::npos) << e.what();
  }
}

TEST(schedules_action, classifies_ops) {
  int compute = 0, sends = 0, recvs = 0;
  for (op kind : all_ops) {
    compute += is_compute(kind);
    sends += is_send(kind);
    recvs += is_recv(kind);
    EXPECT_EQ(is_communication(kind), is_send(kind) || is_recv(kind));
    EXPECT_FALSE(to_string(kind).empty());
  }
  EXPECT_EQ(compute, 4);
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(recvs, 2);
  EXPECT_TRUE(is_compute(op::backward_weight));
  EXPECT_FALSE(is_compute(op::optimizer_step));
  EXPECT_EQ(to_string(op::backward_input), "backward_input");
}

}  // namespace
}  // namespace troupe::sched
