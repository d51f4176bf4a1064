// output_file (output_file.hpp): what is at the path decides; O_NOFOLLOW, and a link found there
// unlinked.
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

[[noreturn]] void cannot_write(const std::string& path, const std::string& why) {
  throw std::runtime_error(path + ": cannot write (" + why + ")");
}

[[noreturn]] void cannot_write(const std::string& path, int err) { cannot_write(path, std::strerror(err)); }

// What is at a path, for a writer: nothing or a file to replace, a link to replace, something to
// write in place, or something no file may take the place of.
enum class occupant { none, file, link, in_place, refused };

struct found {
  occupant kind = occupant::none;
  std::string what;  // for refused: "a directory"
};

found at_path(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};  // missing, or its folder is: the open says which
  if (S_ISREG(st.st_mode)) return {occupant::file, ""};
  if (S_ISLNK(st.st_mode)) return {occupant::link, ""};
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return {occupant::in_place, ""};
  if (S_ISDIR(st.st_mode)) return {occupant::refused, "a folder"};
  if (S_ISSOCK(st.st_mode)) return {occupant::refused, "a socket"};
  if (S_ISBLK(st.st_mode)) return {occupant::refused, "a block device"};
  return {occupant::refused, "neither a file nor a device"};
}

std::string not_regular(const found& f) { return "not a regular file (" + f.what + ")"; }

// A FIFO or character device opened for writing where it is. A FIFO with no reader would block
// the job forever: it is an error instead.
int open_in_place(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), (flags & ~(O_TRUNC | O_CREAT | O_EXCL)) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENXIO) cannot_write(path, "a FIFO that no process reads");
    cannot_write(path, errno);
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);  // writes wait for the reader, as a file's would for the disk
  return fd;
}

// A file made and removed in dir, as the job's writes will make theirs (access() passes root
// everywhere; /proc or a read-only mount refuse only an actual creation): 0, or the errno.
int create_probe(const std::string& dir) {
  static std::atomic<unsigned> serial{0};
  const std::string probe =
      (std::filesystem::path(dir) / (".troupe-write-check-" + std::to_string(::getpid()) + "-" + std::to_string(serial++))).string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
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

void check_output_path(const std::string& path, const std::string& what) {
  const auto bad = [&](const std::string& why) { return std::invalid_argument(what + " " + path + ": " + why); };
  if (path.empty()) throw bad("an empty path");
  const found f = at_path(path);
  if (f.kind == occupant::refused) throw bad(not_regular(f));
  if (f.kind == occupant::in_place) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw bad("its folder " + dir + " does not exist (" + std::strerror(errno) + ")");
  if (!S_ISDIR(st.st_mode)) throw bad(dir + " is not a folder");
  if (const int err = create_probe(dir)) throw bad("cannot write in its folder " + dir + " (" + std::strerror(err) + ")");
}

int open_output_file(const std::string& path, int flags, mode_t mode) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const found f = at_path(path);
    if (f.kind == occupant::refused) cannot_write(path, not_regular(f));
    if (f.kind == occupant::in_place) return open_in_place(path, flags);
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
  if (const int err = create_probe(dir))
    throw std::invalid_argument(what + " " + dir + ": cannot write there (" + std::strerror(err) + ")");
}

void write_output_file_with(const std::string& path, const std::function<void(int fd, const std::string& name)>& fill,
                            bool sync) {
  const found f = at_path(path);
  if (f.kind == occupant::refused) cannot_write(path, not_regular(f));
  if (f.kind == occupant::in_place) {
    const int fd = open_in_place(path, O_WRONLY);
    try {
      fill(fd, path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    return;
  }
  static std::atomic<unsigned> serial{0};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) cannot_write(path, errno);
  try {
    fill(fd, tmp);
    if (sync && ::fsync(fd) != 0) cannot_write(path, errno);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  int err = 0;
  if (::close(fd) != 0) err = errno;
  else if (::rename(tmp.c_str(), path.c_str()) != 0) err = errno;  // rename replaces a link, never follows it
  if (err == 0) return;
  ::unlink(tmp.c_str());
  cannot_write(path, err);
}

void write_output_file(const std::string& path, const std::string& text) {
  write_output_file_with(path, [&](int fd, const std::string&) {
    if (!write_all(fd, text)) throw std::runtime_error(path + ": cannot write (" + std::strerror(errno) + ")");
  });
}

}  // namespace troupe::storage
