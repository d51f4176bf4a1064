// Time model arithmetic (see time_model.hpp).
#include "schedules/plan/time_model.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <string>

namespace troupe::sched::plan {

const char* to_string(gemm_precision p) {
  if (p.fp8 != fp8_scaling::none) {
    if (p.operands != dtype::bf16 || p.tf32) return "?";
    return p.fp8 == fp8_scaling::tensor ? "fp8" : "fp8-block";
  }
  if (p.tf32) return p.operands == dtype::f32 ? "tf32" : "?";
  switch (p.operands) {
    case dtype::f32:
      return "fp32";
    case dtype::f16:
      return "fp16";
    case dtype::bf16:
      return "bf16";
    case dtype::i32:
    case dtype::i64:
    case dtype::u8:
      break;
  }
  return "?";
}

bool parse_precision(const std::string& text, gemm_precision& out) {
  for (gemm_precision p : all_precisions)
    if (text == to_string(p)) {
      out = p;
      return true;
    }
  return false;
}

namespace {
size_t peak_index(gemm_precision p) {
  if (p.fp8 != fp8_scaling::none && p.operands == dtype::bf16 && !p.tf32) return 4;
  for (size_t i = 0; i < 4; ++i)
    if (all_precisions[i] == p) return i;
  throw std::invalid_argument(std::string("no published GEMM peak for ") + to_string(p.operands) +
                              " operands" + (p.tf32 ? " on TF32 tensor cores" : ""));
}
}  // namespace

double device_desc::peak(gemm_precision p) const { return peak_flops[peak_index(p)]; }
double& device_desc::peak(gemm_precision p) { return peak_flops[peak_index(p)]; }

double published_device::gemm_seconds(dtype d, double m, double n, double k, double batch) const {
  return gemm_seconds_at(gemm_precision{d, tf32_ && d == dtype::f32}, m, n, k, batch);
}

namespace {
// `flops` spread over `tiles` output tiles at p's peak: whole waves over the SMs reach the
// device's efficiency, a partial last wave idles the SMs it leaves.
double tiled_compute_seconds(const device_desc& dev, gemm_precision p, double flops, double tiles) {
  const double waves = std::ceil(tiles / dev.sms);
  const double wave_fill = tiles / (waves * dev.sms);
  return flops / (dev.peak(p) * dev.gemm_efficiency * wave_fill);
}
}  // namespace

double published_device::gemm_seconds_at(gemm_precision p, double m, double n, double k, double batch) const {
  const device_desc& dev = dev_;
  const double tiles = std::ceil(m / dev.tile_m) * std::ceil(n / dev.tile_n) * batch;
  const double compute = tiled_compute_seconds(dev, p, 2 * m * n * k * batch, tiles);
  const double operand = p.fp8 != fp8_scaling::none ? 1 : 2;
  const double bytes = (operand * (m * k + k * n) + 2 * m * n) * batch;
  return std::max(compute, memory_seconds(dev, bytes));
}

double published_device::fused_attention_seconds(gemm_precision p, double queries, double keys, double d,
                                                 double heads) const {
  const device_desc& dev = dev_;
  const double compute =
      tiled_compute_seconds(dev, p, 4 * queries * keys * d * heads, std::ceil(queries / dev.tile_m) * heads);
  const double bytes = 2 * (2 * queries * d + 2 * keys * d) * heads;
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
    case axis::dp:  // the replicas (dp x cp) lie along one stride
    case axis::cp:
    case axis::ep:
      return m.tp * m.pp;
    case axis::edp:  // the replicas holding the same experts, ep apart
      return m.tp * m.pp * m.ep;
  }
  return 1;
}

}  // namespace

link_class inter_node_link(const cluster_desc& cl, int span_nodes) {
  link_class l = cl.inter_node;
  l.bus_bytes_per_second /= std::max(cl.gpus_per_nic, 1);
  if (cl.nodes_per_leaf > 0 && span_nodes > cl.nodes_per_leaf && cl.oversubscription > 1)
    l.bus_bytes_per_second /= cl.oversubscription;
  return l;
}

double group_collective_seconds(collective c, double bytes, int n, int stride, const cluster_desc& cl) {
  if (n <= 1) return 0;
  // Group members in one node: the group's ranks are stride apart, nodes hold gpus_per_node ranks.
  const int per_node = std::clamp(cl.gpus_per_node / stride, 1, n);
  if (per_node >= n) return one_level(c, bytes, n, cl.intra_node);
  const int nodes = n / per_node;
  // Hierarchical: within the node on NVLink, across nodes each of the per_node ranks carries
  // 1/per_node of the buffer over its own NIC, then back within the node.
  const double inside = one_level(c, bytes, per_node, cl.intra_node);
  // The group's first and last member are (n - 1) * stride ranks apart.
  const int span = (n - 1) * stride / cl.gpus_per_node + 1;
  const double across = one_level(c, bytes / per_node, nodes, inter_node_link(cl, span));
  return inside + across;
}

double group_collective_seconds(collective c, double bytes, const mesh& m, axis a, const cluster_desc& cl) {
  return group_collective_seconds(c, bytes, m.size(a), stride_of(m, a), cl);
}

double all_to_all_seconds(double bytes, int n, int per_node, int span_nodes, const cluster_desc& cl) {
  if (n <= 1 || bytes <= 0) return 0;
  per_node = std::clamp(per_node, 1, n);
  const double inside = bytes * (per_node - 1) / n / cl.intra_node.bus_bytes_per_second;
  const double across =
      per_node < n ? bytes * (n - per_node) / n / inter_node_link(cl, span_nodes).bus_bytes_per_second : 0;
  const double latency = (per_node - 1) * cl.intra_node.alpha_seconds +
                         (n - per_node) * (per_node < n ? cl.inter_node.alpha_seconds : 0);
  return std::max(inside, across) + latency;
}

bool pipeline_crosses_nodes(int pp, int stride, const cluster_desc& cl) {
  return pp > 1 && stride * pp > cl.gpus_per_node;
}
bool pipeline_crosses_nodes(const mesh& m, const cluster_desc& cl) { return pipeline_crosses_nodes(m.pp, m.tp, cl); }

int pipeline_span(int stride, const cluster_desc& cl) { return std::max(2, stride / cl.gpus_per_node + 1); }
int pipeline_span(const mesh& m, const cluster_desc& cl) { return pipeline_span(m.tp, cl); }

}  // namespace troupe::sched::plan
