// output_file (output_file.hpp): O_NOFOLLOW, and a link found there unlinked.
#include "storage/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace troupe::storage {

namespace {

[[noreturn]] void cannot_write(const std::string& path, int err) {
  throw std::runtime_error(path + ": cannot write (" + std::strerror(err) + ")");
}

}  // namespace

bool write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

int open_output_file(const std::string& path, int flags, mode_t mode) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) return fd;
    const int err = errno;
    struct stat st {};
    // O_NOFOLLOW on a link fails with ELOOP: remove the link (not what it points to), then create.
    if (err == ELOOP && attempt == 0 && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      if (::unlink(path.c_str()) != 0) cannot_write(path, errno);
      continue;
    }
    cannot_write(path, err);
  }
  cannot_write(path, ELOOP);
}

void check_writable_folder(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::invalid_argument(what + " " + dir + ": cannot create it (" + ec.message() + ")");
  const std::string probe = (std::filesystem::path(dir) / (".troupe-write-check-" + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::invalid_argument(what + " " + dir + ": cannot write there (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
}

void write_output_file(const std::string& path, const std::string& text) {
  static std::atomic<unsigned> serial{0};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) cannot_write(path, errno);
  bool ok = write_all(fd, text);
  int err = errno;
  if (::close(fd) != 0 && ok) ok = false, err = errno;
  if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return;  // rename replaces a link, never follows it
  if (ok) err = errno;
  ::unlink(tmp.c_str());
  cannot_write(path, err);
}

}  // namespace troupe::storage
