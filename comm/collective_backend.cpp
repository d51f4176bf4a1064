// Names of the collective back ends (collective_backend.hpp).
#include "comm/collective_backend.hpp"

namespace troupe::net {

bool mpi_built();  // mpi_groups.cpp or mpi_groups_missing.cpp

const char* to_string(backend_kind b) {
  switch (b) {
    case backend_kind::tcp:
      return "tcp";
    case backend_kind::mpi:
      return "mpi";
  }
  return "?";
}

std::optional<backend_kind> parse_backend(const std::string& text) {
  for (backend_kind b : {backend_kind::tcp, backend_kind::mpi})
    if (text == to_string(b)) return b;
  return std::nullopt;
}

bool backend_built(backend_kind b) { return b == backend_kind::tcp || mpi_built(); }

std::string built_backends() { return mpi_built() ? "tcp, mpi" : "tcp"; }

}  // namespace troupe::net
