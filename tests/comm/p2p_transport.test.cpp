// p2p_transport: tensors of every awkward size round-trip bitwise between two endpoints in this
// process and through a second process (p2p_transport_helper echoes them); order holds for many
// tensors; strangers, corrupt and truncated frames and stalls are refused with the peer named
// while the endpoint goes on serving; abort() ends a send blocked on a peer that never reads.
// No assertion here is on wall-clock time: waits have generous limits and only say "it ended".
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "comm/net_gate.hpp"
#include "comm/p2p_transport.hpp"
#include "comm/tcp_auth.hpp"
#include "tests/comm/p2p_test_peers.hpp"
#include "tests/comm/tcp_process_group.hpp"

using namespace troupe;
using namespace troupe::net;
using troupe::test::process_group;
using troupe::test::silent_peer;

namespace {

const std::string helper = TROUPE_P2P_HELPER;
const std::string secret = "s3cret";
constexpr auto patience = std::chrono::seconds(30);  // "it happened", not "it was fast"

struct received {
  int from;
  wire::tensor_meta meta;
  std::vector<uint8_t> bytes;
};

// What an endpoint's callbacks delivered, for the test thread to wait on.
struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<received> tensors;
  std::vector<std::pair<int, wire::error>> errors;
  p2p_receive_fn on_receive() {
    return [this](int from, wire::tensor_meta m, std::vector<uint8_t> b) {
      std::lock_guard<std::mutex> lock(mu);
      tensors.push_back({from, std::move(m), std::move(b)});
      cv.notify_all();
    };
  }
  p2p_error_fn on_error() {
    return [this](int from, const wire::error& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.emplace_back(from, e);
      cv.notify_all();
    };
  }
  bool wait_tensors(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, patience, [&] { return tensors.size() >= n; });
  }
  bool wait_errors(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, patience, [&] { return errors.size() >= n; });
  }
};

// A send's completion as a future, so that a test waits on it with a limit.
struct completion {
  std::shared_ptr<std::promise<std::optional<std::string>>> p = std::make_shared<std::promise<std::optional<std::string>>>();
  std::future<std::optional<std::string>> f = p->get_future();
  p2p_send_done_fn fn() {
    auto keep = p;
    return [keep](std::optional<std::string> e) { keep->set_value(std::move(e)); };
  }
  // "ok" when written, the error otherwise, "pending" if nothing came within the patience.
  std::string get() {
    if (f.wait_for(patience) != std::future_status::ready) return "pending";
    auto e = f.get();
    return e ? *e : "ok";
  }
};

// Bytes that differ at every position and between tensors, so a shifted or swapped chunk shows.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

struct sample {
  wire::tensor_meta meta;
  std::vector<uint8_t> bytes;
};

// 0 bytes, one float, 3 bytes (padding), exactly one frame's payload, and 20 MB + 12 bytes
// (six frames, the last one partial).
std::vector<sample> samples() {
  const size_t frame = wire::chunk_payload_bytes({});
  const int64_t big = (int64_t{20} << 20) / 4 + 3;
  std::vector<sample> s;
  s.push_back({{1, "empty", dtype::f32, {0, 4}}, {}});
  s.push_back({{2, "one", dtype::f32, {1}}, pattern(4, 2)});
  s.push_back({{3, "odd", dtype::u8, {3}}, pattern(3, 3)});
  s.push_back({{4, "frame", dtype::u8, {static_cast<int64_t>(frame)}}, pattern(frame, 4)});
  s.push_back({{5, "stage1.act", dtype::f32, {big}}, pattern(static_cast<size_t>(big) * 4, 5)});
  return s;
}

void expect_same(const sample& want, const received& got, int from) {
  EXPECT_EQ(got.from, from);
  EXPECT_EQ(got.meta.tensor_id, want.meta.tensor_id);
  EXPECT_EQ(got.meta.name, want.meta.name);
  EXPECT_EQ(got.meta.type, want.meta.type);
  EXPECT_EQ(got.meta.shape, want.meta.shape);
  ASSERT_EQ(got.bytes.size(), want.bytes.size()) << want.meta.name;
  EXPECT_TRUE(got.bytes == want.bytes) << want.meta.name << " differs";
}

// An authenticated raw connection, as a peer that knows the secret but sends what it likes.
socket_fd raw_peer(uint16_t port, uint32_t rank) { return connect_through_gate("127.0.0.1", port, secret, rank, 5000); }

}  // namespace

