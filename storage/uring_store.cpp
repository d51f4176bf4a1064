// uring_store: requests are queued in ticket order and cut into block_size I/Os; each I/O holds
// one bounce buffer (a slot) from issue to completion, so at most queue_depth are in flight.
// Completions are reaped only from the caller's calls (submit, done, wait); short transfers,
// -EAGAIN and -EINTR go out again from the same slot. Nothing here spawns a thread.
#include "storage/uring_store.hpp"
#include "storage/output_file.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace troupe::storage {

namespace {

constexpr int64_t page = 4096;  // offset alignment and pad unit: every device's logical block divides it
constexpr int max_queue_depth = 4096;
constexpr int64_t huge_page = int64_t{2} << 20;  // x86-64 transparent huge page
constexpr int64_t max_block_size = int64_t{1} << 30;  // io_uring registers buffers of at most 1 GiB

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

std::string errno_text(int e) { return std::strerror(e); }

std::string memlock_text() {
  rlimit r{};
  if (::getrlimit(RLIMIT_MEMLOCK, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(r.rlim_cur / 1024) + " KiB";
}

}  // namespace

void validate(const uring_options& o) {
  if (o.block_size <= 0 || o.block_size % page != 0 || o.block_size > max_block_size)
    throw std::invalid_argument("uring_options.block_size must be a positive multiple of 4096 of at most 1 GiB, got " +
                                std::to_string(o.block_size));
  if (o.queue_depth < 1 || o.queue_depth > max_queue_depth)
    throw std::invalid_argument("uring_options.queue_depth must be in [1, 4096], got " +
                                std::to_string(o.queue_depth));
}

struct uring_store::state {
  enum class kind : uint8_t { read, write };

  struct request {
    kind k = kind::read;
    int64_t offset = 0;     // in the file
    char* data = nullptr;   // the caller's memory (only read from for a write)
    int64_t bytes = 0;
    int64_t issued = 0;     // bytes handed to I/Os so far
    int in_flight = 0;      // its I/Os holding a slot
    bool failed = false;
    std::string error;
  };

  // One bounce buffer and the I/O it carries.
  struct slot {
    bool busy = false;
    kind k = kind::read;
    ticket t = 0;
    int64_t file_offset = 0;  // where this I/O starts
    int64_t data_offset = 0;  // where its bytes sit in the request
    int64_t user_bytes = 0;   // of the caller's bytes
    int64_t io_bytes = 0;     // user_bytes padded to 4096
    int64_t moved = 0;        // transferred so far (a short transfer leaves a remainder)
    bool issued_direct = false;
    std::multimap<int64_t, int>::iterator range;  // its entry in in_flight_ranges
  };

  std::string path;
  uring_options opt;
  int64_t size = 0;
  int fd = -1;
  bool direct = false;
  bool direct_verified = false;  // a direct I/O has completed: -EINVAL is a real error from now on
  bool registered = false;
  bool ring_ready = false;
  io_uring ring{};
  char* pool = nullptr;  // queue_depth * block_size bytes, 4096-aligned

  std::vector<slot> slots;
  std::vector<int> free_slots;
  std::vector<int> again;                     // busy slots whose I/O goes out once more
  std::multimap<int64_t, int> in_flight_ranges;  // file offset -> slot, to order overlapping I/Os
  std::unordered_map<ticket, request> requests;  // unfinished, and failed until waited for
  std::deque<ticket> queue;                      // requests with bytes still to issue, in order
  ticket next_ticket = 1;
  unsigned prepared = 0;  // SQEs not yet submitted

  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  double wait_seconds = 0;
  bool unlinked = false;  // a remove_on_close file already gone from its folder

  ~state() {
    if (ring_ready) {
      if (registered) io_uring_unregister_buffers(&ring);
      io_uring_queue_exit(&ring);
    }
    std::free(pool);
    if (fd >= 0) {
      ::close(fd);
      if (opt.remove_on_close && !unlinked) ::unlink(path.c_str());
    }
  }

  char* buffer(int i) const { return pool + static_cast<int64_t>(i) * opt.block_size; }

  void open_file() {
    // A new file is made by open_output_file (a link planted at the path is replaced, not
    // followed); every open refuses a link (O_NOFOLLOW).
    if (!opt.existing) ::close(open_output_file(path, O_RDWR | O_TRUNC));
    const int flags = (opt.existing ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW;
    if (opt.direct) {
      fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
      if (fd >= 0) {
        direct = true;
        return;
      }
      if (errno != EINVAL) throw std::runtime_error(path + ": cannot open (" + errno_text(errno) + ")");
      spdlog::warn("{}: O_DIRECT refused at open ({}); using buffered I/O", path, errno_text(EINVAL));
    }
    fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) throw std::runtime_error(path + ": cannot open (" + errno_text(errno) + ")");
  }

  // Reserves the blocks (fallocate) where the file system can, so that a full disk shows here,
  // naming the path, and not halfway through training; and the first writes find their blocks
  // allocated, as fio's files are. Elsewhere (ramfs, some FUSE) the file is only sized.
  void reserve() {
    if (size > 0 && ::fallocate(fd, 0, 0, size) == 0) return;
    const int err = errno;
    if (size > 0 && err != EOPNOTSUPP && err != ENOSYS)
      throw std::runtime_error(path + ": cannot reserve " + std::to_string(size) + " bytes (" + errno_text(err) + ")");
    if (::ftruncate(fd, size) != 0)
      throw std::runtime_error(path + ": cannot size to " + std::to_string(size) + " bytes (" + errno_text(errno) + ")");
  }

  // The file system took the open with O_DIRECT but refuses direct I/O itself. The same open file
  // drops the flag (fcntl), so no second open by name can reach another file.
  void switch_to_buffered(int err) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) != 0)
      throw std::runtime_error(path + ": cannot turn O_DIRECT off (" + errno_text(errno) + ")");
    direct = false;
    spdlog::warn("{}: O_DIRECT refused by the first direct I/O ({}); using buffered I/O", path, errno_text(err));
  }

  void set_up_ring() {
    const auto depth = static_cast<unsigned>(opt.queue_depth);
    if (const int rc = io_uring_queue_init(depth, &ring, 0); rc < 0)
      throw std::runtime_error(path + ": io_uring_queue_init(" + std::to_string(depth) + ") failed (" +
                               errno_text(-rc) + ")");
    ring_ready = true;
    // Huge pages where the pool spans one: a block then lies in physically contiguous memory, so
    // a 1 MiB I/O is one device request. In 4 KiB pages it is 256 segments, more than a virtio
    // disk takes (254 here), and the block layer splits it in two, which a device that serves
    // requests one at a time pays for (measured: bench/README.md, NVMe offload).
    const auto pool_bytes = static_cast<size_t>(opt.block_size) * depth;
    const bool huge = opt.huge_pages && pool_bytes >= huge_page;
    const size_t alloc_bytes = huge ? static_cast<size_t>(align_up(static_cast<int64_t>(pool_bytes), huge_page)) : pool_bytes;
    void* p = nullptr;
    if (const int rc = ::posix_memalign(&p, huge ? huge_page : page, alloc_bytes); rc != 0)
      throw std::runtime_error(path + ": cannot allocate " + std::to_string(pool_bytes) + " bytes of bounce buffers (" +
                               errno_text(rc) + ")");
    pool = static_cast<char*>(p);
    if (huge) ::madvise(pool, alloc_bytes, MADV_HUGEPAGE);  // a hint: without THP the pool is just 4 KiB pages
    std::memset(pool, 0, alloc_bytes);                      // fault it in now (as huge pages), not in the first I/Os
    std::vector<iovec> iov(depth);
    for (unsigned i = 0; i < depth; ++i) iov[i] = {buffer(static_cast<int>(i)), static_cast<size_t>(opt.block_size)};
    if (const int rc = io_uring_register_buffers(&ring, iov.data(), depth); rc == 0) {
      registered = true;
    } else {
      spdlog::warn("{}: cannot register {} bounce buffers of {} bytes with io_uring ({}; RLIMIT_MEMLOCK {}); "
                   "using plain read/write",
                   path, depth, opt.block_size, errno_text(-rc), memlock_text());
    }
    slots.resize(depth);
    for (int i = opt.queue_depth - 1; i >= 0; --i) free_slots.push_back(i);
  }

  void check_range(int64_t offset, int64_t bytes) const {
    if (offset < 0 || offset % page != 0)
      throw std::invalid_argument(path + ": offset " + std::to_string(offset) + " is not a non-negative multiple of 4096");
    if (bytes < 0) throw std::invalid_argument(path + ": negative length " + std::to_string(bytes));
    if (bytes > size - offset)
      throw std::out_of_range(path + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + bytes) +
                              ") are past the end of the store (" + std::to_string(size) + " bytes)");
  }

  ticket add(kind k, int64_t offset, char* data, int64_t bytes) {
    check_range(offset, bytes);
    const ticket t = next_ticket++;
    if (bytes == 0) return t;  // finished at once
    request r;
    r.k = k;
    r.offset = offset;
    r.data = data;
    r.bytes = bytes;
    requests.emplace(t, std::move(r));
    queue.push_back(t);
    reap();
    pump();
    submit();
    return t;
  }

  // An earlier I/O still in flight over the same bytes, where either is a write, must land first.
  bool conflicts(int64_t offset, int64_t bytes, kind k) const {
    for (auto it = in_flight_ranges.lower_bound(offset - opt.block_size + 1);
         it != in_flight_ranges.end() && it->first < offset + bytes; ++it) {
      const slot& s = slots[static_cast<size_t>(it->second)];
      if (s.file_offset + s.io_bytes > offset && (k == kind::write || s.k == kind::write)) return true;
    }
    return false;
  }

  void prepare(int i) {
    slot& s = slots[static_cast<size_t>(i)];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) {  // cannot happen while in flight <= queue_depth <= SQ entries; submit and retry anyway
      submit();
      sqe = io_uring_get_sqe(&ring);
      if (!sqe) throw std::logic_error(path + ": io_uring submission queue full");
    }
    char* buf = buffer(i) + s.moved;
    const auto len = static_cast<unsigned>(s.io_bytes - s.moved);
    const auto off = static_cast<uint64_t>(s.file_offset + s.moved);
    if (s.k == kind::write) {
      if (registered) io_uring_prep_write_fixed(sqe, fd, buf, len, off, i);
      else io_uring_prep_write(sqe, fd, buf, len, off);
    } else {
      if (registered) io_uring_prep_read_fixed(sqe, fd, buf, len, off, i);
      else io_uring_prep_read(sqe, fd, buf, len, off);
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(i));
    s.issued_direct = direct;
    ++prepared;
  }

  void release(int i) {
    slot& s = slots[static_cast<size_t>(i)];
    in_flight_ranges.erase(s.range);
    s.busy = false;
    free_slots.push_back(i);
  }

  // Prepares SQEs: the slots to send again first, then new I/Os in ticket order while slots are
  // free and the next I/O overlaps nothing it must wait for.
  void pump() {
    for (const int i : again) {
      auto it = requests.find(slots[static_cast<size_t>(i)].t);
      if (it == requests.end() || it->second.failed) {
        if (it != requests.end()) --it->second.in_flight;
        release(i);
      } else {
        prepare(i);
      }
    }
    again.clear();
    while (!free_slots.empty() && !queue.empty()) {
      auto it = requests.find(queue.front());
      if (it == requests.end() || it->second.failed || it->second.issued == it->second.bytes) {
        queue.pop_front();
        continue;
      }
      request& r = it->second;
      const int64_t user_bytes = std::min(opt.block_size, r.bytes - r.issued);
      const int64_t file_offset = r.offset + r.issued;
      const int64_t io_bytes = align_up(user_bytes, page);
      if (conflicts(file_offset, io_bytes, r.k)) break;
      const int i = free_slots.back();
      free_slots.pop_back();
      slot& s = slots[static_cast<size_t>(i)];
      s.busy = true;
      s.k = r.k;
      s.t = it->first;
      s.file_offset = file_offset;
      s.data_offset = r.issued;
      s.user_bytes = user_bytes;
      s.io_bytes = io_bytes;
      s.moved = 0;
      s.range = in_flight_ranges.emplace(file_offset, i);
      if (r.k == kind::write) {
        std::memcpy(buffer(i), r.data + r.issued, static_cast<size_t>(user_bytes));
        std::memset(buffer(i) + user_bytes, 0, static_cast<size_t>(io_bytes - user_bytes));
      }
      r.issued += user_bytes;
      ++r.in_flight;
      prepare(i);
      if (r.issued == r.bytes) queue.pop_front();
    }
  }

  void submit() {
    while (prepared > 0) {
      const int rc = io_uring_submit(&ring);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) throw std::runtime_error(path + ": io_uring_submit failed (" + errno_text(-rc) + ")");
      prepared -= std::min(prepared, static_cast<unsigned>(rc));
    }
  }

  void fail(request& r, const slot& s, const std::string& why) {
    r.failed = true;
    r.error = path + ": " + (s.k == kind::write ? "write" : "read") + " of " + std::to_string(s.io_bytes - s.moved) +
              " bytes at offset " + std::to_string(s.file_offset + s.moved) + " failed: " + why;
  }

  void complete(int i, int res) {
    slot& s = slots[static_cast<size_t>(i)];
    auto it = requests.find(s.t);
    if (it == requests.end() || it->second.failed) {  // its request already ended: drop the bytes
      if (it != requests.end()) --it->second.in_flight;
      release(i);
      return;
    }
    request& r = it->second;
    if (res == -EAGAIN || res == -EINTR) {
      again.push_back(i);
      return;
    }
    if (res == -EINVAL && s.issued_direct && !direct_verified) {
      if (direct) switch_to_buffered(EINVAL);
      again.push_back(i);
      return;
    }
    if (res <= 0) {
      fail(r, s, res < 0 ? errno_text(-res) : s.k == kind::read ? "unexpected end of file" : "no bytes written");
      --r.in_flight;
      release(i);
      return;
    }
    if (s.issued_direct) direct_verified = true;
    s.moved += res;
    const bool enough = s.k == kind::read ? s.moved >= s.user_bytes : s.moved >= s.io_bytes;
    if (!enough) {  // short transfer: the remainder goes out again
      again.push_back(i);
      return;
    }
    if (s.k == kind::read) {
      std::memcpy(r.data + s.data_offset, buffer(i), static_cast<size_t>(s.user_bytes));
      bytes_read += s.user_bytes;
    } else {
      bytes_written += s.user_bytes;
    }
    --r.in_flight;
    release(i);
    if (r.issued == r.bytes && r.in_flight == 0) requests.erase(it);
  }

  // Submits what is prepared and handles every completion there is; with `block`, waits for one.
  // Each CQE is marked seen before it is handled, so an exception cannot handle it twice.
  void reap(bool block = false) {
    if (block) {
      for (;;) {
        const int rc = io_uring_submit_and_wait(&ring, 1);
        if (rc >= 0) {
          prepared -= std::min(prepared, static_cast<unsigned>(rc));
          break;
        }
        if (rc != -EINTR && rc != -EAGAIN)
          throw std::runtime_error(path + ": io_uring_submit_and_wait failed (" + errno_text(-rc) + ")");
      }
    }
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring, &cqe) == 0) {
      const auto i = static_cast<int>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      complete(i, res);
      // The freed slot goes back to the device before the next completion's copy-out: CQEs come
      // in bunches, and copying them all first would leave the queue short for that long.
      pump();
      submit();
    }
  }

  bool busy() const { return free_slots.size() < slots.size(); }

  // One round of driving: prepare, submit and wait for at least one completion.
  void drive() {
    pump();
    if (!busy()) throw std::logic_error(path + ": a request is unfinished but no I/O is in flight");
    reap(true);
  }

  void check_ticket(ticket t) const {
    if (t == 0 || t >= next_ticket) throw std::invalid_argument(path + ": unknown ticket " + std::to_string(t));
  }

  // Removes a failed request and throws its error.
  [[noreturn]] void throw_failed(std::unordered_map<ticket, request>::iterator it) {
    const std::string error = it->second.error;
    requests.erase(it);
    throw std::runtime_error(error);
  }

  // Abandons every request (the destructor): waits for the kernel to hand back each buffer.
  void drain() noexcept {
    if (!requests.empty())
      spdlog::warn("{}: closed with {} request(s) unfinished; their I/O was abandoned", path, requests.size());
    requests.clear();  // completions from now on only free their slots
    queue.clear();
    try {
      for (;;) {
        for (const int i : again) release(i);
        again.clear();
        if (!busy()) break;
        reap(true);
      }
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
    }
  }

  // Adds the time spent in wait()/wait_all(), also when they throw.
  struct wait_timer {
    double& total;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~wait_timer() { total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  };
};

