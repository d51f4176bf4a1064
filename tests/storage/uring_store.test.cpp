// storage/uring_store: data written through the ring reads back bitwise (and is in the file, read
// with plain pread), with and without O_DIRECT, at several block sizes and queue depths; requests
// in flight together all land and take effect in ticket order; the fallbacks (a file system that
// refuses O_DIRECT, buffers that cannot be registered) happen on real refusals, set up in a child
// process (a ramfs in a private mount namespace, RLIMIT_MEMLOCK); errors name the path.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "storage/uring_store.hpp"

namespace fs = std::filesystem;
using troupe::storage::uring_options;
using troupe::storage::uring_store;

namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

struct temp_dir {
  fs::path path;
  temp_dir() {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/troupe-uring-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp " + templ + ": " + std::strerror(errno));
    path = templ;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Whether this directory's file system takes an O_DIRECT open: what the store should then report.
bool takes_o_direct(const fs::path& dir) {
  const std::string p = (dir / "probe").string();
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(p.c_str());
  return fd >= 0;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1e3f, 1e3f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// The file's bytes read with plain pread: an oracle that does not share the store's read path.
std::vector<char> pread_file(const std::string& path, int64_t offset, int64_t bytes) {
  std::vector<char> out(static_cast<size_t>(bytes));
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  int64_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd, out.data() + got, static_cast<size_t>(bytes - got), offset + got);
    if (n <= 0) break;
    got += n;
  }
  ::close(fd);
  out.resize(static_cast<size_t>(got));
  return out;
}

bool bytes_equal(const void* a, const void* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n)) == 0; }

// Runs fn in a forked child with stdout and stderr (the store's log) captured; returns its exit
// code (128 + signal when killed) and output. 77 from fn means "cannot be set up here".
struct child_result {
  int code = -1;
  std::string output;
};
child_result run_in_child(const std::function<int()>& fn) {
  int p[2];
  if (::pipe(p) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    ::close(p[0]);
    ::close(p[1]);
    int rc = 1;
    try {
      rc = fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: exception: %s\n", e.what());
    }
    spdlog::default_logger()->flush();
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(rc);
  }
  ::close(p[1]);
  child_result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) r.output.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

#define CHILD_CHECK(cond)                                                       \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "child: check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

// In the child: a mount namespace of its own (a user namespace too when not root), with mounts
// made private so that nothing mounted here reaches the machine. Returns false with the reason.
bool enter_private_mounts(std::string& why) {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  const int flags = uid == 0 ? CLONE_NEWNS : CLONE_NEWUSER | CLONE_NEWNS;
  if (::unshare(flags) != 0) {
    why = std::string("unshare: ") + std::strerror(errno);
    return false;
  }
  if (uid != 0) {
    std::ofstream("/proc/self/setgroups") << "deny";
    std::ofstream("/proc/self/uid_map") << "0 " << uid << " 1";
    std::ofstream("/proc/self/gid_map") << "0 " << gid << " 1";
  }
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    why = std::string("making mounts private: ") + std::strerror(errno);
    return false;
  }
  return true;
}

int mount_or_skip(const char* type, const fs::path& at, const char* data) {
  std::string why;
  if (!enter_private_mounts(why) || ::mount("none", at.c_str(), type, 0, data) != 0) {
    if (why.empty()) why = std::string("mount -t ") + type + ": " + std::strerror(errno);
    std::printf("cannot mount a %s in a private mount namespace here (%s)\n", type, why.c_str());
    return 77;
  }
  return 0;
}

