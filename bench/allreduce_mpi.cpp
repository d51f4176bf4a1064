// Open MPI's MPI_Allreduce bus bandwidth, the same sizes and output format as
// allreduce_cross_process.cpp, for the side-by-side table in bench/README.md. Started by mpirun
// (bench/cross_process_allreduce.sh picks the transport with --mca btl); it deliberately does
// nothing but time MPI_Allreduce in place on float sums.
//
// usage: mpirun -np N allreduce_mpi LABEL [MiB ...]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const char* label = argc > 1 ? argv[1] : "mpi";
  std::vector<double> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atof(argv[i]));
  if (sizes.empty()) sizes = {1, 16, 64};
  for (double mib : sizes) {
    const int n = static_cast<int>(mib * (1 << 20) / 4);
    std::vector<float> x(static_cast<size_t>(n), 1.0f);
    MPI_Allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    const int iters = mib <= 1 ? 30 : mib <= 16 ? 8 : 4;
    const double t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) MPI_Allreduce(MPI_IN_PLACE, x.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double s = (MPI_Wtime() - t0) / iters;
    const double bus = static_cast<double>(n) * 4 * 2 * (world - 1) / world / s / 1e9;
    if (rank == 0) std::printf("%-10s %d %6.0f MiB %9.2f ms %7.2f GB/s\n", label, world, mib, s * 1e3, bus);
    std::fflush(stdout);
  }
  MPI_Finalize();
  return 0;
}
