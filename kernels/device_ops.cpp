// The table of device_ops per device: the CPU's fixed, a GPU's installed by kernels/cuda.
#include "kernels/device_ops.hpp"

#include <stdexcept>

#include "kernels/per_gpu.hpp"

namespace troupe {

const device_ops& cpu_ops();  // cpu_ops.cpp

namespace {
per_gpu<const device_ops>& table() {
  static per_gpu<const device_ops> t;
  return t;
}
}  // namespace

void device_ops::copy(tensor& dst, const tensor& src) const {
  for (const device& d : {dst.where(), src.where()})
    if (!d.is_cpu() && d != where())
      throw std::logic_error("the ops of " + where().to_string() + " copy " + src.where().to_string() + " to " +
                             dst.where().to_string() + ": only between " + where().to_string() + " and the host");
  if (dst.type() != src.type() || dst.numel() != src.numel())
    throw std::invalid_argument("copy: " + std::string(to_string(src.type())) + " " + to_string(src.shape()) +
                                " into " + to_string(dst.type()) + " " + to_string(dst.shape()));
  copy_bytes(dst.raw(), src.raw(), src.nbytes());
}

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

tensor device_ops::host_copy(const tensor& x) const {
  tensor out = host_empty(x.shape(), x.type());
  copy(out, x);
  return out;
}

tensor device_ops::targets_here(const std::vector<int32_t>& targets) const {
  static_assert(sizeof(int32_t) == sizeof(float));
  tensor out = empty({static_cast<int64_t>(targets.size())});
  copy_bytes(out.raw(), targets.data(), static_cast<int64_t>(targets.size() * sizeof(int32_t)));
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
  // The table keeps it (and install_cuda_ops its own copy), so the reference stays good.
  if (auto ops = table().find(d.index)) return *ops;
  throw std::runtime_error("no ops for " + d.to_string() +
                           ": kernels/cuda's install_cuda_ops sets up a GPU's (a build without CUDA has none)");
}

void install_ops(std::shared_ptr<const device_ops> ops) {
  if (!ops) throw std::invalid_argument("install_ops: no ops");
  const device d = ops->where();
  if (d.is_cpu()) throw std::invalid_argument("install_ops: the CPU's ops are fixed");
  if (d.index < 0) throw std::invalid_argument("install_ops: device " + d.to_string());
  table().install(d.index, std::move(ops));
}

}  // namespace troupe
