// lazy_library (lazy_library.hpp): dlopen at the first symbol asked for.
#include "kernels/cuda/lazy_library.hpp"

#include <dlfcn.h>

#include <mutex>

namespace troupe::cuda {

namespace {
std::mutex& open_mu() {
  static std::mutex mu;
  return mu;
}
}  // namespace

void* lazy_library::open() {
  std::lock_guard<std::mutex> lock(open_mu());
  if (handle_ || !error_.empty()) return handle_;
  handle_ = dlopen(soname_, RTLD_NOW | RTLD_GLOBAL);
  if (handle_) return handle_;
  std::string why = dlerror();
  if (build_dir_ && *build_dir_) {
    const std::string there = std::string(build_dir_) + "/" + soname_;
    handle_ = dlopen(there.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle_) return handle_;
    why += "; " + std::string(dlerror());
  }
  error_ = std::string(soname_) + " could not be loaded (" + why + ")";
  return nullptr;
}

void* lazy_library::symbol(const char* name) {
  void* lib = open();
  if (!lib) return nullptr;
  std::lock_guard<std::mutex> lock(open_mu());
  dlerror();
  void* f = dlsym(lib, name);
  if (!f) error_ = std::string(soname_) + " has no " + name + " (" + dlerror() + ")";
  return f;
}

std::string lazy_library::error() const {
  std::lock_guard<std::mutex> lock(open_mu());
  return error_;
}

}  // namespace troupe::cuda