// Writes floats of several lengths (none a multiple of the block) at several offsets through the
// store, reads them back through it, and checks both against the data and the file itself.
int round_trip(uring_store& st) {
  const int64_t b = st.options().block_size;
  struct piece {
    int64_t offset;
    size_t floats;
  };
  const std::vector<piece> pieces = {
      {0, 786433},                      // 3 MiB + 4 bytes
      {4 * MiB, 1000003},               // ~3.8 MiB
      {8 * MiB + 3 * 4096, 262147},     // starts inside a block (4096-aligned, not block-aligned)
      {12 * MiB, 1},                    // one float: an I/O far below the block size
      {13 * MiB, static_cast<size_t>(b / 4 + 5)},  // one block and a bit
  };
  std::vector<std::vector<float>> data;
  for (size_t i = 0; i < pieces.size(); ++i) data.push_back(random_floats(pieces[i].floats, 7u + static_cast<uint32_t>(i)));
  std::vector<uring_store::ticket> writes;
  int64_t written = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto n = static_cast<int64_t>(data[i].size() * sizeof(float));
    writes.push_back(st.submit_write(pieces[i].offset, data[i].data(), n));
    written += n;
  }
  for (auto t : writes) st.wait(t);
  CHILD_CHECK(st.bytes_written() == written);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const auto n = static_cast<int64_t>(data[i].size() * sizeof(float));
    std::vector<float> back(data[i].size(), 0.f);
    st.read(pieces[i].offset, back.data(), n);
    CHILD_CHECK(bytes_equal(back.data(), data[i].data(), n));
    if (st.options().remove_on_close) continue;  // a scratch file has left its folder: nothing to open by name
    const auto file = pread_file(st.path(), pieces[i].offset, n);
    CHILD_CHECK(static_cast<int64_t>(file.size()) == n && bytes_equal(file.data(), data[i].data(), n));
  }
  CHILD_CHECK(st.bytes_read() == written);
  return 0;
}

class storage_uring_store_round_trip : public testing::TestWithParam<std::tuple<bool, int, int64_t>> {};

TEST_P(storage_uring_store_round_trip, random_floats_read_back_bitwise_and_are_in_the_file) {
  const auto [direct, depth, block] = GetParam();
  temp_dir dir;
  uring_options o;
  o.direct = direct;
  o.queue_depth = depth;
  o.block_size = block;
  uring_store st((dir.path / "store.bin").string(), 15 * MiB + 1, o);
  EXPECT_EQ(st.size() % block, 0);
  EXPECT_GE(st.size(), 15 * MiB + 1);
  EXPECT_LT(st.size(), 15 * MiB + 1 + block);
  EXPECT_EQ(fs::file_size(dir.path / "store.bin"), static_cast<uintmax_t>(st.size()));
  EXPECT_EQ(st.direct(), direct && takes_o_direct(dir.path));
  if (::geteuid() == 0) {
    EXPECT_TRUE(st.registered());  // root is not held to RLIMIT_MEMLOCK
  }
  EXPECT_EQ(round_trip(st), 0);
}

INSTANTIATE_TEST_SUITE_P(stores, storage_uring_store_round_trip,
                         testing::Combine(testing::Bool(), testing::Values(1, 8), testing::Values(4096, MiB)),
                         [](const testing::TestParamInfo<std::tuple<bool, int, int64_t>>& i) {
                           return std::string(std::get<0>(i.param) ? "direct" : "buffered") + "_qd" +
                                  std::to_string(std::get<1>(i.param)) + "_bs" +
                                  (std::get<2>(i.param) == MiB ? "1MiB" : "4KiB");
                         });

TEST(storage_uring_store, sixteen_writes_in_flight_all_land_when_waited_in_reverse) {
  temp_dir dir;
  uring_options o;
  o.block_size = 64 * KiB;
  o.queue_depth = 8;
  uring_store st((dir.path / "s.bin").string(), 16 * 512 * KiB, o);
  const int64_t n = 300 * KiB + 123;  // 5 blocks, the last partial
  std::vector<std::vector<char>> data;
  std::vector<uring_store::ticket> t;
  for (int i = 0; i < 16; ++i) {
    std::vector<char> d(static_cast<size_t>(n));
    std::mt19937 gen(100u + static_cast<uint32_t>(i));
    for (auto& c : d) c = static_cast<char>(gen());
    data.push_back(std::move(d));
    t.push_back(st.submit_write(i * 512 * KiB, data.back().data(), n));
  }
  for (int i = 15; i >= 0; --i) st.wait(t[static_cast<size_t>(i)]);
  EXPECT_EQ(st.bytes_written(), 16 * n);
  for (int i = 0; i < 16; ++i) {
    const auto file = pread_file(st.path(), i * 512 * KiB, n);
    EXPECT_TRUE(bytes_equal(file.data(), data[static_cast<size_t>(i)].data(), n)) << "write " << i;
  }
}

