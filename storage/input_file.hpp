// input_file: the one way troupe reads a file it was given (a configuration, a schedule, a plan
// or stress file, a corpus, a dataset). Only a regular file is read: a FIFO would block forever
// and /dev/zero or /dev/urandom never end, so each is refused by name before a byte is read (the
// open itself never blocks: O_NONBLOCK, then checked on the descriptor). Its size is bounded by a
// limit the error names, so an oversized file fails at once instead of at bad_alloc.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace troupe::storage {

// A file that cannot be read as an input: missing, not a regular file, or too large. The message
// starts with what the file is for and its path: "config /dev/zero: not a regular file (a
// character device)".
class input_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The limits: a text file of settings, and a corpus or dataset file.
inline constexpr uint64_t settings_file_limit = uint64_t{16} << 20;
inline constexpr uint64_t data_file_limit = uint64_t{8} << 30;

// A read-only descriptor of the regular file at path, no larger than max_bytes (the caller
// closes it). `what` names the file's use in errors ("config", "schedule file", "corpus").
int open_input_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// The whole file, read through open_input_file.
std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// "16.0 MiB": a byte count as the errors show it.
std::string input_size(uint64_t bytes);

}  // namespace troupe::storage
