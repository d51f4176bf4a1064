// The NCCL engine's checks that need no GPU, so they run wherever CUDA is built (CI included):
// which groups it refuses, and an id that is not NCCL's, both named before NCCL is called.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/nccl_group.hpp"
#include "comm/tcp_socket.hpp"

namespace troupe::net {
namespace {

TEST(NcclEngine, RefusesAGroupWithTwoMembersOnOneGpuNamingTheGpuAndTheMembers) {
  const std::shared_ptr<device_group_engine> engine = nccl_engine();
  EXPECT_EQ(engine->name(), "nccl");
  EXPECT_EQ(engine->refuses({0, 1, 2, 3}), "");
  EXPECT_EQ(engine->refuses({3}), "");
  EXPECT_EQ(engine->refuses({0, 1, 1}), "NCCL takes one member per GPU: cuda:1 holds members 1 and 2");
  EXPECT_EQ(engine->refuses({7, 7}), "NCCL takes one member per GPU: cuda:7 holds members 0 and 1");
  EXPECT_TRUE(engine->one_group_per_device());
}

TEST(NcclEngine, AJoinWithAnIdThatIsNotNcclsIsRefusedNamingItsLength) {
  try {
    nccl_engine()->join("not an id", 0, 2, 0);
    FAIL() << "no exception";
  } catch (const net_error& e) {
    EXPECT_NE(std::string(e.what()).find("not 9"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace troupe::net
