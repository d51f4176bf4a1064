// check_tls_files: OpenSSL parses each PEM file and verifies the certificate against the CA.
#include "comm/tls_files.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "storage/input_file.hpp"

namespace troupe::net {

namespace {

constexpr uint64_t pem_file_limit = 1 << 20;  // a certificate chain is kilobytes

[[noreturn]] void bad(const std::string& flag, const std::string& path, const std::string& why) {
  throw std::invalid_argument(flag + " " + path + ": " + why);
}

std::string openssl_reason() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "not a PEM file of the expected kind";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

using bio_ptr = std::unique_ptr<BIO, decltype(&BIO_free)>;

// The PEM file's text, read through storage's bounded reader (a FIFO or /dev/zero is refused by
// name instead of hanging or filling memory), as a memory BIO for OpenSSL's parsers.
struct pem_text {
  std::string text;
  bio_ptr bio{nullptr, &BIO_free};
};

pem_text open_pem(const std::string& flag, const std::string& path) {
  if (path.empty()) bad(flag, "(empty)", "--tls-cert, --tls-key and --tls-ca must all be given for TLS");
  pem_text p;
  p.text = storage::read_input_file(path, flag, pem_file_limit);
  p.bio.reset(BIO_new_mem_buf(p.text.data(), static_cast<int>(p.text.size())));
  if (!p.bio) bad(flag, path, "cannot read: " + openssl_reason());
  return p;
}

}  // namespace

void check_tls_files(const std::string& cert, const std::string& key, const std::string& ca) {
  if (cert.empty() && key.empty() && ca.empty()) return;
  ERR_clear_error();
  std::unique_ptr<X509, decltype(&X509_free)> c(PEM_read_bio_X509(open_pem("--tls-cert", cert).bio.get(), nullptr, nullptr, nullptr),
                                                &X509_free);
  if (!c) bad("--tls-cert", cert, "no certificate: " + openssl_reason());
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> k(
      PEM_read_bio_PrivateKey(open_pem("--tls-key", key).bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  if (!k) bad("--tls-key", key, "no private key: " + openssl_reason());
  if (X509_check_private_key(c.get(), k.get()) != 1) bad("--tls-key", key, "does not match the certificate " + cert);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), &X509_STORE_free);
  if (!store) bad("--tls-ca", ca, "cannot verify: " + openssl_reason());
  {
    const pem_text p = open_pem("--tls-ca", ca);
    int added = 0;
    while (X509* a = PEM_read_bio_X509(p.bio.get(), nullptr, nullptr, nullptr)) {
      added += X509_STORE_add_cert(store.get(), a) == 1;
      X509_free(a);
    }
    ERR_clear_error();  // the end of the file reads as an error
    if (added == 0) bad("--tls-ca", ca, "no CA certificate in it");
  }
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(), &X509_STORE_CTX_free);
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), c.get(), nullptr) != 1)
    bad("--tls-ca", ca, "cannot verify: " + openssl_reason());
  if (X509_verify_cert(ctx.get()) != 1)
    bad("--tls-cert", cert,
        std::string("not accepted by the CA in ") + ca + ": " + X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
}

}  // namespace troupe::net
