// The control plane's TLS files, checked before a job starts: caf_openssl reads them only when
// the first peer connects, where a bad file aborts rank 0 and leaves a worker hanging in its
// handshake. Here each file is opened and parsed with OpenSSL, the key must match the
// certificate and the CA must have signed it, and an error names the flag and the file.
// It deliberately does not check host names: the job's peers are named by rank, not by DNS.
#pragma once

#include <string>

namespace troupe::net {

// All three empty: no TLS, nothing to check. Throws std::invalid_argument otherwise, naming the
// first problem ("--tls-key /x/y.key: ...").
void check_tls_files(const std::string& cert, const std::string& key, const std::string& ca);

}  // namespace troupe::net
