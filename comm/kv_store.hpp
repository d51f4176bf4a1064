// A key-value store for the rendezvous of an engine that brings its own (Gloo's connectFullMesh,
// which publishes each rank's pair addresses under a key and waits for the others'). A group's
// first member serves it on a port admitted through auth_acceptor, like every other port of a
// job, so only processes that know the job's secret reach it; the other members connect with the
// secret. A key is set once and read by whoever waits for it; nothing is ever deleted, and the
// store lives as long as its group (a few hundred bytes per member).
//
// Requests (client -> server, after auth), replies (server -> client):
//   set: 'S' | key len u16 | key | value len u32 | value    ->  status u8
//   get: 'G' | key len u16 | key | wait ms u32              ->  status u8 [| value len u32 | value]
// status: 0 ok, 1 the key did not appear in time, 2 refused (a malformed request; the connection
// is then closed). Keys are at most 256 bytes, values at most 1 MiB: nothing a rendezvous needs is
// larger, and no length a peer sends makes the server allocate more.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/auth_acceptor.hpp"

namespace troupe::net {

constexpr size_t kv_max_key_bytes = 256;
constexpr size_t kv_max_value_bytes = size_t{1} << 20;

struct kv_options {
  int auth_timeout_ms = 5000;  // a connection that does not prove the secret by then is dropped
  int io_timeout_ms = 30000;   // a request or reply that stalls this long fails
};

// get's error when the key did not appear in time (every other failure is a plain net_error).
struct kv_timeout : net_error {
  using net_error::net_error;
};

class kv_store {
 public:
  virtual ~kv_store() = default;
  // Throws net_error for a key or value over the limits, or a broken connection.
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  // The key's value once it is set; throws kv_timeout naming the key after timeout_ms.
  virtual std::vector<char> get(const std::string& key, int timeout_ms) = 0;
};

class kv_server final : public kv_store {
 public:
  // Listens on host:port (0: any; see port()) and serves from construction on.
  kv_server(const std::string& host, uint16_t port, std::string secret, kv_options opts = {});
  ~kv_server() override;  // closes every connection and joins the serving threads
  uint16_t port() const { return acceptor_.port(); }
  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key, int timeout_ms) override;
  int refused() const { return acceptor_.refused() + refused_; }  // connections and requests refused

 private:
  void admit_loop();
  void serve(int fd, std::string who);

  auth_acceptor acceptor_;
  kv_options opts_;
  std::atomic<bool> stop_{false};
  std::atomic<int> refused_{0};
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  std::vector<socket_fd> clients_;  // shut down at destruction, which wakes their threads
  std::vector<std::thread> threads_;
  std::thread admit_;
};

// A member other than the first: connects to host:port and proves the secret as `claim` (its rank
// in the group). Throws net_error when it cannot within connect_timeout_ms.
std::unique_ptr<kv_store> kv_connect(const std::string& host, uint16_t port, const std::string& secret, uint32_t claim,
                                     int connect_timeout_ms, kv_options opts = {});

}  // namespace troupe::net
