// Which OpenBLAS kernels this process runs. Debian 12's OpenBLAS 0.3.21 does not recognize some
// newer CPUs (e.g. Intel family 6 model 207) and falls back to its SSE3 "Prescott" kernels, about
// 3x slower on our GEMMs. OpenBLAS reads OPENBLAS_CORETYPE when it loads; its dynamic-arch
// builds can also switch kernels afterwards, before any GEMM runs, which is what this does for
// every program that links the kernels: troupe, tests, examples, benchmarks, a library user.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

struct blas_kernels {
  std::string loaded;   // the core OpenBLAS picked when it loaded
  std::string running;  // the core in use now
};

// Picks the kernels once per process (thread-safe; later calls return the first answer). Runs
// before main from a static initializer and again, as a no-op, before every GEMM, so no GEMM
// ever runs on the fallback kernels. A user's OPENBLAS_CORETYPE is left alone.
const blas_kernels& ensure_blas_kernels();

std::string blas_core_name();
void set_blas_threads(int threads);

// The most threads this OpenBLAS was built for (MAX_THREADS in openblas_get_config(); 64 in
// Debian 12's). More than that hangs inside OpenBLAS, so the CLI refuses them.
int blas_max_threads();

// What this CPU offers the BLAS kernels (AVX-512 F/BW/VL; AVX2 with FMA).
struct cpu_vector_features {
  bool avx512 = false;
  bool avx2_fma = false;
};
cpu_vector_features this_cpu_features();

// The core worth switching to from `loaded`: "SkylakeX" with AVX-512, "Haswell" with AVX2 and
// FMA, when `loaded` is a generic core without them. Empty when `loaded` is fine.
std::string preferred_blas_coretype(const std::string& loaded, bool avx512, bool avx2_fma);

// Switches OpenBLAS to the named core (an OPENBLAS_CORETYPE value) and returns the core now in
// use; false when this OpenBLAS cannot switch (not a dynamic-arch build). For tests and
// benchmarks: never call it while another thread may be inside BLAS.
bool switch_blas_kernels(const std::string& core);

}  // namespace troupe