uring_store::uring_store(std::string path, int64_t bytes, uring_options opt) : s_(std::make_unique<state>()) {
  validate(opt);
  if (bytes < 0) throw std::invalid_argument(path + ": negative size " + std::to_string(bytes));
  s_->path = std::move(path);
  s_->opt = opt;
  s_->size = align_up(bytes, opt.block_size);
  s_->open_file();
  // A scratch file leaves its folder as soon as it is open: the descriptor keeps its blocks, and
  // however the process ends (SIGTERM, SIGKILL, a crash) nothing is left behind.
  if (opt.remove_on_close && !opt.existing) s_->unlinked = ::unlink(s_->path.c_str()) == 0;
  if (opt.existing) {
    struct stat st {};
    if (::fstat(s_->fd, &st) != 0) throw std::runtime_error(s_->path + ": cannot stat (" + errno_text(errno) + ")");
    s_->size = st.st_size;
    s_->set_up_ring();
    return;
  }
  try {
    s_->reserve();
    s_->set_up_ring();
  } catch (...) {
    s_->opt.remove_on_close = true;  // the file was created (or truncated) here: do not leave it half reserved
    throw;
  }
}

uring_store::~uring_store() {
  if (s_) s_->drain();
}

uring_store::uring_store(uring_store&&) noexcept = default;

