// Time model arithmetic (see time_model.hpp).
#include "schedules/plan/time_model.hpp"

#include <algorithm>
#include <cmath>

namespace troupe::sched::plan {

const char* to_string(dtype d) {
  switch (d) {
    case dtype::fp32:
      return "fp32";
    case dtype::tf32:
      return "tf32";
    case dtype::fp16:
      return "fp16";
    case dtype::bf16:
      return "bf16";
  }
  return "?";
}

bool parse_dtype(const std::string& text, dtype& out) {
  for (dtype d : {dtype::fp32, dtype::tf32, dtype::fp16, dtype::bf16})
    if (text == to_string(d)) {
      out = d;
      return true;
    }
  return false;
}

double gemm_seconds(const device_desc& dev, dtype d, double m, double n, double k, double batch) {
  const double flops = 2 * m * n * k * batch;
  const double tiles = std::ceil(m / dev.tile_m) * std::ceil(n / dev.tile_n) * batch;
  const double waves = std::ceil(tiles / dev.sms);
  const double wave_fill = tiles / (waves * dev.sms);
  const double compute = flops / (dev.peak(d) * dev.gemm_efficiency * wave_fill);
  const double bytes = 2 * (m * k + k * n + m * n) * batch;
  return std::max(compute, memory_seconds(dev, bytes));
}

double memory_seconds(const device_desc& dev, double bytes) { return bytes / dev.memory_bandwidth; }

double ring_seconds(collective c, double bytes, int n, const link_class& link) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = c == collective::all_reduce ? 2.0 * (n - 1) : double(n - 1);
  return steps / n * bytes / link.bus_bytes_per_second + steps * link.alpha_seconds;
}

double tree_all_reduce_seconds(double bytes, int n, const link_class& link) {
  if (n <= 1 || bytes <= 0) return 0;
  // A pipelined reduce up the tree then broadcast down: each rank's link carries the buffer
  // about twice, as a ring's does for large n; the latency grows with the depth only.
  return 2 * bytes / link.bus_bytes_per_second + 2 * std::ceil(std::log2(n)) * link.alpha_seconds;
}

namespace {

double one_level(collective c, double bytes, int n, const link_class& link) {
  double t = ring_seconds(c, bytes, n, link);
  if (c == collective::all_reduce) t = std::min(t, tree_all_reduce_seconds(bytes, n, link));
  return t;
}

int stride_of(const mesh& m, axis a) {
  switch (a) {
    case axis::tp:
      return 1;
    case axis::pp:
      return m.tp;
    case axis::dp:
      return m.tp * m.pp;
  }
  return 1;
}

}  // namespace

double group_collective_seconds(collective c, double bytes, const mesh& m, axis a, const cluster_desc& cl) {
  const int n = m.size(a);
  if (n <= 1) return 0;
  const int stride = stride_of(m, a);
  // Group members in one node: the group's ranks are stride apart, nodes hold gpus_per_node ranks.
  const int per_node = std::clamp(cl.gpus_per_node / stride, 1, n);
  if (per_node >= n) return one_level(c, bytes, n, cl.intra_node);
  const int nodes = n / per_node;
  // Hierarchical: within the node on NVLink, across nodes each of the per_node ranks carries
  // 1/per_node of the buffer over its own NIC, then back within the node.
  const double inside = one_level(c, bytes, per_node, cl.intra_node);
  const double across = one_level(c, bytes / per_node, nodes, cl.inter_node);
  return inside + across;
}

bool pipeline_crosses_nodes(const mesh& m, const cluster_desc& cl) {
  return m.pp > 1 && m.tp * m.pp > cl.gpus_per_node;
}

}  // namespace troupe::sched::plan
