// OpenBLAS core inspection.
#include "kernels/blas_runtime.hpp"

#include <cblas.h>

#include <cstdlib>

extern "C" char* openblas_get_corename(void);

namespace troupe {

std::string blas_core_name() { return openblas_get_corename(); }

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

std::string preferred_blas_coretype() {
  if (std::getenv("OPENBLAS_CORETYPE")) return {};
  const std::string core = blas_core_name();
  const bool generic = core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Katmai" ||
                       core == "Northwood" || core == "Penryn" || core == "Dunnington" || core == "Sandybridge";
  if (!generic) return {};
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return {};
}

}  // namespace troupe
