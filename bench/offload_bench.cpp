// NVMe offload bandwidth: storage/uring_store (the path ZeRO-Infinity style offload takes: host
// memory copied through registered bounce buffers, block_size I/Os, queue_depth in flight) against
// fio's io_uring engine on the same directory with the same block size, queue depth and size, in
// the same run: once with fio's own buffers (malloc, 4 KiB pages) and, where hugetlb pages are
// free, once with --iomem=shmhuge (huge pages, as troupe's pool). All use O_DIRECT, so no read
// goes through the page cache. The peers run back to back per direction, each first in turn
// across rounds; the table gives medians. fio is an optional peer: where it is missing, troupe's
// figures are printed and the peer is said not to be measured.
//
// Beside each figure it counts the requests the block device completed per MiB moved (from
// /sys/dev/block/M:m/stat): a 1 MiB I/O in 4 KiB pages has 256 segments, more than the virtio
// disk here takes (254), and is split in two (see bench/README.md).
//
// usage: offload_bench [--size 1G] [--block-size 1M] [--queue-depth 8] [--dir /tmp] [--rounds 3]
//                      [--no-huge-pages]
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/fio_peer.hpp"
#include "bench/flag_value.hpp"
#include "storage/uring_store.hpp"

using troupe::storage::uring_options;
using troupe::storage::uring_store;
using troupe::bench::fio_bw_bytes;
using troupe::bench::fs_type;

namespace {

struct flags {
  int64_t size = int64_t{1} << 30;
  int64_t block_size = int64_t{1} << 20;
  int queue_depth = 8;
  std::string dir = "/tmp";
  int rounds = 3;
  bool huge_pages = true;
};

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  int64_t unit = 1;
  switch (end && *end ? *end : ' ') {
    case 'k': case 'K': unit = int64_t{1} << 10; break;
    case 'm': case 'M': unit = int64_t{1} << 20; break;
    case 'g': case 'G': unit = int64_t{1} << 30; break;
    case ' ': break;
    default: throw std::invalid_argument("cannot read a size from '" + s + "' (use e.g. 4096, 64K, 1M, 2G)");
  }
  if (!(v > 0)) throw std::invalid_argument("a size must be positive, got '" + s + "'");
  return static_cast<int64_t>(v * static_cast<double>(unit));
}

flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--size 1G] [--block-size 1M] [--queue-depth 8] [--dir /tmp] [--rounds 3] "
                  "[--no-huge-pages]\n", argv[0]);
      std::exit(0);
    }
    if (a == "--no-huge-pages") {  // troupe's pool in 4 KiB pages, as fio's buffers are
      f.huge_pages = false;
      continue;
    }
    v = troupe::bench::flag_value(a, i, argc, argv);
    if (a == "--size") f.size = parse_bytes(v);
    else if (a == "--block-size") f.block_size = parse_bytes(v);
    else if (a == "--queue-depth") f.queue_depth = std::atoi(v.c_str());
    else if (a == "--dir") f.dir = v;
    else if (a == "--rounds") f.rounds = std::max(1, std::atoi(v.c_str()));
    else throw std::invalid_argument("unknown flag " + a + " (--help lists them)");
  }
  f.size = (f.size + f.block_size - 1) / f.block_size * f.block_size;  // whole blocks, as fio's size
  return f;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Requests the block device under `dir` has completed so far (reads or writes); -1 where there is
// none (tmpfs, overlay).
int64_t device_requests(const std::string& dir, bool write) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || major(st.st_dev) == 0) return -1;
  const std::string p = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) + "/stat";
  FILE* f = std::fopen(p.c_str(), "r");
  if (!f) return -1;
  long long v[5] = {};
  const int n = std::fscanf(f, "%lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4]);
  std::fclose(f);
  return n == 5 ? (write ? v[4] : v[0]) : -1;
}

// One pass of the whole file through the store, as an offload engine moves tensors: requests of
// the host buffer's size (the buffer is reused when the file is larger), all submitted, then
// waited for. Returns bytes per second.
double troupe_pass(uring_store& st, std::vector<char>& host, bool write) {
  const auto start = std::chrono::steady_clock::now();
  const auto span = static_cast<int64_t>(host.size());
  for (int64_t off = 0; off < st.size(); off += span) {
    const int64_t n = std::min(span, st.size() - off);
    if (write) st.submit_write(off, host.data(), n);
    else st.submit_read(off, host.data(), n);
  }
  st.wait_all();
  return static_cast<double>(st.size()) / seconds_since(start);
}

