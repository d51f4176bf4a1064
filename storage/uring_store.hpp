// An io_uring file store for offloading tensors to NVMe (ZeRO-Infinity style): one file, one
// ring, queue_depth aligned bounce buffers registered with the ring (the pinned pool), and
// asynchronous reads and writes that are split into block_size I/Os. Single-threaded: the owner
// (an actor's thread) drives the ring from submit/done/wait; there are no internal threads.
// It does not lay tensors out in the file, and it does not know about CAF.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace troupe::storage {

struct uring_options {
  int64_t block_size = int64_t{1} << 20;  // bytes per I/O (DeepSpeed aio default 1 MiB)
  int queue_depth = 8;                    // I/Os in flight at most (DeepSpeed default 8)
  bool direct = true;                     // try O_DIRECT; fall back to buffered I/O with a logged warning
  bool remove_on_close = false;           // a scratch file: unlinked once open, gone with its last descriptor (else the caller owns it)
  bool huge_pages = true;                 // ask for transparent huge pages (madvise) for a pool of 2 MiB or more:
                                          // a block then is one device request, not split at the segment limit
  bool existing = false;                  // open the file as it is, read-only, sized as it is (a checkpoint's shard):
                                          // no create, no truncate, no reservation; writes are refused
};

// Throws std::invalid_argument naming the field: block_size must be a positive multiple of 4096
// and at most 1 GiB (the most io_uring registers in one buffer),
// queue_depth in [1, 4096].
void validate(const uring_options&);

// Layout rules, the same with and without O_DIRECT:
// - offsets are multiples of 4096 (the page, and every device's logical block); lengths are any;
// - a length that is not a multiple of 4096 is padded: a write also writes zeros from the end of
//   the data to the next 4096 boundary (the file is sized in whole blocks, so the pad never
//   passes its end). Lay tensors out at 4096-aligned offsets and a pad never touches another.
// - requests take effect in ticket order: an I/O that overlaps an earlier request's I/O still in
//   flight (and either is a write) waits for it, so a read sees every earlier write.
class uring_store {
 public:
  using ticket = uint64_t;

  // Opens (creates, truncates) `path` and sizes it to `bytes` rounded up to block_size, reserving
  // the blocks with fallocate where the file system supports it (a full disk fails here, and the
  // file is removed again). Falls back
  // to buffered I/O (logged, naming the path and the reason) when O_DIRECT is refused at open or
  // by the first direct I/O, and to plain read/write SQEs (logged once) when the buffers cannot be
  // registered. Throws std::runtime_error naming the path and strerror if open, fallocate,
  // ftruncate or the ring's set-up fails, std::invalid_argument for bad options or a negative size.
  uring_store(std::string path, int64_t bytes, uring_options opt = {});
  // With uring_options::existing, `bytes` is ignored: the store is the file's size, and a missing
  // file throws std::runtime_error naming the path.
  ~uring_store();  // waits for the I/O in flight, unregisters, closes
  uring_store(const uring_store&) = delete;
  uring_store& operator=(const uring_store&) = delete;
  uring_store(uring_store&&) noexcept;             // a moved-from store may only be destroyed or assigned to
  uring_store& operator=(uring_store&&) noexcept;  // drains this store's I/O first

  bool direct() const;      // O_DIRECT in effect
  bool registered() const;  // fixed buffers (read_fixed/write_fixed) in effect
  int64_t size() const;     // bytes, a multiple of block_size
  const std::string& path() const;
  const uring_options& options() const;

  // Schedule [offset, offset+bytes) of the file to be written from / read into `data`, which must
  // stay valid until the request is finished (wait() returned or threw, or done() said true).
  // Never blocks: issues what fits into free buffers now, the rest as earlier I/Os complete
  // during later calls. Throws std::invalid_argument for an offset that is not a multiple of 4096
  // or a negative length, std::out_of_range (naming the path) for a range past size().
  ticket submit_write(int64_t offset, const void* data, int64_t bytes);
  ticket submit_read(int64_t offset, void* data, int64_t bytes);

  // Drives the ring until request t is finished (the others progress too). Throws
  // std::runtime_error naming the path, the offset and strerror of a failed I/O (e.g. ENOSPC);
  // the request is then finished and none of its data is touched again. A ticket already
  // finished and collected returns at once.
  void wait(ticket t);
  // Non-blocking: reaps completions, issues what fits; true when t is finished. A failed request
  // stays until wait(t) reports its error.
  bool done(ticket t);
  // Drives the ring until every request submitted so far is finished; throws the first error.
  void wait_all();

  void write(int64_t offset, const void* data, int64_t bytes) { wait(submit_write(offset, data, bytes)); }
  // Waits for every request, then fsync: what was written survives a crash of the machine.
  // Throws std::runtime_error naming the path.
  void sync();
  void read(int64_t offset, void* data, int64_t bytes) { wait(submit_read(offset, data, bytes)); }

  // Bytes moved by completed I/Os (the callers' bytes, not the pads) and seconds spent inside
  // wait()/wait_all() since construction: what a benchmark needs for the hidden-I/O share.
  int64_t bytes_read() const;
  int64_t bytes_written() const;
  double wait_seconds() const;

 private:
  struct state;
  std::unique_ptr<state> s_;
};

}  // namespace troupe::storage
