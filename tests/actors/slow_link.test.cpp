// The slow-link detector names the data-parallel ring link that delivers far slower than its
// group's others, from the first-hop rates the ranks' records carry: the link into the rank to
// the right of the slow sender, named once per change with both rates; a link slow only now and
// then, or a group whose links are all alike (however slow), names none.
#include <gtest/gtest.h>

#include "actors/observe/slow_link.hpp"

using namespace troupe;

namespace {

// One step of a mesh of rate.size() ranks: rank r's collectives' first hops came in at rate[r]
// bytes/s, over two buckets.
std::vector<stage_step_record> step(const std::vector<double>& rate) {
  std::vector<stage_step_record> out(rate.size());
  for (size_t r = 0; r < rate.size(); ++r) {
    out[r].rank = static_cast<int>(r);
    out[r].bucket_left_rate.assign(2, rate[r]);
  }
  return out;
}

sched::mesh dp4() { return sched::mesh{4, 1, 1}; }

slow_rank_options options() {
  slow_rank_options o;
  o.window = 20;
  o.warmup = 2;
  return o;
}

}  // namespace

TEST(SlowLink, NamesTheLinkIntoTheRankRightOfTheSlowSenderOnceWithBothRatesAndWhenItRecovers) {
  slow_link_detector d(dp4(), options());
  std::vector<std::string> lines;
  // Rank 2 sends to rank 3 at 20 MB/s, the other links at 2 GB/s; from step 40 it is healthy.
  for (int s = 0; s < 60; ++s) {
    const double slow = s < 40 ? 20e6 : 2e9;
    const std::string line = d.add(step({2e9, 2.1e9, 1.9e9, slow}));
    if (!line.empty()) lines.push_back(std::to_string(s) + ": " + line);
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "21: slow link: rank 2's ring sends to rank 3 arrive at 20.0 MB/s against 2000.0 MB/s on its "
                      "data-parallel group's other links, in 20 of the last 20 steps: the group's all-reduces wait on it");
  EXPECT_EQ(lines[1], "42: slow link: none any more (every data-parallel link delivers at its group's rate)");
}

TEST(SlowLink, ALinkSlowNowAndThenOrAGroupOfEquallySlowLinksNamesNone) {
  slow_link_detector d(dp4(), options());
  for (int s = 0; s < 60; ++s) {
    EXPECT_EQ(d.add(step({2e9, 2e9, s % 3 == 0 ? 20e6 : 2e9, 2e9})), "") << s;  // a third of the steps
    EXPECT_EQ(d.current().to, -1);
  }
  slow_link_detector alike(dp4(), options());
  for (int s = 0; s < 60; ++s) EXPECT_EQ(alike.add(step({20e6, 21e6, 19e6, 20e6})), "") << s;  // all slow: no outlier
}

TEST(SlowLink, RanksWithoutMeasuredRatesAndOneRankGroupsAreNotJudged) {
  slow_link_detector d(dp4(), options());
  for (int s = 0; s < 60; ++s) EXPECT_EQ(d.add(step({0, 0, 0, 0})), "");  // MPI, Gloo, NCCL: no rate
  sched::mesh one;
  slow_link_detector single(one, options());
  for (int s = 0; s < 60; ++s) EXPECT_EQ(single.add(step({2e9, 2e9, 2e9, 20e6})), "");
}
