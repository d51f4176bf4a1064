// All-reduce through troupe's MPI back end, as a stage drives it (a collective_request to the
// net_collective actor, answered with the sum), beside Open MPI's MPI_Allreduce called directly,
// in one run: rounds of the two alternate, medians of each, bus bandwidth as NCCL defines it
// (2 (N-1)/N bytes per byte). Started by mpirun; rank 0 prints one line per size.
//
// usage: mpirun -np N mpi_backend_bench [MiB ...]   (default 1 16 64)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "actors/job/runtime_config.hpp"
#include "actors/messages.hpp"
#include "actors/process/net_actors.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/ring_schedule.hpp"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace troupe;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<double> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {1, 16, 64};
  {
    net::mpi_groups groups({rank});  // one group: every process, as a data-parallel group of the mesh
    caf::actor_system_config cfg;
    configure_runtime(cfg);
    caf::actor_system sys{cfg};
    net_collective_args a;
    std::shared_ptr<net::group_backend> member = groups.take(0);
    a.make_backend = [member] { return member; };
    caf::actor collective = spawn_net_collective(sys, std::move(a));
    caf::scoped_actor self{sys};
    if (rank == 0)
      std::printf("%-6s %5s %10s %12s %12s %12s %12s %10s\n", "ranks", "MiB", "rounds", "raw ms", "troupe ms",
                  "raw GB/s", "troupe GB/s", "troupe/raw");
    int64_t seq = 0;
    for (double mib : sizes) {
      const int64_t n = static_cast<int64_t>(mib * (1 << 20) / 4);
      std::vector<float> x(static_cast<size_t>(n), 1.0f);
      tensor t({n}, std::vector<float>(x));
      t.freeze();
      auto through_actor = [&] {
        self->request(collective, caf::infinite,
                      collective_request{seq++, static_cast<int32_t>(ring::op_kind::all_reduce_sum), 0, n, t})
            .receive([](collective_result&) {}, [](caf::error&) { std::abort(); });
      };
      auto raw = [&] { MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      raw();  // warm-up both paths
      through_actor();
      const int rounds = mib <= 1 ? 30 : mib <= 16 ? 10 : 5;
      std::vector<double> raw_s, actor_s;
      for (int r = 0; r < rounds; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        raw();
        raw_s.push_back(MPI_Wtime() - t0);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        through_actor();
        actor_s.push_back(MPI_Wtime() - t0);
      }
      const double a_med = median(actor_s), r_med = median(raw_s);
      const double bytes = static_cast<double>(n) * 4 * 2 * (world - 1) / world;
      if (rank == 0)
        std::printf("%-6d %5.0f %10d %12.3f %12.3f %12.2f %12.2f %10.3f\n", world, mib, rounds, r_med * 1e3, a_med * 1e3,
                    bytes / r_med / 1e9, bytes / a_med / 1e9, a_med / r_med);
      std::fflush(stdout);
    }
    caf::anon_send_exit(collective, caf::exit_reason::user_shutdown);
    self->wait_for(collective);
  }
  MPI_Finalize();
  return 0;
}
