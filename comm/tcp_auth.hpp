// The job's shared secret and the mutual challenge-response every TCP connection of the job runs
// before anything else is read from it: HMAC-SHA256 (OpenSSL) over fresh nonces, so the secret
// never crosses the wire and a recorded handshake cannot be replayed. It deliberately does not
// encrypt the traffic after the handshake (the control plane's TLS is tls_channel.hpp's job).
//
// Messages (acceptor A, connector C; tag = "troupe-auth-v1"):
//   A -> C: nonce_a[32]
//   C -> A: nonce_c[32] | claim u32 | HMAC(secret, tag | "C" | nonce_a | nonce_c | claim)
//   A -> C: HMAC(secret, tag | "A" | nonce_c | nonce_a | claim)
// `claim` is what the connector says it is (its rank); the acceptor checks it after the MAC.
// The steps are separate functions so that a ring can interleave them without a circular wait.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace troupe::net {

// 32 random hex characters from OpenSSL's generator: a job secret nobody chose.
std::string random_secret();

// The shortest secret a job takes, and the largest --secret-file read.
inline constexpr size_t min_secret_bytes = 16;
inline constexpr uint64_t secret_file_limit = 64 << 10;

// The secret from --secret-file (first line, trailing newline dropped; the file read through
// storage's bounded reader) or else TROUPE_SECRET. Throws net_error for an unreadable, special or
// oversized file, an empty first line, or a secret shorter than min_secret_bytes.
std::optional<std::string> load_secret(const std::map<std::string, std::string>& env,
                                       const std::optional<std::string>& secret_file);

using nonce = std::array<uint8_t, 32>;

// What a connector keeps between steps 2 and 4.
struct auth_pending {
  nonce challenge{};  // the acceptor's nonce
  nonce mine{};
  uint32_t claim = 0;
};

// Acceptor, step 1: send a fresh nonce.
nonce auth_challenge(int fd, int timeout_ms);
// Connector, step 2: read the challenge, answer it with our claim and a nonce of our own.
auth_pending auth_respond(int fd, const std::string& secret, uint32_t claim, int timeout_ms);
// Acceptor, step 3: read and check the answer; on success send our proof and return the claim.
// On a wrong MAC returns nullopt having sent nothing more: the caller logs and closes.
std::optional<uint32_t> auth_verify(int fd, const std::string& secret, const nonce& challenge, int timeout_ms);
// Step 3 for an acceptor that gathered the connector's answer itself (auth_acceptor reads it
// without blocking, from many connections at once): checks it and sends the proof.
constexpr size_t auth_answer_bytes = 32 + 4 + 32;
using auth_answer = std::array<uint8_t, auth_answer_bytes>;
std::optional<uint32_t> auth_check_answer(int fd, const std::string& secret, const nonce& challenge,
                                          const auth_answer& answer, int timeout_ms);
// Connector, step 4: check the acceptor's proof (it knows the secret too). Throws net_error.
void auth_finish(int fd, const std::string& secret, const auth_pending& p, int timeout_ms);
// Steps 2 and 4 for a connector that does its own non-blocking I/O (p2p_transport's poll loop,
// which must not block on one peer's handshake): the answer to the challenge it read, and the
// check of the proof it read back.
using auth_proof = std::array<uint8_t, 32>;
auth_pending auth_answer_for(const std::string& secret, uint32_t claim, const nonce& challenge, auth_answer& out);
bool auth_proof_ok(const std::string& secret, const auth_pending& p, const auth_proof& proof);
// The same challenge-response over a channel that is not a socket of troupe's (a Gloo pair): a
// fresh challenge, and the claim of an answer to it whose MAC holds (nullopt otherwise).
nonce auth_fresh_nonce();
std::optional<uint32_t> auth_answer_claim(const std::string& secret, const nonce& challenge, const auth_answer& answer);

}  // namespace troupe::net
