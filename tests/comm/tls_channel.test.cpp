// tls_channel: the control plane's mutual TLS, terminated in troupe's own thread so that no
// middleman listens on a port (issue 35, item 1). Two peers with certificates the job's CA
// signed move megabytes both ways at once through their plain ends; a certificate another CA
// signed, a self-signed one, garbage and silence all fail the handshake with the reason named,
// within the deadline; closing one plain end closes the far one.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp_socket.hpp"
#include "comm/tls_channel.hpp"
#include "tests/scratch_dir.hpp"

using namespace troupe::net;
namespace fs = std::filesystem;

namespace {

struct key_and_cert {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~key_and_cert() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

// A P-256 key and a certificate for `cn`, signed by `issuer` (itself when null).
std::unique_ptr<key_and_cert> make_cert(const std::string& cn, const key_and_cert* issuer, bool is_ca) {
  auto kc = std::make_unique<key_and_cert>();
  kc->key = EVP_EC_gen("P-256");
  kc->cert = X509_new();
  X509_set_version(kc->cert, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(kc->cert), serial++);
  X509_gmtime_adj(X509_getm_notBefore(kc->cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(kc->cert), 86400);
  X509_set_pubkey(kc->cert, kc->key);
  X509_NAME* name = X509_get_subject_name(kc->cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(kc->cert, issuer ? X509_get_subject_name(issuer->cert) : name);
  if (is_ca) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, kc->cert, kc->cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    X509_add_ext(kc->cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(kc->cert, issuer ? issuer->key : kc->key, EVP_sha256());
  return kc;
}

void write_pem(const fs::path& p, const key_and_cert& kc, bool key) {
  FILE* f = std::fopen(p.c_str(), "w");
  ASSERT_NE(f, nullptr);
  if (key)
    PEM_write_PrivateKey(f, kc.key, nullptr, nullptr, 0, nullptr, nullptr);
  else
    PEM_write_X509(f, kc.cert);
  std::fclose(f);
}

class TlsChannel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = troupe::test_support::scratch_dir("tls-channel");
    fs::create_directories(dir_);
    auto ca = make_cert("job ca", nullptr, true);
    auto rogue_ca = make_cert("rogue ca", nullptr, true);
    write_pem(dir_ / "ca.pem", *ca, false);
    issue("node", ca.get());
    issue("rogue", rogue_ca.get());
    issue("stranger", nullptr);
    job_ = context_of("node");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void issue(const std::string& who, const key_and_cert* by) {
    auto kc = make_cert(who, by, false);
    write_pem(dir_ / (who + ".pem"), *kc, false);
    write_pem(dir_ / (who + ".key"), *kc, true);
  }
  std::shared_ptr<const tls_context> context_of(const std::string& who) {
    return std::make_shared<tls_context>((dir_ / (who + ".pem")).string(), (dir_ / (who + ".key")).string(),
                                         (dir_ / "ca.pem").string());
  }

  // A connected TCP pair on loopback: {server's end, client's end}.
  std::pair<socket_fd, socket_fd> tcp_pair() {
    socket_fd listener = listen_tcp("127.0.0.1", 0, 4);
    socket_fd client = connect_tcp("127.0.0.1", local_port(listener.get()), 2000);
    return {accept_tcp(listener.get(), 2000), std::move(client)};
  }

  // Runs the server's handshake in a thread; returns its channel or its error text.
  struct server_result {
    std::unique_ptr<tls_channel> channel;
    std::string error;
  };
  std::future<server_result> serve(socket_fd wire, int timeout_ms = 3000) {
    return std::async(std::launch::async, [this, w = std::move(wire), timeout_ms]() mutable {
      server_result r;
      try {
        r.channel = std::make_unique<tls_channel>(std::move(w), tls_channel::side::accept, job_, timeout_ms);
      } catch (const net_error& e) {
        r.error = e.what();
      }
      return r;
    });
  }

  fs::path dir_;
  std::shared_ptr<const tls_context> job_;
};

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return v;
}

}  // namespace

TEST_F(TlsChannel, TwoPeersWithTheJobsCertificatesMoveMegabytesBothWaysAtOnceThroughTheirPlainEnds) {
  auto [s, c] = tcp_pair();
  auto server = serve(std::move(s));
  tls_channel client(std::move(c), tls_channel::side::connect, job_, 3000);
  server_result sr = server.get();
  ASSERT_TRUE(sr.channel) << sr.error;
  socket_fd a = sr.channel->take_plain(), b = client.take_plain();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(client.take_plain()) << "the plain end is handed out once";
  // Both directions at once, far more than any socket buffer: a channel that let one direction
  // wait on the other would deadlock here.
  constexpr size_t n = size_t{24} << 20;
  const std::vector<char> ab = pattern(n, 1), ba = pattern(n, 7);
  auto send_ab = std::async(std::launch::async, [&] { write_all(a.get(), ab.data(), n, 20000, "a to b"); });
  auto send_ba = std::async(std::launch::async, [&] { write_all(b.get(), ba.data(), n, 20000, "b to a"); });
  std::vector<char> got_ab(n), got_ba(n);
  auto recv_ba = std::async(std::launch::async, [&] { read_all(a.get(), got_ba.data(), n, 20000, "at a"); });
  read_all(b.get(), got_ab.data(), n, 20000, "at b");
  recv_ba.get();
  send_ab.get();
  send_ba.get();
  EXPECT_TRUE(got_ab == ab) << "bytes from a arrived changed at b";
  EXPECT_TRUE(got_ba == ba) << "bytes from b arrived changed at a";
}

TEST_F(TlsChannel, ClosingOnePlainEndClosesTheFarOne) {
  auto [s, c] = tcp_pair();
  auto server = serve(std::move(s));
  auto client = std::make_unique<tls_channel>(std::move(c), tls_channel::side::connect, job_, 3000);
  server_result sr = server.get();
  ASSERT_TRUE(sr.channel) << sr.error;
  socket_fd far = sr.channel->take_plain();
  { socket_fd near = client->take_plain(); }  // the middleman closed its end
  char byte;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(far.get(), &byte, 1, 0), 0) << "the far end sees an orderly close";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(TlsChannel, ACertificateAnotherCaSignedIsRefusedOnBothSidesWithTheReasonNamed) {
  for (const std::string who : {"rogue", "stranger"}) {
    auto [s, c] = tcp_pair();
    auto server = serve(std::move(s));
    std::string client_error;
    try {
      tls_channel client(std::move(c), tls_channel::side::connect, context_of(who), 3000);
    } catch (const net_error& e) {
      client_error = e.what();
    }
    server_result sr = server.get();
    EXPECT_FALSE(sr.channel) << who << ": rank 0 accepted a certificate its CA did not sign";
    EXPECT_NE(sr.error.find("TLS handshake with 127.0.0.1:"), std::string::npos) << sr.error;
    EXPECT_NE(sr.error.find("certificate"), std::string::npos) << who << ": " << sr.error;
    EXPECT_FALSE(client_error.empty()) << who << ": the client thinks it got through";
  }
}

TEST_F(TlsChannel, AClientWithoutACertificateGarbageOrSilenceFailsTheHandshakeWithinItsDeadline) {
  {  // garbage: refused at once
    auto [s, c] = tcp_pair();
    auto server = serve(std::move(s), 5000);
    const std::string garbage(4000, 'g');
    write_all(c.get(), garbage.data(), garbage.size(), 2000, "garbage");
    const auto t0 = std::chrono::steady_clock::now();
    server_result sr = server.get();
    EXPECT_FALSE(sr.channel);
    EXPECT_FALSE(sr.error.empty());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4)) << "garbage waited for the deadline";
  }
  {  // silence: refused at the deadline
    auto [s, c] = tcp_pair();
    const auto t0 = std::chrono::steady_clock::now();
    server_result sr = serve(std::move(s), 300).get();
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_FALSE(sr.channel);
    EXPECT_NE(sr.error.find("no handshake within 300 ms"), std::string::npos) << sr.error;
    EXPECT_GE(took, std::chrono::milliseconds(250));
    EXPECT_LT(took, std::chrono::seconds(3));
  }
  {  // a TLS client that presents no certificate
    auto [s, c] = tcp_pair();
    auto server = serve(std::move(s));
    SSL_CTX* bare = SSL_CTX_new(TLS_client_method());
    SSL* ssl = SSL_new(bare);
    SSL_set_fd(ssl, c.get());
    SSL_connect(ssl);  // TLS 1.3 completes on the client before the server checks the certificate
    char byte;
    SSL_read(ssl, &byte, 1);
    server_result sr = server.get();
    EXPECT_FALSE(sr.channel);
    EXPECT_NE(sr.error.find("certificate"), std::string::npos) << sr.error;
    SSL_free(ssl);
    SSL_CTX_free(bare);
  }
}

TEST_F(TlsChannel, AFileOpenSslCannotLoadIsRefusedNamingTheFlagAndFile) {
  const std::string none = (dir_ / "none.pem").string();
  try {
    tls_context ctx(none, (dir_ / "node.key").string(), (dir_ / "ca.pem").string());
    FAIL() << "a missing certificate was loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--tls-cert " + none), std::string::npos) << e.what();
  }
  try {
    tls_context ctx((dir_ / "node.pem").string(), (dir_ / "rogue.key").string(), (dir_ / "ca.pem").string());
    FAIL() << "a key of another certificate was loaded";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--tls-key"), std::string::npos) << e.what();
  }
}
