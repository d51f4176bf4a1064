// metrics_log: a step's line is on disk once it is logged (a killed run loses no finished step);
// a write that fails (here RLIMIT_FSIZE, as a full disk would) throws naming the file, the step
// and the system's reason, and leaves only whole lines.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/observe/metrics_log.hpp"

namespace fs = std::filesystem;
using troupe::metrics_log;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const char* name) {
  const fs::path d = fs::temp_directory_path() / (std::string("troupe_metrics_log_") + name + "_" +
                                                  std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST(MetricsLog, EveryLoggedStepIsAWholeLineOnDiskAtOnce) {
  const fs::path d = fresh_dir("flush");
  metrics_log log(d.string(), 100, 1, /*progress=*/false);
  for (int64_t s = 0; s < 7; ++s) log.step(s, 0, 1.5, 1000.0);
  const std::string text = slurp(log.path());  // read while the log is still open
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 7);
  EXPECT_EQ(text.back(), '\n');
  fs::remove_all(d);
}

TEST(MetricsLog, AFailedWriteNamesFileStepAndReasonAndLeavesOnlyWholeLines) {
  const fs::path d = fresh_dir("full");
  metrics_log log(d.string(), 1000, 1, /*progress=*/false);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto* old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 1000;  // about 14 lines, the last one cut mid-way by a short write
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  int64_t failed_at = -1;
  for (int64_t s = 0; s < 100 && failed_at < 0; ++s) {
    try {
      log.step(s, 0, 2.25, 12345.6);
    } catch (const std::runtime_error& e) {
      error = e.what();
      failed_at = s;
    }
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_GT(failed_at, 0);
  EXPECT_NE(error.find(log.path()), std::string::npos) << error;
  EXPECT_NE(error.find("step " + std::to_string(failed_at)), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(EFBIG)), std::string::npos) << error;
  const std::string text = slurp(log.path());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the file ends mid-line";
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), failed_at);
  fs::remove_all(d);
}

TEST(MetricsLog, AnOutputFileThatCannotBeWrittenIsNamedWithTheReason) {
  try {
    troupe::write_text_file("/nonexistent/dir/trace.json", "{}");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/trace.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(std::strerror(ENOENT)), std::string::npos);
  }
}
