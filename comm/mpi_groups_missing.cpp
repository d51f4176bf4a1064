// mpi_groups where CMake found no MPI: the type exists, so callers compile alike, and says why.
#include "comm/mpi_groups.hpp"

#include <stdexcept>

#include "comm/tcp_socket.hpp"

namespace troupe::net {

bool mpi_built() { return false; }

struct mpi_groups::impl {};

mpi_groups::mpi_groups(const std::vector<int>&) {
  throw net_error("this troupe was built without MPI (CMake found no Open MPI: install libopenmpi-dev and rebuild)");
}
mpi_groups::~mpi_groups() = default;
int mpi_groups::world_rank() const { return 0; }
int mpi_groups::world_size() const { return 1; }
std::string mpi_groups::broadcast_text(const std::string& text, int) { return text; }
std::unique_ptr<group_backend> mpi_groups::take(int) { throw std::logic_error("mpi_groups: built without MPI"); }

}  // namespace troupe::net
