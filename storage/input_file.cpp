// input_file (input_file.hpp): stat-free checks on the opened descriptor.
#include "storage/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace troupe::storage {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

std::string input_size(uint64_t bytes) {
  char text[32];
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (uint64_t{1} << 20)) std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  return text;
}

int open_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const std::string named = what + " " + path + ": ";
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw input_error(named + "cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw input_error(named + "cannot read its size (" + std::strerror(e) + ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw input_error(named + "not a regular file (" + kind_of(st.st_mode) + ")");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw input_error(named + input_size(static_cast<uint64_t>(st.st_size)) + ", over the " + input_size(max_bytes) +
                      " a " + what + " may have");
  }
  // Reads block as usual from here (O_NONBLOCK means nothing for a regular file, but clear it).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const int fd = open_input_file(path, what, max_bytes);
  std::string text;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw input_error(what + " " + path + ": cannot read (" + std::strerror(e) + ")");
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) {  // it grew while being read
      ::close(fd);
      throw input_error(what + " " + path + ": grew past the " + input_size(max_bytes) + " a " + what + " may have");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace troupe::storage