// fio's own buffers come from malloc (4 KiB pages); with `huge`, from SysV shared memory in
// hugetlb pages (--iomem=shmhuge), as troupe's pool is in huge pages.
std::optional<double> fio_pass(const flags& f, const std::string& file, bool write, bool huge) {
  const std::string rw = write ? "write" : "read";
  const std::string cmd = "fio --name=" + std::string(write ? "w" : "r") + " --ioengine=io_uring --direct=1 --rw=" + rw +
                          " --bs=" + std::to_string(f.block_size) + " --iodepth=" + std::to_string(f.queue_depth) +
                          " --size=" + std::to_string(f.size) + " --filename=" + troupe::bench::shell_quoted(file) + " --output-format=json" +
                          (huge ? " --iomem=shmhuge" : "");
  const auto out = troupe::bench::run_command(cmd);
  if (!out) return std::nullopt;
  return fio_bw_bytes(*out, rw);
}

// Whether the free hugetlb pages hold fio's buffers (iodepth x bs, and a page of slack).
bool hugetlb_fits(const flags& f) {
  FILE* m = std::fopen("/proc/meminfo", "r");
  if (!m) return false;
  long long free_pages = 0, page_kb = 0;
  char line[256];
  while (std::fgets(line, sizeof line, m)) {
    std::sscanf(line, "HugePages_Free: %lld", &free_pages);
    std::sscanf(line, "Hugepagesize: %lld kB", &page_kb);
  }
  std::fclose(m);
  return page_kb > 0 && free_pages * page_kb * 1024 >= f.block_size * f.queue_depth + page_kb * 1024;
}

// Bandwidths (bytes/s) of one peer in one direction, and the device requests per MiB of each pass.
struct series {
  std::vector<double> bw, requests;
};

// Runs pass() and adds its bandwidth and request count; false when the pass gave no figure.
template <class Pass>
bool measure(series& s, const std::string& dir, int64_t bytes, bool write, Pass pass) {
  const int64_t before = device_requests(dir, write);
  const std::optional<double> bw = pass();
  const int64_t after = device_requests(dir, write);
  if (!bw) return false;
  s.bw.push_back(*bw);
  if (before >= 0 && after >= 0) s.requests.push_back(static_cast<double>(after - before) / (static_cast<double>(bytes) / (1 << 20)));
  return true;
}

