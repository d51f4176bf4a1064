// auth_acceptor under a flood: every stranger is refused, but the log gets a burst of lines and
// then one count instead of a line per connection (log_limiter.hpp), so 100,000 connections no
// longer write 10 MB of errors.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/auth_acceptor.hpp"
#include "comm/log_limiter.hpp"
#include "comm/tcp_socket.hpp"

using namespace troupe::net;

TEST(LogLimiter, LogsABurstPerWindowThenCountsTheRestAndReportsThemOnceTheWindowEnds) {
  log_limiter limit(3, std::chrono::seconds(10));
  const auto t0 = log_limiter::clock_type::now();
  int allowed = 0;
  for (int i = 0; i < 10; ++i) allowed += limit.allow(t0) ? 1 : 0;
  EXPECT_EQ(allowed, 3);
  EXPECT_EQ(limit.take_suppressed(t0), 0) << "the window has not ended";
  const auto t1 = t0 + std::chrono::seconds(11);
  EXPECT_EQ(limit.take_suppressed(t1), 7);
  EXPECT_EQ(limit.take_suppressed(t1), 0) << "reported once";
  EXPECT_TRUE(limit.allow(t1)) << "a new window logs again";
  for (int i = 0; i < 5; ++i) limit.allow(t1);
  EXPECT_EQ(limit.take_all(), 3) << "the current window's count, at the end";
}

TEST(AuthAcceptor, AFloodOfStrangersIsRefusedOneByOneButLoggedAsABurstAndACount) {
  auto out = std::make_shared<std::ostringstream>();
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("flood", std::make_shared<spdlog::sinks::ostream_sink_mt>(*out)));
  constexpr int strangers = 300;
  {
    auth_acceptor gate(listen_tcp("127.0.0.1", 0), "the job's secret", "gate", 2000);
    std::vector<char> garbage(68, 'x');
    for (int i = 0; i < strangers; ++i) {
      socket_fd c = connect_tcp("127.0.0.1", gate.port(), 2000);
      write_all(c.get(), garbage.data(), garbage.size(), 2000, "garbage");
    }  // each closes after its garbage
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (gate.refused() < strangers && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(gate.refused(), strangers) << "every stranger refused";
  }  // the acceptor closes: what it did not log is counted
  spdlog::set_default_logger(previous);
  const std::string log = out->str();
  int lines = 0;
  for (char ch : log) lines += ch == '\n' ? 1 : 0;
  EXPECT_LE(lines, 21 + 1) << "a line per stranger:\n" << log.substr(0, 2000);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("refused ([0-9]+) more connections"))) << log.substr(0, 2000);
  EXPECT_EQ(std::stoi(m[1]), strangers - 20) << "the count and the lines cover every stranger";
}