TEST(P2pTransport, TensorsOfEverySizeRoundTripBitwiseInOneProcess) {
  inbox got;
  p2p_transport a(0, "127.0.0.1", 0, secret, {}, {});
  p2p_transport b(1, "127.0.0.1", 0, secret, got.on_receive(), got.on_error());
  const auto s = samples();
  std::vector<completion> done(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    a.send(1, "127.0.0.1", b.port(), s[i].meta, s[i].bytes.data(), s[i].bytes.size(), done[i].fn());
  for (auto& d : done) EXPECT_EQ(d.get(), "ok");
  ASSERT_TRUE(got.wait_tensors(s.size()));
  for (size_t i = 0; i < s.size(); ++i) expect_same(s[i], got.tensors[i], 0);
  EXPECT_TRUE(got.errors.empty());
}

TEST(P2pTransport, ManyTensorsFromOneSenderArriveInOrder) {
  inbox got;
  p2p_transport a(3, "127.0.0.1", 0, secret, {}, {});
  p2p_transport b(4, "127.0.0.1", 0, secret, got.on_receive(), got.on_error());
  constexpr int n = 300;
  std::vector<std::vector<uint8_t>> bytes;
  for (int i = 0; i < n; ++i) bytes.push_back(pattern(static_cast<size_t>((i * 7919) % 70000), static_cast<uint32_t>(i)));
  completion last;
  for (int i = 0; i < n; ++i)
    a.send(4, "127.0.0.1", b.port(), {static_cast<uint64_t>(i), "mb", dtype::u8,
                                      {static_cast<int64_t>(bytes[static_cast<size_t>(i)].size())}},
           bytes[static_cast<size_t>(i)].data(), bytes[static_cast<size_t>(i)].size(), i + 1 == n ? last.fn() : nullptr);
  EXPECT_EQ(last.get(), "ok");
  ASSERT_TRUE(got.wait_tensors(n));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(got.tensors[static_cast<size_t>(i)].meta.tensor_id, static_cast<uint64_t>(i));
    EXPECT_TRUE(got.tensors[static_cast<size_t>(i)].bytes == bytes[static_cast<size_t>(i)]) << "tensor " << i;
  }
}