// " [1.00]": the median requests per MiB, or nothing where the directory has no block device.
std::string requests_text(const series& s) {
  if (s.requests.empty()) return "";
  char b[32];
  std::snprintf(b, sizeof b, " [%.2f]", median(s.requests));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  flags f;
  try {
    f = parse(argc, argv);
    uring_options o;
    o.block_size = f.block_size;
    o.queue_depth = f.queue_depth;
    o.direct = true;
    o.remove_on_close = true;
    o.huge_pages = f.huge_pages;
    troupe::storage::validate(o);

    const auto fio_version = troupe::bench::fio_version();
    const std::string fio_file = f.dir + "/fio.dat";
    std::printf("offload: %lld bytes, block %lld, queue depth %d, O_DIRECT, in %s (%s), %d rounds, troupe's pool in %s "
                "pages; peer: %s\n",
                static_cast<long long>(f.size), static_cast<long long>(f.block_size), f.queue_depth, f.dir.c_str(),
                fs_type(f.dir).c_str(), f.rounds, f.huge_pages ? "huge" : "4 KiB",
                fio_version ? fio_version->c_str() : "fio not found");

    uring_store st(f.dir + "/troupe.dat", f.size, o);
    if (!st.direct()) std::printf("warning: O_DIRECT refused in %s: troupe's reads measure the page cache\n", f.dir.c_str());
    std::vector<char> host(static_cast<size_t>(std::min<int64_t>(f.size, int64_t{1} << 30)));
    for (size_t i = 0; i < host.size(); i += 4096) host[i] = static_cast<char>(i >> 12);  // fault the pages in

    // Per round and direction both peers run back to back, the order flipped every round, so
    // that the disk's drift (this virtual disk swings 2x within minutes) falls on both.
    // Peers: troupe, fio as the issue states it, and fio with huge-page buffers where hugetlb
    // pages are free (as root: echo 16 > /proc/sys/vm/nr_hugepages). [0] write, [1] read.
    series troupe_s[2], fio_s[2], fio_huge_s[2];
    bool fio_ok = fio_version.has_value();
    bool fio_huge_ok = fio_ok && hugetlb_fits(f);
    for (int round = 0; round < f.rounds; ++round) {
      for (const bool write : {true, false}) {
        const int d = write ? 0 : 1;
        auto troupe_run = [&] {
          measure(troupe_s[d], f.dir, f.size, write, [&] { return std::optional<double>(troupe_pass(st, host, write)); });
        };
        auto fio_run = [&] {
          if (fio_ok && !measure(fio_s[d], f.dir, f.size, write, [&] { return fio_pass(f, fio_file, write, false); })) {
            std::printf("fio failed or printed no bandwidth: the peer was not measured\n");
            fio_ok = fio_huge_ok = false;
          }
        };
        auto fio_huge_run = [&] {
          if (fio_huge_ok && !measure(fio_huge_s[d], f.dir, f.size, write, [&] { return fio_pass(f, fio_file, write, true); })) {
            std::printf("fio --iomem=shmhuge failed: fio with huge-page buffers was not measured\n");
            fio_huge_ok = false;
          }
        };
        const std::function<void()> peers[] = {troupe_run, fio_run, fio_huge_run};
        for (int k = 0; k < 3; ++k) peers[(k + round) % 3]();  // each peer first in turn
      }
      std::printf("round %d: troupe write %.3f read %.3f GB/s", round + 1, troupe_s[0].bw.back() / 1e9,
                  troupe_s[1].bw.back() / 1e9);
      if (fio_ok) std::printf(", fio write %.3f read %.3f GB/s", fio_s[0].bw.back() / 1e9, fio_s[1].bw.back() / 1e9);
      if (fio_huge_ok)
        std::printf(", fio huge pages write %.3f read %.3f GB/s", fio_huge_s[0].bw.back() / 1e9, fio_huge_s[1].bw.back() / 1e9);
      std::printf("\n");
    }
    ::unlink(fio_file.c_str());

    std::printf("\nmedians of %d rounds (device requests per MiB moved in brackets)\n", f.rounds);
    std::printf("| direction | troupe uring_store (GB/s) | fio io_uring (GB/s) | troupe / fio | fio, huge-page buffers (GB/s) "
                "| troupe / fio huge |\n");
    std::printf("|---|---:|---:|---:|---:|---:|\n");
    const char* names[] = {"write", "read"};
    for (int i = 0; i < 2; ++i) {
      const double t = median(troupe_s[i].bw);
      std::printf("| %s | %.3f%s |", names[i], t / 1e9, requests_text(troupe_s[i]).c_str());
      for (const auto* p : {&fio_s[i], &fio_huge_s[i]}) {
        const bool ok = p == &fio_s[i] ? fio_ok : fio_huge_ok;
        if (ok) std::printf(" %.3f%s | %.2f |", median(p->bw) / 1e9, requests_text(*p).c_str(), t / median(p->bw));
        else std::printf(" not measured | |");
      }
      std::printf("\n");
    }
    if (fio_ok && !fio_huge_ok)
      std::printf("\nfio with huge-page buffers not measured: too few free hugetlb pages (as root: echo 16 > "
                  "/proc/sys/vm/nr_hugepages; 0 gives them back)\n");
    std::printf("\nstore: registered buffers %s, %lld bytes written, %lld read, %.2f s inside wait\n",
                st.registered() ? "yes" : "no", static_cast<long long>(st.bytes_written()),
                static_cast<long long>(st.bytes_read()), st.wait_seconds());
    if (!fio_version) std::printf("fio is not installed (Debian: apt-get install fio): the peer was not measured\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offload_bench: %s\n", e.what());
    return 1;
  }
}
