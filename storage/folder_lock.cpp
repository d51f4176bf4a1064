// folder_lock (folder_lock.hpp): flock with LOCK_NB on an O_DIRECTORY descriptor.
#include "storage/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "storage/input_file.hpp"

namespace troupe::storage {

namespace {

// The pid holding a flock on the folder (/proc/locks: "1: FLOCK ADVISORY WRITE <pid>
// <major>:<minor>:<inode> 0 EOF", major and minor in hex), or -1 when none on this host is seen.
long holder_of(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return -1;
  std::string locks;
  try {
    locks = read_input_file("/proc/locks", "lock table", 16 << 20);
  } catch (const std::exception&) {
    return -1;
  }
  std::istringstream in(locks);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string n, kind, mode, access, pid, where;
    if (!(f >> n >> kind >> mode >> access >> pid >> where) || kind != "FLOCK") continue;
    unsigned major = 0, minor = 0;
    unsigned long inode = 0;
    if (std::sscanf(where.c_str(), "%x:%x:%lu", &major, &minor, &inode) == 3 && major == ::major(st.st_dev) &&
        minor == ::minor(st.st_dev) && inode == st.st_ino)
      return std::atol(pid.c_str());
  }
  return -1;
}

}  // namespace

folder_lock::folder_lock(const std::string& dir, const std::string& what) {
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) throw std::invalid_argument(what + " " + dir + ": cannot open it to lock (" + std::strerror(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  const int err = errno;
  if (err == EWOULDBLOCK) {
    const long pid = holder_of(fd_);
    ::close(fd_);
    fd_ = -1;
    throw std::invalid_argument(what + " " + dir + ": in use by another job (" +
                                (pid > 0 ? "pid " + std::to_string(pid) + " on this host" : "a process on another host") +
                                "); two jobs saving into one folder would prune each other's checkpoints");
  }
  spdlog::warn("{} {}: its file system takes no lock on a folder ({}): a second job given it is not refused", what, dir,
               std::strerror(err));
}

folder_lock::~folder_lock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace troupe::storage
