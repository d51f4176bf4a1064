// Schedules by name (schedules/named.hpp): every built-in name round-trips through its enum, a
// named schedule is exactly its builder completed by the passes (with the ZeRO-3 pass for the
// _with_fetches form), and bad requests are refused
// with the message users see.
#include <gtest/gtest.h>

#include <stdexcept>

#include "schedules/builders.hpp"
#include "schedules/named.hpp"
#include "schedules/passes.hpp"

namespace troupe::sched {
namespace {

TEST(schedules_named, every_builder_name_round_trips) {
  for (builder b : {builder::gpipe, builder::one_f_one_b, builder::interleaved, builder::zb_h1}) {
    const auto back = parse_builder(to_string(b));
    ASSERT_TRUE(back.has_value()) << to_string(b);
    EXPECT_EQ(*back, b);
  }
  EXPECT_FALSE(parse_builder("1F1B").has_value());
  EXPECT_EQ(known_builders(), "gpipe, 1f1b, interleaved, zb-h1");
}

TEST(schedules_named, a_named_schedule_is_its_builder_completed) {
  EXPECT_EQ(make_named_schedule("gpipe", 2, 4, 1), complete(gpipe(2, 4)));
  EXPECT_EQ(make_named_schedule("1f1b", 4, 8, 1), complete(one_f_one_b(4, 8)));
  EXPECT_EQ(make_named_schedule("interleaved", 2, 4, 2), complete(interleaved_1f1b(2, 4, 2)));
  EXPECT_EQ(make_named_schedule("zb-h1", 3, 6, 1), complete(zb_h1(3, 6)));
}

TEST(schedules_named, a_named_schedule_with_fetches_is_its_completed_builder_with_the_zero3_pass) {
  EXPECT_EQ(make_named_schedule_with_fetches("gpipe", 1, 2, 1), add_param_fetches(complete(gpipe(1, 2))));
  EXPECT_EQ(make_named_schedule_with_fetches("1f1b", 4, 8, 1), add_param_fetches(complete(one_f_one_b(4, 8))));
  EXPECT_EQ(make_named_schedule_with_fetches("interleaved", 2, 4, 2),
            add_param_fetches(complete(interleaved_1f1b(2, 4, 2))));
  EXPECT_EQ(make_named_schedule_with_fetches("zb-h1", 3, 6, 1), add_param_fetches(complete(zb_h1(3, 6))));
  EXPECT_THROW(make_named_schedule_with_fetches("pipedream", 2, 4, 1), std::invalid_argument);
}

std::string refusal(const std::string& name, int P, int M, int v) {
  try {
    make_named_schedule(name, P, M, v);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(schedules_named, bad_requests_are_refused_with_the_reason) {
  EXPECT_EQ(refusal("pipedream", 2, 4, 1), "unknown schedule \"pipedream\" (known: gpipe, 1f1b, interleaved, zb-h1)");
  EXPECT_NE(refusal("interleaved", 2, 3, 2).find("is not a multiple of --pp 2"), std::string::npos);
  EXPECT_NE(refusal("1f1b", 0, 4, 1).find("--pp must be >= 1"), std::string::npos);
  EXPECT_NE(refusal("1f1b", 2, 0, 1).find("--micro-batches must be >= 1"), std::string::npos);
}

}  // namespace
}  // namespace troupe::sched
