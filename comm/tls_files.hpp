// The control plane's TLS files, checked before a job starts (before any process waits on
// another), so a bad file is refused at once on the process that has it rather than as a failed
// handshake on its peer. Each file is opened and parsed with OpenSSL, the key must match the
// certificate and the CA must have signed it, and an error names the flag and the file.
// It deliberately does not check host names: the job's peers are named by rank, not by DNS.
#pragma once

#include <string>

namespace troupe::net {

// All three empty: no TLS, nothing to check. Throws std::invalid_argument otherwise, naming the
// first problem ("--tls-key /x/y.key: ...").
void check_tls_files(const std::string& cert, const std::string& key, const std::string& ca);

}  // namespace troupe::net
