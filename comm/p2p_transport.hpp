// The point-to-point data plane: pipeline stages in different processes exchange activations and
// their gradients as wire frames (comm/wire_frame.hpp, CRC-checked) over TCP connections that
// proved the job's secret before a byte of payload is read (auth_acceptor, tcp_auth). One
// endpoint per rank listens for its peers and connects lazily, one directed connection per
// (sender, receiver) pair, on the first send to each peer. One thread of the endpoint's own runs
// a poll loop over every socket, so a slow peer delays nobody else and abort() ends it at once.
// It deliberately knows no actors: the owner turns the callbacks into messages.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/auth_acceptor.hpp"
#include "comm/tcp_socket.hpp"
#include "comm/wire_frame.hpp"

namespace troupe::net {

struct p2p_options {
  wire::limits limits;                 // frame size, and the largest tensor a peer may send
  int io_timeout_ms = 60000;           // a connection that moves no byte this long mid-frame is dead
  int connect_timeout_ms = 30000;      // a first send waits this long for its peer to listen
  int auth_timeout_ms = 5000;          // a connecting stranger's time to prove the secret
  int socket_buffer_bytes = 4 << 20;   // SO_SNDBUF/SO_RCVBUF of every connection
};

// Every callback runs on the endpoint's I/O thread, one at a time, in the order the events
// happened; none may block or throw (the owning actor turns them into messages). They may call
// send() and abort(), never the destructor (it joins the thread they run on).
// Tensors from one sender arrive in the order it sent them.
using p2p_receive_fn = std::function<void(int from_rank, wire::tensor_meta meta, std::vector<uint8_t> bytes)>;
// Bad input from a peer (bad magic, checksum, oversized, truncated: a close or a stall
// mid-tensor). The endpoint has closed that connection and goes on serving the others.
using p2p_error_fn = std::function<void(int peer_rank, const wire::error& e)>;
// nullopt once every byte of the tensor is written to the peer's socket (the caller may reuse
// its buffer), else why it was not: connect or handshake failure, timeout, "stopped".
using p2p_send_done_fn = std::function<void(std::optional<std::string> error)>;

class p2p_transport {
 public:
  // Listens on host:port (0: any free port, see port()) and starts the I/O thread. Throws
  // net_error if it cannot bind, or for an empty secret.
  p2p_transport(int rank, const std::string& host, uint16_t port, std::string secret, p2p_receive_fn on_receive,
                p2p_error_fn on_error, p2p_options opts = {});
  ~p2p_transport();  // abort(), then joins its threads; never waits on a peer
  p2p_transport(const p2p_transport&) = delete;
  p2p_transport& operator=(const p2p_transport&) = delete;

  int rank() const { return rank_; }
  uint16_t port() const { return port_; }
  int refused() const;  // connections that did not prove the secret (each logged)

  // Queues a tensor for peer_rank, listening at host:port; connects on the first send to it.
  // bytes[n] must stay valid and unchanged until `done` runs: frames are written from it
  // without a copy. Throws std::invalid_argument for a meta that does not match n (a caller
  // bug). After abort(), `done` runs at once, on the caller's thread, with "stopped".
  void send(int peer_rank, const std::string& host, uint16_t port, wire::tensor_meta meta, const void* bytes,
            size_t n, p2p_send_done_fn done);

  // From any thread: ends everything now. Queued and half-written sends complete with
  // "stopped", every connection closes, nothing is received any more.
  void abort();

  struct peer_out;  // one outbound connection and its queue (p2p_transport.cpp)
  struct peer_in;   // one inbound connection and its frame reader

 private:
  struct send_req {
    int peer;
    std::string host;
    uint16_t port;
    wire::tensor_meta meta;
    const uint8_t* bytes;
    size_t n;
    p2p_send_done_fn done;
  };
  void loop();
  void wake();

  int rank_;
  std::string secret_;
  p2p_receive_fn on_receive_;
  p2p_error_fn on_error_;
  p2p_options opts_;
  std::string name_;  // "p2p rank N", for logs and errors
  uint16_t port_ = 0;
  socket_fd wake_fd_;  // eventfd: a new send, an admitted connection, or abort
  std::unique_ptr<auth_acceptor> acceptor_;
  std::mutex mu_;
  std::deque<send_req> submitted_;  // handed to the I/O thread under mu_
  bool stopped_ = false;            // under mu_: later sends complete at once
  std::atomic<bool> abort_{false};
  std::thread thread_;
};

}  // namespace troupe::net
