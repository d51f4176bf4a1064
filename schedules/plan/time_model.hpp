// Time model: seconds for the ops a transformer step is made of, from a device description (peak
// FLOP/s per dtype, memory bandwidth, a GEMM efficiency that depends on the matrix's size) and a
// network description (alpha-beta per link class). Collectives are priced with NCCL's bus
// bandwidth: a ring all-reduce of S bytes over n ranks moves 2(n-1)/n * S through each rank's
// link, so it takes 2(n-1)/n * S / busbw plus 2(n-1) latencies. It knows no schedule: plan.hpp
// turns these costs into a cost_model for simulate().
#pragma once

#include <string>

#include "schedules/mesh.hpp"

namespace troupe::sched::plan {

enum class dtype { fp32, tf32, fp16, bf16 };
const char* to_string(dtype d);  // "fp32", "tf32", "fp16", "bf16"
bool parse_dtype(const std::string& text, dtype& out);

struct device_desc {
  std::string name;
  double peak_flops[4] = {0, 0, 0, 0};  // dense FLOP/s, indexed by dtype
  double memory_bandwidth = 0;          // bytes/s
  double memory_bytes = 0;
  // The efficiency curve by matrix size: a GEMM reaches `gemm_efficiency` of peak when its output
  // tiles fill every SM in whole waves; a partial last wave idles the SMs it leaves (wave
  // quantization), and a GEMM too thin to be compute-bound runs at memory bandwidth (roofline).
  double gemm_efficiency = 0.7;
  int sms = 1;
  int tile_m = 128, tile_n = 128;

  double peak(dtype d) const { return peak_flops[static_cast<int>(d)]; }
};

// One GEMM (m x k) * (k x n) at 16-bit operands, `batch` of them at once (attention's per-head GEMMs).
double gemm_seconds(const device_desc& dev, dtype d, double m, double n, double k, double batch = 1);
// An elementwise pass that reads and writes `bytes` in total: memory-bound.
double memory_seconds(const device_desc& dev, double bytes);

struct link_class {
  double alpha_seconds = 0;        // per message hop
  double bus_bytes_per_second = 0; // NCCL bus bandwidth one rank reaches on this link
};

struct cluster_desc {
  std::string name;
  device_desc device;
  int gpus_per_node = 1;
  int nodes = 1;
  link_class intra_node;  // NVLink/NVSwitch
  link_class inter_node;  // per GPU: its own NIC (DGX A100: one 200 Gb/s HCA per GPU)

  int gpus() const { return gpus_per_node * nodes; }
};

enum class collective { all_reduce, all_gather, reduce_scatter };

// Ring over n ranks on one link class (all_gather and reduce_scatter move half an all-reduce).
double ring_seconds(collective c, double bytes, int n, const link_class& link);
// NCCL's tree all-reduce: the same bus bytes pipelined, but log2(n) latencies each way.
double tree_all_reduce_seconds(double bytes, int n, const link_class& link);

// The collective over the ranks of `a`'s group in mesh m placed on the cluster (ranks fill nodes
// in order, as mesh.hpp places them): within one node it runs on NVLink; across nodes it runs
// hierarchically, within each node on NVLink, then across nodes over the NICs of the group's k
// ranks in each node. All-reduce takes the faster of ring and tree, as NCCL's tuner would.
double group_collective_seconds(collective c, double bytes, const mesh& m, axis a, const cluster_desc& cl);

// Whether consecutive pipeline stages sit on different nodes (then activations cross the NICs).
bool pipeline_crosses_nodes(const mesh& m, const cluster_desc& cl);

}  // namespace troupe::sched::plan