TEST(P2pTransport, TensorsRoundTripBitwiseThroughAnotherProcess) {
  inbox got;
  p2p_transport me(0, "127.0.0.1", 0, secret, got.on_receive(), got.on_error());
  const auto s = samples();
  process_group g;
  const int fd = g.spawn({helper, "1", secret, "0", std::to_string(me.port()), std::to_string(s.size())}, true);
  const int port = g.read_port(fd, 10000);
  ASSERT_GT(port, 0);
  std::vector<completion> done(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    me.send(1, "127.0.0.1", static_cast<uint16_t>(port), s[i].meta, s[i].bytes.data(), s[i].bytes.size(),
            done[i].fn());
  for (auto& d : done) EXPECT_EQ(d.get(), "ok");
  ASSERT_TRUE(got.wait_tensors(s.size()));
  for (size_t i = 0; i < s.size(); ++i) expect_same(s[i], got.tensors[i], 1);
  EXPECT_EQ(g.wait_all(30000), 0);
}

TEST(P2pTransport, WrongSecretIsRefusedAndCountedAndARealPeerGetsThrough) {
  inbox got;
  p2p_transport b(1, "127.0.0.1", 0, secret, got.on_receive(), got.on_error());
  EXPECT_THROW(connect_through_gate("127.0.0.1", b.port(), "guess", 0, 5000), net_error);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (b.refused() < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(b.refused(), 1);
  {  // an endpoint with the wrong secret: its send fails, saying why
    p2p_transport intruder(0, "127.0.0.1", 0, "guess", {}, {});
    uint8_t one = 1;
    completion refused;
    intruder.send(1, "127.0.0.1", b.port(), {1, "x", dtype::u8, {1}}, &one, 1, refused.fn());
    const std::string r = refused.get();
    EXPECT_NE(r.find("secret"), std::string::npos) << r;
  }
  EXPECT_EQ(b.refused(), 2);
  p2p_transport a(0, "127.0.0.1", 0, secret, {}, {});
  const auto x = pattern(4096, 9);
  completion done;
  a.send(1, "127.0.0.1", b.port(), {1, "x", dtype::u8, {4096}}, x.data(), x.size(), done.fn());
  EXPECT_EQ(done.get(), "ok");
  ASSERT_TRUE(got.wait_tensors(1));
  EXPECT_TRUE(got.tensors[0].bytes == x);
  EXPECT_TRUE(got.errors.empty()) << "a refused stranger is not the receiver's error";
}

// A frame with one body byte flipped, from a peer that did authenticate: reported as
// bad_checksum naming that peer, its connection closed, and another peer's tensor still arrives.
TEST(P2pTransport, CorruptFrameIsABadChecksumFromThatPeerAndOthersAreStillServed) {
  inbox got;
  p2p_transport b(1, "127.0.0.1", 0, secret, got.on_receive(), got.on_error());
  const auto x = pattern(1000, 11);
  auto frame = wire::encode_tensor({1, "x", dtype::u8, {1000}}, x.data(), x.size()).at(0);
  frame[wire::header_bytes + 100] ^= 0x04;
  socket_fd bad = raw_peer(b.port(), 7);
  write_all(bad.get(), frame.data(), frame.size(), 5000, "corrupt frame");
  ASSERT_TRUE(got.wait_errors(1));
  EXPECT_EQ(got.errors[0].first, 7);
  EXPECT_EQ(got.errors[0].second.code, wire::error_code::bad_checksum) << got.errors[0].second.message;
  EXPECT_NE(got.errors[0].second.message.find("rank 7"), std::string::npos) << got.errors[0].second.message;
  char c;
  EXPECT_THROW(read_all(bad.get(), &c, 1, 5000, "after the corrupt frame"), net_error) << "connection left open";
  p2p_transport a(0, "127.0.0.1", 0, secret, {}, {});
  completion done;
  a.send(1, "127.0.0.1", b.port(), {2, "y", dtype::u8, {1000}}, x.data(), x.size(), done.fn());
  EXPECT_EQ(done.get(), "ok");
  ASSERT_TRUE(got.wait_tensors(1));
  EXPECT_TRUE(got.tensors[0].bytes == x);
  EXPECT_EQ(got.errors.size(), 1u);
}

TEST(P2pTransport, PeerClosingMidTensorIsTruncatedAndAStallMidFrameTimesOut) {
  inbox got;
  p2p_options o;
  o.io_timeout_ms = 300;
  p2p_transport b(1, "127.0.0.1", 0, secret, got.on_receive(), got.on_error(), o);
  wire::limits lim;
  lim.max_frame_bytes = 4096;
  const auto x = pattern(10000, 12);
  const auto frames = wire::encode_tensor({1, "x", dtype::u8, {10000}}, x.data(), x.size(), lim);
  ASSERT_GT(frames.size(), 1u);
  {
    socket_fd closer = raw_peer(b.port(), 5);  // the first frame of several, then gone
    write_all(closer.get(), frames[0].data(), frames[0].size(), 5000, "first frame");
  }
  ASSERT_TRUE(got.wait_errors(1));
  EXPECT_EQ(got.errors[0].first, 5);
  EXPECT_EQ(got.errors[0].second.code, wire::error_code::truncated) << got.errors[0].second.message;
  socket_fd staller = raw_peer(b.port(), 6);  // half a frame, then silence with the socket open
  write_all(staller.get(), frames[0].data(), frames[0].size() / 2, 5000, "half a frame");
  ASSERT_TRUE(got.wait_errors(2));
  EXPECT_EQ(got.errors[1].first, 6);
  EXPECT_EQ(got.errors[1].second.code, wire::error_code::truncated) << got.errors[1].second.message;
  EXPECT_NE(got.errors[1].second.message.find("300 ms"), std::string::npos) << got.errors[1].second.message;
  EXPECT_TRUE(got.tensors.empty());
}

// A peer that proves the secret and then never reads: the send fills the socket buffers and
// blocks; abort() from this thread completes it with "stopped", and later sends fail at once.
TEST(P2pTransport, AbortEndsASendBlockedOnAPeerThatNeverReads) {
  silent_peer peer(secret);
  const uint16_t port = peer.port();
  auto a = std::make_unique<p2p_transport>(0, "127.0.0.1", 0, secret, nullptr, nullptr);
  const auto x = pattern(size_t{64} << 20, 13);  // far more than both socket buffers hold
  completion done;
  a->send(1, "127.0.0.1", port, {1, "x", dtype::u8, {static_cast<int64_t>(x.size())}}, x.data(), x.size(),
          done.fn());
  EXPECT_EQ(done.f.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout) << "a send that cannot be written completed";
  a->abort();
  const std::string r = done.get();
  EXPECT_NE(r.find("stopped"), std::string::npos) << r;
  completion after;
  a->send(1, "127.0.0.1", port, {2, "y", dtype::u8, {1}}, x.data(), 1, after.fn());
  EXPECT_NE(after.get().find("stopped"), std::string::npos);
  a.reset();  // joins its thread: must return, though the peer still holds the connection
}

TEST(P2pTransport, SendToAPortNobodyListensOnFailsNamingThePeer) {
  socket_fd taken = listen_tcp("127.0.0.1", 0);
  const uint16_t port = local_port(taken.get());
  taken.close();  // a port just freed: connections to it are refused
  p2p_options o;
  o.connect_timeout_ms = 300;
  p2p_transport a(0, "127.0.0.1", 0, secret, {}, {}, o);
  uint8_t one = 1;
  completion done;
  a.send(2, "127.0.0.1", port, {1, "x", dtype::u8, {1}}, &one, 1, done.fn());
  const std::string r = done.get();
  EXPECT_NE(r.find("rank 2"), std::string::npos) << r;
  EXPECT_NE(r.find("connect"), std::string::npos) << r;
  EXPECT_THROW(a.send(2, "127.0.0.1", port, {1, "x", dtype::u8, {2}}, &one, 1, nullptr), std::invalid_argument);
}
