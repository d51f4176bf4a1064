// Time model: seconds for the ops a transformer step is made of, from a device description (peak
// FLOP/s per dtype, memory bandwidth, a GEMM efficiency that depends on the matrix's size) and a
// network description (alpha-beta per link class). Collectives are priced with NCCL's bus
// bandwidth: a ring all-reduce of S bytes over n ranks moves 2(n-1)/n * S through each rank's
// link, so it takes 2(n-1)/n * S / busbw plus 2(n-1) latencies. It knows no schedule: plan.hpp
// turns these costs into a cost_model for simulate(). GEMMs are priced through op_costs.hpp, the
// interface the calibrated forecast of a troupe job implements too.
#pragma once

#include <string>

#include "kernels/dtype.hpp"
#include "schedules/mesh.hpp"
#include "schedules/op_costs.hpp"

namespace troupe::sched::plan {

// The precision of a plan's GEMMs, as vendors publish peaks: the operands' dtype and, for f32
// operands, whether the products run on TF32 tensor cores. TF32 is a math mode of f32 GEMMs
// (PyTorch's allow_tf32), not a storage type, so no dtype. FP8 is a mode of the linear layers'
// GEMMs too (Transformer Engine): activations and weights stay 16-bit and are quantized into each
// GEMM, per tensor (one scale per tensor, "current" or "delayed" scaling) or per block (1x128
// activation and 128x128 weight tiles, as DeepSeek-V3 trained); attention and the logits stay
// 16-bit. The text is --precision's value: "fp32", "tf32", "fp16", "bf16", "fp8", "fp8-block";
// both FP8 modes run at the device file's "fp8" peak.
enum class fp8_scaling { none, tensor, block };
struct gemm_precision {
  dtype operands = dtype::bf16;
  bool tf32 = false;
  fp8_scaling fp8 = fp8_scaling::none;
  friend bool operator==(gemm_precision a, gemm_precision b) {
    return a.operands == b.operands && a.tf32 == b.tf32 && a.fp8 == b.fp8;
  }
};
inline constexpr gemm_precision all_precisions[6] = {{dtype::f32, false},
                                                     {dtype::f32, true},
                                                     {dtype::f16, false},
                                                     {dtype::bf16, false},
                                                     {dtype::bf16, false, fp8_scaling::tensor},
                                                     {dtype::bf16, false, fp8_scaling::block}};
const char* to_string(gemm_precision p);  // "?" for one outside all_precisions
bool parse_precision(const std::string& text, gemm_precision& out);
// The peaks a device file gives ([peak_tflops] keys), in device_desc::peak_flops' order.
inline constexpr const char* peak_names[5] = {"fp32", "tf32", "fp16", "bf16", "fp8"};

struct device_desc {
  std::string name;
  double peak_flops[5] = {0, 0, 0, 0, 0};  // dense FLOP/s, in peak_names' order
  double memory_bandwidth = 0;          // bytes/s
  double memory_bytes = 0;
  // The efficiency curve by matrix size: a GEMM reaches `gemm_efficiency` of peak when its output
  // tiles fill every SM in whole waves; a partial last wave idles the SMs it leaves (wave
  // quantization), and a GEMM too thin to be compute-bound runs at memory bandwidth (roofline).
  double gemm_efficiency = 0.7;
  int sms = 1;
  int tile_m = 128, tile_n = 128;

  // The peak at p; throws std::invalid_argument for a precision outside all_precisions.
  double peak(gemm_precision p) const;
  double& peak(gemm_precision p);
};

// The device as its vendor publishes it, its f32 GEMMs on TF32 tensor cores when tf32 is set.
// A GEMM reaches the efficiency curve above at its precision's peak, or memory bandwidth for
// its bytes (16-bit operands, as the planner's activations are), whichever is slower.
class published_device final : public op_costs {
 public:
  explicit published_device(const device_desc& dev, bool tf32 = false) : dev_(dev), tf32_(tf32) {}
  double gemm_seconds(dtype d, double m, double n, double k, double batch) const override;
  // The same at precision p (FP8 operands are one byte each; the output is 16-bit).
  double gemm_seconds_at(gemm_precision p, double m, double n, double k, double batch) const;
  // Fused (flash) attention's forward over `heads` heads of width d: QK^T and PV, 4 * queries *
  // keys * d FLOPs a head, in tiles of tile_m queries a head; it reads q, k and v and writes the
  // output, never the scores, so it is bound by compute unless tiny.
  double fused_attention_seconds(gemm_precision p, double queries, double keys, double d, double heads) const;

 private:
  const device_desc& dev_;
  bool tf32_;
};

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
  link_class inter_node;  // one NIC's (DGX A100: one 200 Gb/s HCA per GPU)
  // GPUs that share one NIC (1: a NIC each, as DGX nodes). A node's GPUs all cross the network
  // at once (every GPU is in some data-parallel group, every tp rank sends its share of an
  // activation), so each gets 1/gpus_per_nic of its NIC.
  int gpus_per_nic = 1;
  // A tiered network: leaf switches of nodes_per_leaf nodes (0: one non-blocking tier), whose
  // uplinks carry 1/oversubscription of what their nodes can send, so traffic between nodes of
  // different leaves gets that share of the NIC's bandwidth.
  int nodes_per_leaf = 0;
  double oversubscription = 1;

  int gpus() const { return gpus_per_node * nodes; }
};

// The link one GPU has to GPUs on other nodes when the farthest of them is `span_nodes` nodes
// away counting its own (2: the next node): its NIC's share, and the uplinks' share of that when
// the span leaves its leaf switch.
link_class inter_node_link(const cluster_desc& cl, int span_nodes);

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

// The same for a group of n ranks `stride` apart in rank order (mesh.hpp's placement gives the
// strides of dp, pp and tp; the plan's own axes, context and expert parallelism, give theirs).
double group_collective_seconds(collective c, double bytes, int n, int stride, const cluster_desc& cl);

// An all-to-all in which each of n ranks sends `bytes` in total, spread evenly over the group
// (MoE's token dispatch and combine, all-to-all context parallelism): `per_node` members share a
// node, so (n - per_node) / n of each rank's bytes cross its NIC and the rest NVLink, both at
// once; every peer's message pays a latency. `span_nodes` as inter_node_link's.
double all_to_all_seconds(double bytes, int n, int per_node, int span_nodes, const cluster_desc& cl);

// Whether consecutive pipeline stages, `stride` ranks apart, sit on different nodes for some pair
// of them (then activations cross the NICs); in mesh m stage neighbours are tp ranks apart.
bool pipeline_crosses_nodes(int pp, int stride, const cluster_desc& cl);
bool pipeline_crosses_nodes(const mesh& m, const cluster_desc& cl);
// The nodes a pipeline hop spans counting both ends: 2 for the next node, more when a stage's
// ranks (`stride` of them between neighbours) span several nodes.
int pipeline_span(int stride, const cluster_desc& cl);
int pipeline_span(const mesh& m, const cluster_desc& cl);

}  // namespace troupe::sched::plan
