// Test fixture for message serialization: an actor system with troupe's message types, and
// round_trip(x), which serializes x with CAF's binary serializer, deserializes it, and checks
// that the result serializes to the same bytes again.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "actors/messages.hpp"

namespace troupe::test {

struct round_trip_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  round_trip_fixture() {
    add_message_types(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  template <class T>
  std::vector<char> to_bytes(T x) {
    std::vector<char> buf;
    caf::binary_serializer sink{*sys, buf};
    EXPECT_EQ(sink(x), caf::none);
    return buf;
  }

  template <class T>
  T round_trip(const T& x) {
    auto bytes = to_bytes(x);
    T y;
    caf::binary_deserializer source{*sys, bytes};
    EXPECT_EQ(source(y), caf::none);
    EXPECT_EQ(to_bytes(y), bytes) << "re-serialized bytes differ";
    return y;
  }
};

}  // namespace troupe::test
