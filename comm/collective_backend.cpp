// Names of the collective back ends (collective_backend.hpp).
#include "comm/collective_backend.hpp"

namespace troupe::net {

bool mpi_built();   // mpi_groups.cpp or mpi_groups_missing.cpp
bool gloo_built();  // gloo_group.cpp or gloo_group_missing.cpp

const char* to_string(backend_kind b) {
  switch (b) {
    case backend_kind::tcp:
      return "tcp";
    case backend_kind::mpi:
      return "mpi";
    case backend_kind::gloo:
      return "gloo";
    case backend_kind::nccl:
      return "nccl";
  }
  return "?";
}

std::optional<backend_kind> parse_backend(const std::string& text) {
  for (backend_kind b : {backend_kind::tcp, backend_kind::mpi, backend_kind::gloo, backend_kind::nccl})
    if (text == to_string(b)) return b;
  return std::nullopt;
}

bool backend_built(backend_kind b) {
  switch (b) {
    case backend_kind::tcp:
      return true;
    case backend_kind::mpi:
      return mpi_built();
    case backend_kind::gloo:
      return gloo_built();
    case backend_kind::nccl:  // troupe_comm_nccl, beside this library where CUDA and NCCL are
#ifdef TROUPE_HAVE_NCCL
      return true;
#else
      return false;
#endif
  }
  return false;
}

std::string built_backends() {
  std::string out;
  for (backend_kind b : {backend_kind::tcp, backend_kind::mpi, backend_kind::gloo, backend_kind::nccl})
    if (backend_built(b)) out += (out.empty() ? "" : ", ") + std::string(to_string(b));
  return out;
}

}  // namespace troupe::net
