// Which OpenBLAS kernels this process runs, and which it should. Debian 12's OpenBLAS 0.3.21
// does not recognize newer Intel CPUs (e.g. family 6 model 207) and falls back to its SSE3
// "Prescott" kernels, about 3x slower on our GEMMs. It reads OPENBLAS_CORETYPE only while the
// library loads, so the fix is to restart the process with it set (see cli/main.cpp).
#pragma once

#include <string>

namespace troupe {

std::string blas_core_name();
void set_blas_threads(int threads);

// The OPENBLAS_CORETYPE worth setting: "SkylakeX" with AVX-512, "Haswell" with AVX2, when
// OpenBLAS chose a core without them. Empty when the variable is already set (the user's choice
// wins) or OpenBLAS's own choice is fine.
std::string preferred_blas_coretype();

}  // namespace troupe
