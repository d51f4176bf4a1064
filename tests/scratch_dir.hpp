// A test's scratch folder under the system's temporary directory. ctest runs every gtest case in a
// process of its own, two at a time, so cases that share a name for their folder (a single-device
// reference computed by several cases) would move each other's files aside mid-run: the process id
// in the name keeps each process to its own.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace troupe::test_support {

inline std::filesystem::path scratch_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()));
}

}  // namespace troupe::test_support
