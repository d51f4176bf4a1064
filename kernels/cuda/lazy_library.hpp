// lazy_library: a CUDA library (cuBLAS, NCCL) opened at its first call, not when troupe starts.
// troupe defines the few functions of each it calls (kernels/cuda/cublas_on_demand.cpp,
// comm/nccl_on_demand.cpp) and forwards them to the library dlopen'ed then, so a run on the CPU
// maps none of their hundreds of megabytes (troupe info stays under 64 MB of resident memory).
// The CUDA runtime is linked statically for the same reason: it opens the driver only on its
// first call.
#pragma once

#include <string>

namespace troupe::cuda {

class lazy_library {
 public:
  // soname as the loader searches for it (LD_LIBRARY_PATH, the cache), then in `build_dir`, the
  // folder the build found it in.
  lazy_library(const char* soname, const char* build_dir) : soname_(soname), build_dir_(build_dir) {}
  // The function's address, or null (then error() says why). Thread-safe; opens the library once.
  void* symbol(const char* name);
  // Why the library or a symbol could not be had: "libcublas.so.13 could not be loaded: ...".
  std::string error() const;

 private:
  void* open();
  const char* soname_;
  const char* build_dir_;
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace troupe::cuda

// Defines `ret name params` to call the same function of `library` (a lazy_library&), or return
// `failed` when it cannot be had. name may be a macro (cublas_v2.h's cublasCreate): the symbol
// looked up is what it expands to.
#define TROUPE_ON_DEMAND_STR_(x) #x
#define TROUPE_ON_DEMAND_STR(x) TROUPE_ON_DEMAND_STR_(x)
#define TROUPE_ON_DEMAND(library, ret, name, failed, params, args)                              \
  extern "C" ret name params {                                                                  \
    using fn = ret(*) params;                                                                   \
    static const fn f = reinterpret_cast<fn>((library).symbol(TROUPE_ON_DEMAND_STR(name)));    \
    if (!f) return failed;                                                                      \
    return f args;                                                                              \
  }
