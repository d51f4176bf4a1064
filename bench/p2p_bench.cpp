// Activation transfer between two processes on loopback: comm/p2p_transport (wire frames, CRC,
// authenticated connection, a fresh tensor per message at the receiver) against a plain TCP
// socket carrying the same bytes (8-byte length, then the payload, read into one reused buffer:
// no framing, no checksum, no allocation), measured in the same run. Each round streams about
// 64 MiB as back-to-back messages of one size, as a stage streams micro-batches to the next, and
// ends when the receiver's one-message acknowledgement arrives. It deliberately has no warm
// connection setup in the timing: the connection is made by a warm-up round first.
//
// usage: p2p_bench [KiB ...]      (default 64 1024 16384)
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "comm/p2p_transport.hpp"

using namespace troupe;

namespace {

using clock_type = std::chrono::steady_clock;
constexpr size_t round_bytes = size_t{64} << 20;
constexpr int rounds = 3;  // timed, after one warm-up; the median is reported
const char* const secret = "bench-secret";

size_t messages_for(size_t bytes) { return std::max<size_t>(1, round_bytes / bytes); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per round for each size, plain sockets.
std::vector<double> bench_plain(const std::vector<size_t>& sizes) {
  auto listener = net::listen_tcp("127.0.0.1", 0);
  const uint16_t port = net::local_port(listener.get());
  const pid_t child = fork();
  if (child == 0) {
    auto c = net::accept_tcp(listener.get(), 10000);
    net::tune_bulk(c.get(), 4 << 20);
    std::vector<uint8_t> buf;
    for (;;) {
      uint64_t n = 0;
      try {
        net::read_all(c.get(), &n, 8, 60000, "length");
      } catch (const net::net_error&) {
        std::_Exit(0);  // the sender closed: done
      }
      const bool last = n >> 63;
      n &= ~(uint64_t{1} << 63);
      buf.resize(n);
      net::read_all(c.get(), buf.data(), n, 60000, "payload");
      if (last) {
        const char ack = 1;
        net::write_all(c.get(), &ack, 1, 60000, "ack");
      }
    }
  }
  listener.close();
  auto s = net::connect_tcp("127.0.0.1", port, 10000);
  net::tune_bulk(s.get(), 4 << 20);
  std::vector<double> out;
  for (size_t size : sizes) {
    const std::vector<uint8_t> payload(size, 0x5a);
    const size_t k = messages_for(size);
    std::vector<double> t;
    for (int r = 0; r <= rounds; ++r) {
      const auto t0 = clock_type::now();
      for (size_t i = 0; i < k; ++i) {
        const uint64_t n = size | (i + 1 == k ? uint64_t{1} << 63 : 0);  // the top bit asks for the ack
        net::write_all(s.get(), &n, 8, 60000, "length");
        net::write_all(s.get(), payload.data(), size, 60000, "payload");
      }
      char ack;
      net::read_all(s.get(), &ack, 1, 60000, "ack");
      if (r > 0) t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    out.push_back(median(t));
  }
  s.close();
  waitpid(child, nullptr, 0);
  return out;
}

// The receiver: acknowledges each tensor named "last" with an empty tensor, leaves on "bye".
[[noreturn]] void p2p_receiver(int port_out, int port_in) {
  std::mutex mu;
  std::condition_variable cv;
  bool bye = false;
  std::atomic<uint16_t> sender_port{0};  // set before the first tensor can arrive
  std::unique_ptr<net::p2p_transport> ep;
  ep = std::make_unique<net::p2p_transport>(
      1, "127.0.0.1", 0, secret,
      [&](int from, wire::tensor_meta meta, std::vector<uint8_t>) {
        if (meta.name == "last")
          ep->send(from, "127.0.0.1", sender_port, {0, "ack", wire::dtype::u8, {0}}, nullptr, 0, nullptr);
        if (meta.name == "bye") {
          std::lock_guard<std::mutex> lock(mu);
          bye = true;
          cv.notify_all();
        }
      },
      [](int from, const wire::error& e) {
        std::fprintf(stderr, "p2p receiver: rank %d: %s\n", from, e.message.c_str());
        std::_Exit(2);
      });
  const uint16_t mine = ep->port();
  uint16_t theirs = 0;
  if (write(port_out, &mine, sizeof mine) != sizeof mine || read(port_in, &theirs, sizeof theirs) != 2) std::_Exit(2);
  sender_port = theirs;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return bye; });
  lock.unlock();
  ep.reset();
  std::_Exit(0);
}

std::vector<double> bench_p2p(const std::vector<size_t>& sizes) {
  int to_parent[2], to_child[2];  // one pipe per direction
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) std::exit(2);
  const pid_t child = fork();  // before this process has an endpoint, i.e. any thread
  if (child == 0) p2p_receiver(to_parent[1], to_child[0]);
  std::mutex mu;
  std::condition_variable cv;
  int acks = 0;
  net::p2p_transport ep(
      0, "127.0.0.1", 0, secret,
      [&](int, wire::tensor_meta, std::vector<uint8_t>) {
        std::lock_guard<std::mutex> lock(mu);
        ++acks;
        cv.notify_all();
      },
      [](int from, const wire::error& e) {
        std::fprintf(stderr, "p2p sender: rank %d: %s\n", from, e.message.c_str());
        std::exit(2);
      });
  uint16_t peer = 0;
  const uint16_t mine = ep.port();
  if (read(to_parent[0], &peer, sizeof peer) != 2 || write(to_child[1], &mine, sizeof mine) != 2) std::exit(2);
  auto check = [](std::optional<std::string> err) {
    if (err) {
      std::fprintf(stderr, "p2p send: %s\n", err->c_str());
      std::exit(2);
    }
  };
  std::vector<double> out;
  for (size_t size : sizes) {
    const std::vector<uint8_t> payload(size, 0x5a);
    const size_t k = messages_for(size);
    std::vector<double> t;
    for (int r = 0; r <= rounds; ++r) {
      const int want = acks + 1;
      const auto t0 = clock_type::now();
      for (size_t i = 0; i < k; ++i)
        ep.send(1, "127.0.0.1", peer, {i, i + 1 == k ? "last" : "act", wire::dtype::u8, {static_cast<int64_t>(size)}},
                payload.data(), size, check);
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return acks >= want; });
      if (r > 0) t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
    }
    out.push_back(median(t));
  }
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool sent = false;
  ep.send(1, "127.0.0.1", peer, {0, "bye", wire::dtype::u8, {0}}, nullptr, 0, [&](std::optional<std::string>) {
    std::lock_guard<std::mutex> lock(done_mu);
    sent = true;
    done_cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(done_mu);
  done_cv.wait(lock, [&] { return sent; });
  waitpid(child, nullptr, 0);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(static_cast<size_t>(std::atof(argv[i]) * 1024));
  if (sizes.empty()) sizes = {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20};
  const auto plain = bench_plain(sizes);
  const auto p2p = bench_p2p(sizes);
  std::printf("| size | messages/round | plain TCP (GB/s) | troupe p2p (GB/s) | p2p / plain |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double bytes = static_cast<double>(sizes[i] * messages_for(sizes[i]));
    const double a = bytes / plain[i] / 1e9, b = bytes / p2p[i] / 1e9;
    std::printf("| %zu KiB | %zu | %.2f | %.2f | %.2f |\n", sizes[i] >> 10, messages_for(sizes[i]), a, b, b / a);
  }
  return 0;
}
