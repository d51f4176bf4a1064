// Activation transfer between two processes on loopback: comm/p2p_transport (wire frames, CRC,
// authenticated connection, a fresh tensor per message at the receiver) against a plain TCP
// socket carrying the same bytes (8-byte length and payload in one writev, read with blocking
// recv(MSG_WAITALL) into one reused buffer: no framing, no checksum, no allocation, no poll). Each round streams about 64 MiB as back-to-back
// messages of one size, as a stage streams micro-batches to the next, and ends when the
// receiver's one-message acknowledgement arrives. Rounds of the two alternate, so that load from
// other work on the machine falls on both alike; connection set-up is left to a warm-up round.
//
// usage: p2p_bench [KiB ...]      (default 64 1024 16384)
#include <sys/socket.h>
#include <sys/uio.h>
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
constexpr int rounds = 5;  // timed, after one warm-up; the median is reported
const char* const secret = "bench-secret";

size_t messages_for(size_t bytes) { return std::max<size_t>(1, round_bytes / bytes); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Blocking whole-buffer receive, the cheapest a plain socket offers; false when the peer closed.
bool recv_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t k = ::recv(fd, b, n, MSG_WAITALL);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The plain peer's receiving process: reads length-prefixed messages into one buffer; a length
// with the top bit set asks for the one-byte acknowledgement. Leaves when the sender closes.
[[noreturn]] void plain_receiver(net::socket_fd listener) {
  auto c = net::accept_tcp(listener.get(), 10000);
  net::tune_bulk(c.get(), 4 << 20);
  std::vector<uint8_t> buf;
  for (;;) {
    uint64_t n = 0;
    if (!recv_all(c.get(), &n, 8)) std::_Exit(0);
    const bool last = n >> 63;
    n &= ~(uint64_t{1} << 63);
    buf.resize(n);
    const char ack = 1;
    if (!recv_all(c.get(), buf.data(), n) || (last && ::send(c.get(), &ack, 1, MSG_NOSIGNAL) != 1)) std::_Exit(2);
  }
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
          ep->send(from, "127.0.0.1", sender_port, {0, "ack", dtype::u8, {0}}, nullptr, 0, nullptr);
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

double seconds(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(static_cast<size_t>(std::atof(argv[i]) * 1024));
  if (sizes.empty()) sizes = {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20};
  // Both receivers are forked before this process has a thread (the endpoint's) or a connection
  // a child could inherit and hold open.
  auto listener = net::listen_tcp("127.0.0.1", 0);
  const uint16_t plain_port = net::local_port(listener.get());
  const pid_t plain_child = fork();
  if (plain_child == 0) plain_receiver(std::move(listener));
  int to_parent[2], to_child[2];  // one pipe per direction
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) return 2;
  const pid_t p2p_child = fork();
  if (p2p_child == 0) {
    listener.close();
    p2p_receiver(to_parent[1], to_child[0]);
  }
  listener.close();
  auto plain = net::connect_tcp("127.0.0.1", plain_port, 10000);
  net::tune_bulk(plain.get(), 4 << 20);

  std::mutex mu;
  std::condition_variable cv;
  int acks = 0;
  bool bye_sent = false;
  net::p2p_transport ep(
      0, "127.0.0.1", 0, secret,
      [&](int, wire::tensor_meta, std::vector<uint8_t>) {
        std::lock_guard<std::mutex> lock(mu);
        ++acks;
        cv.notify_all();
      },
      [](int from, const wire::error& e) {
        std::fprintf(stderr, "p2p sender: rank %d: %s\n", from, e.message.c_str());
        std::_Exit(2);
      });
  uint16_t peer = 0;
  const uint16_t mine = ep.port();
  if (read(to_parent[0], &peer, sizeof peer) != 2 || write(to_child[1], &mine, sizeof mine) != 2) return 2;
  auto check = [](std::optional<std::string> err) {
    if (!err) return;
    std::fprintf(stderr, "p2p send: %s\n", err->c_str());
    std::_Exit(2);
  };
  auto plain_round = [&](const std::vector<uint8_t>& payload, size_t k) {
    for (size_t i = 0; i < k; ++i) {
      const uint64_t n = payload.size() | (i + 1 == k ? uint64_t{1} << 63 : 0);
      iovec iov[2] = {{const_cast<uint64_t*>(&n), 8}, {const_cast<uint8_t*>(payload.data()), payload.size()}};
      size_t left = 8 + payload.size();
      while (left > 0) {  // blocking writev; after a partial write, skip what went out
        ssize_t w = ::writev(plain.get(), iov, 2);
        if (w <= 0) std::_Exit(2);
        left -= static_cast<size_t>(w);
        for (auto& v : iov) {
          const size_t d = std::min(v.iov_len, static_cast<size_t>(w));
          v.iov_base = static_cast<uint8_t*>(v.iov_base) + d;
          v.iov_len -= d;
          w -= static_cast<ssize_t>(d);
        }
      }
    }
    char ack;
    if (!recv_all(plain.get(), &ack, 1)) std::_Exit(2);
  };
  auto p2p_round = [&](const std::vector<uint8_t>& payload, size_t k) {
    std::unique_lock<std::mutex> lock(mu);
    const int want = acks + 1;
    lock.unlock();
    for (size_t i = 0; i < k; ++i)
      ep.send(1, "127.0.0.1", peer,
              {i, i + 1 == k ? "last" : "act", dtype::u8, {static_cast<int64_t>(payload.size())}},
              payload.data(), payload.size(), check);
    lock.lock();
    cv.wait(lock, [&] { return acks >= want; });
  };

  std::printf("| size | messages/round | plain TCP (GB/s) | troupe p2p (GB/s) | p2p / plain |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (size_t size : sizes) {
    const std::vector<uint8_t> payload(size, 0x5a);
    const size_t k = messages_for(size);
    std::vector<double> tp, tq;
    for (int r = 0; r <= rounds; ++r) {
      auto t0 = clock_type::now();
      plain_round(payload, k);
      const double a = seconds(t0);
      t0 = clock_type::now();
      p2p_round(payload, k);
      const double b = seconds(t0);
      if (r > 0) tp.push_back(a), tq.push_back(b);
    }
    const double bytes = static_cast<double>(size * k), a = bytes / median(tp) / 1e9, b = bytes / median(tq) / 1e9;
    std::printf("| %zu KiB | %zu | %.2f | %.2f | %.2f |\n", size >> 10, k, a, b, b / a);
    std::fflush(stdout);
  }
  plain.close();
  ep.send(1, "127.0.0.1", peer, {0, "bye", dtype::u8, {0}}, nullptr, 0, [&](std::optional<std::string>) {
    std::lock_guard<std::mutex> lock(mu);
    bye_sent = true;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return bye_sent; });
  }
  waitpid(plain_child, nullptr, 0);
  waitpid(p2p_child, nullptr, 0);
  return 0;
}
