// folder_lock: one job at a time in a checkpoint folder. Two jobs saving into one folder would
// prune each other's checkpoints (--keep) and race on `latest`; the second is refused by name.
// An advisory flock(2) on the folder itself, held for the life of the value (the process's, when
// a process is killed), so a stale lock cannot outlive its job and nothing is written into the
// folder for it. The holder is named from /proc/locks where it runs on this host. Where the file
// system takes no flock on a folder (some network file systems), the job says so and goes on
// unguarded.
#pragma once

#include <string>

namespace troupe::storage {

class folder_lock {
 public:
  // Takes the lock on the existing folder `dir`, or throws std::invalid_argument
  // "<what> <dir>: in use by another job (pid P on this host)" at once, without waiting.
  folder_lock(const std::string& dir, const std::string& what);
  ~folder_lock();
  folder_lock(const folder_lock&) = delete;
  folder_lock& operator=(const folder_lock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace troupe::storage
