// OpenBLAS kernel choice (see blas_runtime.hpp).
#include "kernels/blas_runtime.hpp"

#include <cblas.h>

#include <cstdlib>
#include <mutex>

extern "C" {
char* openblas_get_corename(void);
// Exported by OpenBLAS's dynamic-arch builds (Debian's); weak so another build still links.
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace troupe {

namespace {

blas_kernels select_kernels() {
  blas_kernels k;
  k.loaded = blas_core_name();
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const cpu_vector_features f = this_cpu_features();
    const std::string better = preferred_blas_coretype(k.loaded, f.avx512, f.avx2_fma);
    if (!better.empty()) switch_blas_kernels(better);
  }
  k.running = blas_core_name();
  return k;
}

// Before main, while the process has one thread: the switch never races a GEMM.
[[maybe_unused]] const blas_kernels& selected_at_start = ensure_blas_kernels();

}  // namespace

const blas_kernels& ensure_blas_kernels() {
  static const blas_kernels k = select_kernels();
  return k;
}

cpu_vector_features this_cpu_features() {
  __builtin_cpu_init();
  cpu_vector_features f;
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return f;
}

std::string blas_core_name() { return openblas_get_corename(); }

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

int blas_max_threads() {
  const std::string config = openblas_get_config();
  const auto at = config.find("MAX_THREADS=");
  if (at == std::string::npos) return 64;  // OpenBLAS's own default NUM_THREADS limit
  const int n = std::atoi(config.c_str() + at + 12);
  return n > 0 ? n : 64;
}

std::string preferred_blas_coretype(const std::string& loaded, bool avx512, bool avx2_fma) {
  const bool generic = loaded == "Prescott" || loaded == "Core2" || loaded == "Nehalem" || loaded == "Katmai" ||
                       loaded == "Northwood" || loaded == "Penryn" || loaded == "Dunnington" ||
                       loaded == "Sandybridge";
  if (!generic) return {};
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return {};
}

bool switch_blas_kernels(const std::string& core) {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit) return false;
  // OpenBLAS reads the variable in gotoblas_dynamic_init; restore the caller's environment after.
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before ? before : "";
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  if (before)
    ::setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    ::unsetenv("OPENBLAS_CORETYPE");
  return true;
}

}  // namespace troupe