// Queue depth 64 puts all four requests in flight at once (41 I/Os): without ordering, the read
// races the writes under it (a hole reads back as zeros at once) and the last write races the first.
TEST(storage_uring_store, overlapping_requests_take_effect_in_ticket_order) {
  temp_dir dir;
  uring_options o;
  o.block_size = 64 * KiB;
  o.queue_depth = 64;
  constexpr int rounds = 8;  // each on fresh (never written) bytes
  uring_store st((dir.path / "s.bin").string(), rounds * MiB, o);
  const std::vector<char> a(MiB, 'a'), b(512 * KiB, 'b'), d(4096, 'd');
  std::vector<char> expect_c(a);
  std::fill(expect_c.begin() + 256 * KiB, expect_c.begin() + 768 * KiB, 'b');
  std::vector<char> expect_file(expect_c);
  std::fill(expect_file.begin(), expect_file.begin() + 4096, 'd');
  for (int round = 0; round < rounds; ++round) {
    const int64_t base = round * MiB;
    std::vector<char> seen(MiB, 0);
    const auto ta = st.submit_write(base, a.data(), MiB);
    const auto tb = st.submit_write(base + 256 * KiB, b.data(), 512 * KiB);
    const auto tc = st.submit_read(base, seen.data(), MiB);
    const auto td = st.submit_write(base, d.data(), 4096);
    for (auto t : {td, tc, tb, ta}) st.wait(t);
    EXPECT_TRUE(seen == expect_c) << "round " << round << ": the read sees the writes before it, not the one after";
    EXPECT_TRUE(pread_file(st.path(), base, MiB) == expect_file) << "round " << round;
  }
}

TEST(storage_uring_store, a_partial_page_is_padded_with_zeros_to_the_next_4096_boundary) {
  temp_dir dir;
  uring_store st((dir.path / "s.bin").string(), 8192);
  const std::vector<char> ones(8192, '\x11'), twos(100, '\x22');
  st.write(0, ones.data(), 8192);
  st.write(0, twos.data(), 100);
  const auto file = pread_file(st.path(), 0, 8192);
  ASSERT_EQ(file.size(), 8192u);
  for (size_t i = 0; i < 8192; ++i) {
    const char want = i < 100 ? '\x22' : i < 4096 ? '\0' : '\x11';
    ASSERT_EQ(file[i], want) << "byte " << i;
  }
}

TEST(storage_uring_store, done_polls_until_the_request_finishes_and_wait_is_then_immediate) {
  temp_dir dir;
  uring_store st((dir.path / "s.bin").string(), 16 * MiB);
  const auto v = random_floats(4 * MiB / sizeof(float), 3);
  const auto t = st.submit_write(0, v.data(), 4 * MiB);
  int polls = 0;
  while (!st.done(t)) {
    ++polls;
    ASSERT_LT(polls, 100000000);
  }
  EXPECT_EQ(st.bytes_written(), 4 * MiB);
  st.wait(t);  // collected already: returns at once
  EXPECT_TRUE(st.done(t));
  const auto empty = st.submit_read(0, nullptr, 0);
  EXPECT_TRUE(st.done(empty));
  EXPECT_THROW(st.wait(t + 100), std::invalid_argument);
  EXPECT_GE(st.wait_seconds(), 0.0);
}

TEST(storage_uring_store, a_moved_store_keeps_its_requests_and_assignment_drains_the_old_one) {
  temp_dir dir;
  uring_store a((dir.path / "a.bin").string(), 4 * MiB);
  const auto v = random_floats(MiB / sizeof(float), 11);
  const auto t = a.submit_write(0, v.data(), MiB);
  uring_store b(std::move(a));
  b.wait(t);
  uring_store c((dir.path / "c.bin").string(), 4 * MiB);
  const auto u = c.submit_write(0, v.data(), MiB);  // in flight when c is assigned over
  (void)u;
  c = std::move(b);
  EXPECT_EQ(c.path(), (dir.path / "a.bin").string());
  std::vector<float> back(v.size());
  c.read(0, back.data(), MiB);
  EXPECT_TRUE(bytes_equal(back.data(), v.data(), MiB));
}

