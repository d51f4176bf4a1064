// The table of device_ops per device: the CPU's fixed, a GPU's installed by kernels/cuda.
#include "kernels/device_ops.hpp"

#include <mutex>
#include <stdexcept>

namespace troupe {

const device_ops& cpu_ops();  // cpu_ops.cpp

namespace {
struct ops_table {
  std::mutex mu;
  std::vector<std::shared_ptr<const device_ops>> cuda;  // by GPU index
};
ops_table& table() {
  static ops_table t;
  return t;
}
}  // namespace

tensor device_ops::empty(shape_t shape, dtype type) const { return tensor::uninitialized(std::move(shape), type, where()); }

tensor device_ops::zeros(shape_t shape, dtype type) const {
  tensor t = empty(std::move(shape), type);
  fill_zero(t.raw(), t.nbytes());
  return t;
}

tensor device_ops::to_here(const tensor& x) const {
  if (x.where() == where()) return x;
  tensor out = empty(x.shape(), x.type());
  copy(out, x);
  return out;
}

tensor on_host(const tensor& x) {
  if (x.where().is_cpu()) return x;
  const device_ops& ops = ops_on(x);
  tensor out = tensor::uninitialized(x.shape(), x.type(), device{});
  ops.copy(out, x);
  ops.synchronize();
  return out;
}

const device_ops& ops_on(const tensor& x) { return ops_for(x.where()); }

const device_ops& ops_for(const device& d) {
  if (d.is_cpu()) return cpu_ops();
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (d.index >= 0 && static_cast<size_t>(d.index) < t.cuda.size() && t.cuda[static_cast<size_t>(d.index)])
    return *t.cuda[static_cast<size_t>(d.index)];
  throw std::runtime_error("no ops for " + d.to_string() +
                           ": kernels/cuda's install_cuda_ops sets up a GPU's (a build without CUDA has none)");
}

void install_ops(std::shared_ptr<const device_ops> ops) {
  if (!ops) throw std::invalid_argument("install_ops: no ops");
  const device d = ops->where();
  if (d.is_cpu()) throw std::invalid_argument("install_ops: the CPU's ops are fixed");
  if (d.index < 0) throw std::invalid_argument("install_ops: device " + d.to_string());
  auto& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.cuda.size() <= static_cast<size_t>(d.index)) t.cuda.resize(static_cast<size_t>(d.index) + 1);
  t.cuda[static_cast<size_t>(d.index)] = std::move(ops);
}

}  // namespace troupe
