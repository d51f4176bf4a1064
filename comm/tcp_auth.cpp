// Secret loading and the HMAC-SHA256 challenge-response. OpenSSL provides the MAC, the random
// nonces and the constant-time comparison; nothing here is hand-rolled cryptography.
#include "comm/tcp_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>
#include <vector>

#include "comm/tcp_socket.hpp"
#include "storage/input_file.hpp"

namespace troupe::net {
namespace {

constexpr char tag[] = "troupe-auth-v1";
using mac = std::array<uint8_t, 32>;

mac hmac(const std::string& secret, char role, const nonce& first, const nonce& second, uint32_t claim) {
  std::vector<uint8_t> msg(tag, tag + sizeof tag - 1);
  msg.push_back(static_cast<uint8_t>(role));
  msg.insert(msg.end(), first.begin(), first.end());
  msg.insert(msg.end(), second.begin(), second.end());
  for (int i = 0; i < 4; ++i) msg.push_back(static_cast<uint8_t>(claim >> (8 * i)));
  mac out{};
  unsigned len = 0;
  if (!HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(), out.data(), &len) ||
      len != out.size())
    throw net_error("HMAC-SHA256 failed");
  return out;
}

nonce fresh_nonce() {
  nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) throw net_error("RAND_bytes failed");
  return n;
}

}  // namespace

std::string random_secret() {
  uint8_t bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw net_error("RAND_bytes failed");
  std::string s;
  for (uint8_t b : bytes) {
    s += "0123456789abcdef"[b >> 4];
    s += "0123456789abcdef"[b & 15];
  }
  return s;
}

std::optional<std::string> load_secret(const std::map<std::string, std::string>& env,
                                       const std::optional<std::string>& secret_file) {
  std::string s, origin;
  if (secret_file) {
    origin = "--secret-file " + *secret_file;
    try {  // a FIFO, a device or a huge file is refused by name, never read without end
      s = storage::read_input_file(*secret_file, "--secret-file", secret_file_limit);
    } catch (const std::exception& e) {
      throw net_error(e.what());
    }
    s = s.substr(0, s.find('\n'));
    if (!s.empty() && s.back() == '\r') s.pop_back();
    if (s.empty()) throw net_error(origin + ": the first line is empty");
  } else {
    auto it = env.find("TROUPE_SECRET");
    if (it == env.end()) return std::nullopt;
    origin = "TROUPE_SECRET";
    s = it->second;
    if (s.empty()) throw net_error("TROUPE_SECRET is set but empty");
  }
  // The gate answers a wrong guess at once, so a short secret falls to guessing in seconds.
  if (s.size() < min_secret_bytes)
    throw net_error(origin + ": the secret has " + std::to_string(s.size()) + " byte" + (s.size() == 1 ? "" : "s") +
                    ", fewer than the " + std::to_string(min_secret_bytes) +
                    " a job's secret needs (`openssl rand -hex 16` makes one)");
  return s;
}

nonce auth_challenge(int fd, int timeout_ms) {
  nonce n = fresh_nonce();
  write_all(fd, n.data(), n.size(), timeout_ms, "auth challenge");
  return n;
}

auth_pending auth_answer_for(const std::string& secret, uint32_t claim, const nonce& challenge, auth_answer& out) {
  auth_pending p;
  p.claim = claim;
  p.challenge = challenge;
  p.mine = fresh_nonce();
  const mac m = hmac(secret, 'C', p.challenge, p.mine, claim);
  std::memcpy(out.data(), p.mine.data(), 32);
  std::memcpy(out.data() + 32, &claim, 4);
  std::memcpy(out.data() + 36, m.data(), 32);
  return p;
}

auth_pending auth_respond(int fd, const std::string& secret, uint32_t claim, int timeout_ms) {
  nonce challenge{};
  read_all(fd, challenge.data(), challenge.size(), timeout_ms, "auth challenge");
  auth_answer out{};
  const auth_pending p = auth_answer_for(secret, claim, challenge, out);
  write_all(fd, out.data(), out.size(), timeout_ms, "auth response");
  return p;
}

std::optional<uint32_t> auth_verify(int fd, const std::string& secret, const nonce& challenge, int timeout_ms) {
  auth_answer in{};
  read_all(fd, in.data(), in.size(), timeout_ms, "auth response");
  return auth_check_answer(fd, secret, challenge, in, timeout_ms);
}

nonce auth_fresh_nonce() { return fresh_nonce(); }

std::optional<uint32_t> auth_answer_claim(const std::string& secret, const nonce& challenge, const auth_answer& in) {
  nonce theirs{};
  uint32_t claim = 0;
  std::memcpy(theirs.data(), in.data(), 32);
  std::memcpy(&claim, in.data() + 32, 4);
  const mac want = hmac(secret, 'C', challenge, theirs, claim);
  if (CRYPTO_memcmp(want.data(), in.data() + 36, want.size()) != 0) return std::nullopt;
  return claim;
}

std::optional<uint32_t> auth_check_answer(int fd, const std::string& secret, const nonce& challenge,
                                          const auth_answer& in, int timeout_ms) {
  const std::optional<uint32_t> claim = auth_answer_claim(secret, challenge, in);
  if (!claim) return std::nullopt;
  nonce theirs{};
  std::memcpy(theirs.data(), in.data(), 32);
  const mac proof = hmac(secret, 'A', theirs, challenge, *claim);
  write_all(fd, proof.data(), proof.size(), timeout_ms, "auth proof");
  return claim;
}

bool auth_proof_ok(const std::string& secret, const auth_pending& p, const auth_proof& proof) {
  const mac want = hmac(secret, 'A', p.mine, p.challenge, p.claim);
  return CRYPTO_memcmp(want.data(), proof.data(), want.size()) == 0;
}

void auth_finish(int fd, const std::string& secret, const auth_pending& p, int timeout_ms) {
  auth_proof got{};
  try {
    read_all(fd, got.data(), got.size(), timeout_ms, "auth proof");
  } catch (const net_error& e) {  // an acceptor closes on a wrong MAC without saying why
    throw net_error(std::string("auth: refused by the peer (wrong secret?): ") + e.what());
  }
  if (!auth_proof_ok(secret, p, got)) throw net_error("auth: " + peer_name(fd) + " does not know the job's secret");
}

}  // namespace troupe::net
