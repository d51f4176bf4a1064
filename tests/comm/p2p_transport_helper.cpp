// The far process of p2p_transport.test.cpp's cross-process tests: an endpoint that sends every
// tensor it receives from PEER_RANK back to it, unchanged, and exits once COUNT of them are
// written back. Exit 0: all echoed; 2: an error (message on stderr); 3: COUNT never came.
// It deliberately has no gtest: it is a process, not a test.
//
// usage: p2p_transport_helper RANK SECRET PEER_RANK PEER_PORT COUNT
//   prints "PORT <n>" (its own listening port) on stdout first.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>

#include "comm/p2p_transport.hpp"

using namespace troupe;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s RANK SECRET PEER_RANK PEER_PORT COUNT\n", argv[0]);
    return 2;
  }
  const int rank = std::stoi(argv[1]), peer = std::stoi(argv[3]), count = std::stoi(argv[5]);
  const auto peer_port = static_cast<uint16_t>(std::stoi(argv[4]));
  std::mutex mu;
  std::condition_variable cv;
  int echoed = 0;
  std::string failure;
  std::deque<std::vector<uint8_t>> held;  // each tensor stays alive until it is written back
  std::unique_ptr<net::p2p_transport> ep;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.empty()) failure = why;
    cv.notify_all();
  };
  try {
    ep = std::make_unique<net::p2p_transport>(
        rank, "127.0.0.1", 0, argv[2],
        [&](int from, wire::tensor_meta meta, std::vector<uint8_t> bytes) {
          if (from != peer) return fail("a tensor from rank " + std::to_string(from));
          held.push_back(std::move(bytes));
          const auto& b = held.back();
          // On the endpoint's thread: send only queues, so this cannot wait on itself.
          ep->send(peer, "127.0.0.1", peer_port, std::move(meta), b.data(), b.size(),
                   [&](std::optional<std::string> err) {
                     if (err) return fail("echo: " + *err);
                     std::lock_guard<std::mutex> lock(mu);
                     ++echoed;
                     cv.notify_all();
                   });
        },
        [&](int from, const wire::error& e) { fail("rank " + std::to_string(from) + ": " + e.message); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 2;
  }
  std::printf("PORT %u\n", ep->port());
  std::fflush(stdout);
  std::unique_lock<std::mutex> lock(mu);
  const bool done = cv.wait_for(lock, std::chrono::seconds(60), [&] { return echoed >= count || !failure.empty(); });
  if (!failure.empty()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, failure.c_str());
    return 2;
  }
  return done ? 0 : 3;
}