// A scratch file (remove_on_close, as offload's) leaves its folder once open, so a process
// stopped by a signal leaves no file behind (issue 57, item 9); its bytes still round-trip.
TEST(storage_uring_store, the_file_stays_unless_remove_on_close_is_set_and_then_leaves_its_folder_at_open) {
  temp_dir dir;
  const auto kept = dir.path / "kept.bin", removed = dir.path / "removed.bin";
  { uring_store st(kept.string(), 4096); }
  EXPECT_TRUE(fs::exists(kept));
  uring_options o;
  o.remove_on_close = true;
  {
    uring_store st(removed.string(), 15 * MiB, o);
    EXPECT_FALSE(fs::exists(removed));
    EXPECT_EQ(round_trip(st), 0);
    std::ofstream(removed) << "a file made there since";
  }
  EXPECT_TRUE(fs::exists(removed)) << "the store's end removed a file that is not its own";
}

TEST(storage_uring_store, bad_options_throw_invalid_argument_naming_the_field) {
  auto message = [](const uring_options& o) {
    try {
      troupe::storage::validate(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  for (int64_t b : {int64_t{0}, int64_t{-4096}, int64_t{1000}, int64_t{4096 + 512}, int64_t{2} << 30}) {
    uring_options o;
    o.block_size = b;
    EXPECT_NE(message(o).find("block_size"), std::string::npos) << b << ": " << message(o);
  }
  for (int q : {0, -1, 4097}) {
    uring_options o;
    o.queue_depth = q;
    EXPECT_NE(message(o).find("queue_depth"), std::string::npos) << q << ": " << message(o);
  }
  EXPECT_EQ(message(uring_options{}), "no exception");
  temp_dir dir;
  uring_options o;
  o.queue_depth = 0;
  EXPECT_THROW(uring_store((dir.path / "s.bin").string(), 4096, o), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir.path / "s.bin"));
}

TEST(storage_uring_store, bad_ranges_are_refused_naming_the_path) {
  temp_dir dir;
  const std::string path = (dir.path / "s.bin").string();
  uring_store st(path, 2 * MiB);
  std::vector<char> buf(8192);
  EXPECT_THROW(st.submit_write(512, buf.data(), 8), std::invalid_argument);
  EXPECT_THROW(st.submit_read(0, buf.data(), -1), std::invalid_argument);
  try {
    st.submit_read(2 * MiB - 4096, buf.data(), 8192);
    ADD_FAILURE() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(storage_uring_store, a_path_in_a_missing_directory_throws_runtime_error_naming_the_path) {
  temp_dir dir;
  const std::string path = (dir.path / "no-such-dir" / "s.bin").string();
  try {
    uring_store st(path, 4096);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(std::strerror(ENOENT)), std::string::npos) << m;
  }
}

// The file is cut short behind the store's back: the read finds its end and says where.
TEST(storage_uring_store, a_read_past_the_end_of_the_file_fails_naming_the_path_and_offset) {
  temp_dir dir;
  const std::string path = (dir.path / "s.bin").string();
  uring_store st(path, 4 * MiB);
  const auto v = random_floats(MiB / sizeof(float), 5);
  st.write(0, v.data(), MiB);
  ASSERT_EQ(::truncate(path.c_str(), MiB), 0);
  std::vector<char> buf(MiB);
  const auto t = st.submit_read(2 * MiB, buf.data(), MiB);
  while (!st.done(t)) {
  }
  try {
    st.wait(t);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("offset 2097152"), std::string::npos) << m;
    EXPECT_NE(m.find("end of file"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(st.wait(t)) << "the failed request was finished by the first wait";
  std::vector<float> back(v.size());
  st.read(0, back.data(), MiB);  // the store still works
  EXPECT_TRUE(bytes_equal(back.data(), v.data(), MiB));
}

// A real full file system (a 1 MiB tmpfs in a private mount namespace): the store reserves its
// blocks at construction, so the full disk is reported there, before any tensor is offloaded.
TEST(storage_uring_store, a_full_file_system_fails_at_construction_naming_the_path_and_enospc) {
  temp_dir dir;
  const std::string path = (dir.path / "s.bin").string();
  const auto r = run_in_child([&] {
    if (const int rc = mount_or_skip("tmpfs", dir.path, "size=1m"); rc != 0) return rc;
    try {
      uring_store st(path, 8 * MiB);
    } catch (const std::runtime_error& e) {
      std::printf("error: %s\n", e.what());
      CHILD_CHECK(!fs::exists(path));  // not left behind, half reserved, to keep the disk full
      return 0;
    }
    std::printf("no error\n");
    return 1;
  });
  if (r.code == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("error: " + path + ": cannot reserve"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::strerror(ENOSPC)), std::string::npos) << r.output;
}

// A write the kernel refuses in its completion (EFBIG: past RLIMIT_FSIZE, lowered after the
// store reserved its file): the error names the path, the offset and strerror.
TEST(storage_uring_store, a_write_the_kernel_refuses_fails_naming_the_path_offset_and_strerror) {
  temp_dir dir;
  const std::string path = (dir.path / "s.bin").string();
  const auto r = run_in_child([&] {
    std::signal(SIGXFSZ, SIG_IGN);  // else the signal ends the process before the error is seen
    uring_store st(path, 4 * MiB);
    const rlimit limit{MiB, MiB};
    CHILD_CHECK(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
    const std::vector<char> data(MiB, 'x');
    st.write(0, data.data(), MiB);  // below the limit: lands
    try {
      st.write(2 * MiB, data.data(), MiB);
    } catch (const std::runtime_error& e) {
      std::printf("error: %s\n", e.what());
      return 0;
    }
    std::printf("no error\n");
    return 1;
  });
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("error: " + path + ": write of 1048576 bytes at offset 2097152 failed: " +
                          std::strerror(EFBIG)),
            std::string::npos)
      << r.output;
}

// ramfs has no direct I/O at all: the O_DIRECT open fails with EINVAL and the store goes buffered.
TEST(storage_uring_store, falls_back_to_buffered_io_where_the_file_system_refuses_o_direct) {
  temp_dir dir;
  const std::string path = (dir.path / "s.bin").string();
  const auto r = run_in_child([&] {
    if (const int rc = mount_or_skip("ramfs", dir.path, nullptr); rc != 0) return rc;
    CHILD_CHECK(!takes_o_direct(dir.path));
    uring_store st(path, 15 * MiB);
    CHILD_CHECK(!st.direct());
    return round_trip(st);
  });
  if (r.code == 77) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(path + ": O_DIRECT refused"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::strerror(EINVAL)), std::string::npos) << r.output;
}

// The same where /dev/shm (tmpfs) refuses O_DIRECT itself, as before Linux 6.6; newer kernels take it.
TEST(storage_uring_store, falls_back_to_buffered_io_on_dev_shm_where_it_refuses_o_direct) {
  if (!fs::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  if (takes_o_direct("/dev/shm")) GTEST_SKIP() << "/dev/shm takes O_DIRECT on this kernel";
  const std::string path = "/dev/shm/troupe-uring-" + std::to_string(::getpid()) + ".bin";
  uring_options o;
  o.remove_on_close = true;
  uring_store st(path, 15 * MiB, o);
  EXPECT_FALSE(st.direct());
  EXPECT_EQ(round_trip(st), 0);
}

// Not root-exempt and RLIMIT_MEMLOCK below the pool: registering fails (ENOMEM) for real.
TEST(storage_uring_store, falls_back_to_plain_read_write_when_the_buffers_cannot_be_registered) {
  temp_dir dir;
  const std::string path = (dir.path / "s.bin").string();
  const auto r = run_in_child([&] {
    __user_cap_header_struct head{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2]{};
    CHILD_CHECK(::syscall(SYS_capget, &head, caps) == 0);
    caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));  // root is exempt through this one
    CHILD_CHECK(::syscall(SYS_capset, &head, caps) == 0);
    const rlimit small{64 * 1024, 64 * 1024};
    CHILD_CHECK(::setrlimit(RLIMIT_MEMLOCK, &small) == 0);
    uring_store st(path, 15 * MiB);  // 8 buffers of 1 MiB
    CHILD_CHECK(!st.registered());
    return round_trip(st);
  });
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(path + ": cannot register 8 bounce buffers"), std::string::npos) << r.output;
}

}  // namespace
