// folder_lock (folder_lock.hpp): flock with LOCK_NB, the holder written into the locked file.
#include "storage/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include "storage/input_file.hpp"
#include "storage/output_file.hpp"

namespace troupe::storage {

folder_lock::folder_lock(const std::string& dir, const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / "lock").string();
  fd_ = open_output_file(path, O_RDWR);  // a link planted as `lock` is replaced, not followed
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder;
    try {
      holder = read_input_file(path, "lock file", 4096);
    } catch (const std::exception&) {
    }
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw std::invalid_argument(what + " " + dir + ": in use by another job (" + (holder.empty() ? "its holder unknown" : holder) +
                                  "); two jobs saving into one folder would prune each other's checkpoints");
    throw std::invalid_argument(what + " " + dir + ": cannot lock " + path + " (" + std::strerror(err) + ")");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string text = "pid " + std::to_string(::getpid()) + " on host " + host + ", since " + when + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) < 0) {
    // The lock holds without its note; the next job's error says less, nothing else changes.
  }
}

folder_lock::~folder_lock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace troupe::storage