uring_store& uring_store::operator=(uring_store&& other) noexcept {
  if (this != &other) {
    if (s_) s_->drain();  // the kernel must hand back this store's buffers before they are freed
    s_ = std::move(other.s_);
  }
  return *this;
}

bool uring_store::direct() const { return s_->direct; }
bool uring_store::registered() const { return s_->registered; }
int64_t uring_store::size() const { return s_->size; }
const std::string& uring_store::path() const { return s_->path; }
const uring_options& uring_store::options() const { return s_->opt; }
int64_t uring_store::bytes_read() const { return s_->bytes_read; }
int64_t uring_store::bytes_written() const { return s_->bytes_written; }
double uring_store::wait_seconds() const { return s_->wait_seconds; }

uring_store::ticket uring_store::submit_write(int64_t offset, const void* data, int64_t bytes) {
  if (s_->opt.existing) throw std::invalid_argument(s_->path + ": opened read-only (existing), a write is refused");
  // The data is only read (copied into a bounce buffer); the request keeps one pointer type.
  return s_->add(state::kind::write, offset, const_cast<char*>(static_cast<const char*>(data)), bytes);
}

uring_store::ticket uring_store::submit_read(int64_t offset, void* data, int64_t bytes) {
  return s_->add(state::kind::read, offset, static_cast<char*>(data), bytes);
}

