// Rendezvous server and client. The server's auth_acceptor runs every handshake concurrently,
// each with its own short deadline, so a peer without the secret is refused (and logged) before
// a single byte of its hello is read, and silent connections delay no real rank. Hellos come
// only from authenticated ranks and are read one at a time.
#include "comm/rendezvous.hpp"

#include <algorithm>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "comm/tcp_auth.hpp"

namespace troupe::net {
namespace {

constexpr size_t max_host_bytes = 255;

void put_u16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v));
  b.push_back(static_cast<uint8_t>(v >> 8));
}

std::vector<uint8_t> encode_addr(const peer_addr& a) {
  std::vector<uint8_t> b;
  put_u16(b, a.port);
  put_u16(b, static_cast<uint16_t>(a.host.size()));
  b.insert(b.end(), a.host.begin(), a.host.end());
  return b;
}

peer_addr read_addr(int fd, int timeout_ms) {
  uint16_t port_len[2];
  read_all(fd, port_len, sizeof port_len, timeout_ms, "rendezvous address");
  if (port_len[1] == 0 || port_len[1] > max_host_bytes)
    throw net_error("rendezvous: host of " + std::to_string(port_len[1]) + " bytes");
  peer_addr a;
  a.port = port_len[0];
  a.host.resize(port_len[1]);
  read_all(fd, a.host.data(), a.host.size(), timeout_ms, "rendezvous address");
  return a;
}

}  // namespace

rendezvous_server::rendezvous_server(const std::string& host, uint16_t port, int world, std::string secret,
                                     rendezvous_options opts)
    : acceptor_(listen_tcp(host, port), secret, "rendezvous", opts.auth_timeout_ms), world_(world),
      secret_(std::move(secret)), opts_(opts) {
  port_ = acceptor_.port();
}

std::vector<peer_addr> rendezvous_server::run(const peer_addr& self) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(opts_.timeout_ms);
  std::vector<peer_addr> table(static_cast<size_t>(world_));
  std::vector<socket_fd> members(static_cast<size_t>(world_));
  table[0] = self;
  int joined = 1;
  while (joined < world_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    auto admitted = acceptor_.next(static_cast<int>(std::clamp<int64_t>(left, 0, rendezvous_poll_ms)));
    if (!admitted) {
      std::string missing;
      for (int r = 1; r < world_; ++r)
        if (!members[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      if (opts_.cancelled && opts_.cancelled())
        throw net_error("rendezvous: the job ended while ranks " + missing + " were still to join");
      if (clock::now() < deadline) continue;
      throw net_error("rendezvous: ranks " + missing + " did not join within " + std::to_string(opts_.timeout_ms) +
                      " ms");
    }
    socket_fd c = std::move(admitted->fd);
    const std::string who = admitted->who;
    const std::optional<uint32_t> claim = admitted->claim;
    try {
      uint32_t hello[2];
      read_all(c.get(), hello, sizeof hello, opts_.auth_timeout_ms, "rendezvous hello");
      peer_addr addr = read_addr(c.get(), opts_.auth_timeout_ms);
      const uint32_t rank = hello[0], world = hello[1];
      std::string why;
      if (world != static_cast<uint32_t>(world_))
        why = "world size " + std::to_string(world) + ", this job has " + std::to_string(world_);
      else if (rank == 0 || rank >= world || rank != *claim)
        why = "rank " + std::to_string(rank) + " (authenticated as " + std::to_string(*claim) + ")";
      else if (members[rank])
        why = "rank " + std::to_string(rank) + " joined already";
      if (!why.empty()) {
        ++refused_;
        spdlog::error("rendezvous: refused {}: {}", who, why);
        const uint8_t refused = 1;
        write_all(c.get(), &refused, 1, opts_.auth_timeout_ms, "rendezvous refusal");
        continue;
      }
      table[rank] = std::move(addr);
      members[rank] = std::move(c);
      ++joined;
    } catch (const net_error& e) {
      ++refused_;
      spdlog::error("rendezvous: refused {}: {}", who, e.what());
    }
  }
  std::vector<uint8_t> reply{0};
  for (const auto& a : table) {
    auto b = encode_addr(a);
    reply.insert(reply.end(), b.begin(), b.end());
  }
  for (int r = 1; r < world_; ++r)
    write_all(members[static_cast<size_t>(r)].get(), reply.data(), reply.size(), opts_.auth_timeout_ms,
              "rendezvous table");
  return table;
}

rendezvous_client::rendezvous_client(const std::string& master_host, uint16_t master_port, int rank, int world,
                                     std::string secret, rendezvous_options opts)
    : rank_(rank), world_(world), opts_(opts) {
  s_ = connect_tcp(master_host, master_port, opts_.timeout_ms);
  auto pending = auth_respond(s_.get(), secret, static_cast<uint32_t>(rank), opts_.timeout_ms);
  auth_finish(s_.get(), secret, pending, opts_.timeout_ms);
  local_host_ = net::local_host(s_.get());
}

std::vector<peer_addr> rendezvous_client::join(uint16_t data_port) {
  std::vector<uint8_t> hello(8);
  const uint32_t rw[2] = {static_cast<uint32_t>(rank_), static_cast<uint32_t>(world_)};
  std::memcpy(hello.data(), rw, 8);
  auto addr = encode_addr({local_host_, data_port});
  hello.insert(hello.end(), addr.begin(), addr.end());
  write_all(s_.get(), hello.data(), hello.size(), opts_.timeout_ms, "rendezvous hello");
  uint8_t status = 1;
  read_all(s_.get(), &status, 1, opts_.timeout_ms, "rendezvous reply");
  if (status != 0) throw net_error("rendezvous: rank 0 refused rank " + std::to_string(rank_) + " (see its log)");
  std::vector<peer_addr> table;
  for (int r = 0; r < world_; ++r) table.push_back(read_addr(s_.get(), opts_.timeout_ms));
  s_.close();
  return table;
}

}  // namespace troupe::net
