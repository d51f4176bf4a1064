// The parameter servers' log lines are read from their records: the staleness figures are the
// records' maxima and mean, the held answers their count, the batches per replica the
// dispenser's; a job without servers says nothing about them.
#include <gtest/gtest.h>

#include "actors/observe/server_report.hpp"

namespace troupe {
namespace {

TEST(ServerReport, FiguresAreTheRecordsMaximaMeanAndCounts) {
  train_config cfg;
  cfg.mesh.dp = 2;
  cfg.consistency = consistency_model::ssp;
  cfg.staleness = 2;
  train_summary sum;
  //                       server replica step unit read applied slowest held
  sum.server_updates.push_back({0, 0, 0, 0, 0, 0, 0, false});
  sum.server_updates.push_back({0, 1, 0, 1, 0, 1, 0, false});
  sum.server_updates.push_back({1, 0, 3, 6, 2, 6, 1, true});  // 4 updates old, 2 rounds ahead
  sum.dispensed = {{0, 0, 0}, {1, 0, 1}, {0, 1, 2}};
  EXPECT_EQ(summarize_servers(cfg, sum),
            "parameter servers: 3 pushes applied by 2 servers; a push's parameters were up to 4 updates old (mean 1.7) "
            "and up to 2 rounds ahead of the rounds complete (bound 2); 1 answer held back by the bound; batches per "
            "replica: 2, 1");
  EXPECT_NE(describe_servers(cfg).find("ssp: a replica's parameters may miss at most the last 2 rounds' updates"),
            std::string::npos);
  EXPECT_NE(describe_servers(cfg).find("1 server (1 per pipeline stage and tp rank, each a key range) in this process"),
            std::string::npos);
}

TEST(ServerReport, AJobWithoutServersSaysNothingOfThem) {
  train_config cfg;
  train_summary sum;
  sum.server_updates.push_back({0, 0, 0, -1, 0, 0, 0, false});
  EXPECT_EQ(describe_servers(cfg), "");
  EXPECT_EQ(summarize_servers(cfg, sum), "");
}

}  // namespace
}  // namespace troupe