bool uring_store::done(ticket t) {
  s_->check_ticket(t);
  s_->pump();
  s_->reap();
  s_->pump();
  s_->submit();
  const auto it = s_->requests.find(t);
  return it == s_->requests.end() || it->second.failed;
}

void uring_store::wait(ticket t) {
  s_->check_ticket(t);
  state::wait_timer timer{s_->wait_seconds};
  for (;;) {
    const auto it = s_->requests.find(t);
    if (it == s_->requests.end()) break;
    if (it->second.failed) s_->throw_failed(it);
    s_->drive();
  }
  s_->pump();  // slots freed by the last completions take the next I/Os at once
  s_->submit();
}

void uring_store::wait_all() {
  state::wait_timer timer{s_->wait_seconds};
  while (!s_->requests.empty()) {
    auto first_failed = s_->requests.end();
    for (auto it = s_->requests.begin(); it != s_->requests.end(); ++it)
      if (it->second.failed && (first_failed == s_->requests.end() || it->first < first_failed->first)) first_failed = it;
    if (first_failed != s_->requests.end()) s_->throw_failed(first_failed);
    s_->drive();
  }
}

void uring_store::sync() {
  wait_all();
  if (::fsync(s_->fd) != 0) throw std::runtime_error(s_->path + ": fsync failed (" + errno_text(errno) + ")");
}

}  // namespace troupe::storage
