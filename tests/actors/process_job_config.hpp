// The small data-parallel job both sides of the multi-process tests run: the test process (all
// ranks in one process) and process_job_helper (one rank per process). One definition, so the
// two can only differ in where the ranks live.
#pragma once

#include <filesystem>
#include <string>

#include "actors/config/train_config.hpp"

namespace troupe::test {

inline train_config small_dp_config(int ranks, const std::string& out_dir, int64_t steps, double straggle_ms = 0) {
  train_config c;
  c.model.kind = model_kind::mlp;
  c.model.hidden = {32, 32};
  c.optim.kind = optimizer_kind::adamw;
  c.batch_size = 64;
  c.epochs = 1;
  c.max_steps = steps;
  c.eval_max_batches = 1;
  c.eval_batch_size = 200;
  c.progress = false;
  c.out_dir = out_dir;
  c.mesh.dp = ranks;
  c.bucket_mb = 0.01;  // several buckets: the net collective sees more than one request per step
  if (straggle_ms > 0) c.stragglers.push_back({1, straggle_ms, delay_kind::fixed});
  return c;
}

// The same job over a dp x pp mesh (pp > 1: 1F1B with two microbatches per replica).
inline train_config small_mesh_config(const sched::mesh& m, const std::string& out_dir, int64_t steps,
                                      double straggle_ms = 0) {
  train_config c = small_dp_config(m.dp, out_dir, steps, straggle_ms);
  c.mesh = m;
  if (m.pp > 1) c.micro_batches = 2;
  return c;
}

// A small character-level GPT over the mesh (heads split by tp 2), on the default corpus, which
// every process reads alike.
inline train_config small_gpt_mesh_config(const sched::mesh& m, const std::string& out_dir, int64_t steps) {
  train_config c = small_mesh_config(m, out_dir, steps);
  c.model = model_spec{};
  c.model.kind = model_kind::gpt;
  c.model.context = 16;
  c.model.channels = 16;
  c.model.heads = 2;
  c.model.blocks = 2;
  c.batch_size = 8;
  c.optim.lr = 3e-3f;
  return c;
}

// What a test's mesh text may say beyond the mesh, as prefixes: "zeroN:" (ZeRO stage N),
// "nvme:" (the optimizer offloaded to NVMe, in OUT_DIR/nvme), "both:" (with zero 3, the
// parameters too), "bsp:" (parameter servers, BSP), "sspN:" (SSP with staleness N), "shardsN:"
// (N servers per slot) and "serversN:" (the servers in N processes of their own, after the mesh's:
// the job's world is then the mesh's processes + N). take_variant removes them.
struct job_variant {
  int zero = 0;
  bool nvme = false;
  bool both = false;
  bool bsp = false;
  int ssp = -1;  // the staleness bound; -1: not ssp
  int shards = 1;
  int server_processes = 0;
  // "gpu:": the helper's ranks on fake GPUs (tests/kernels/fake_gpu.hpp), launching in the
  // stage's calls as cuda_queue does; the reference in one process stays on the CPU.
  bool fake_gpu = false;
  // "gpunccl:": the same with --backend nccl, the data-parallel groups across processes reducing
  // on the fake GPUs through tests/actors/gloo_device_engine.hpp (Gloo standing for NCCL).
  bool nccl = false;
  // "gpunolinks:": "gpunccl:" with an engine that has no links between devices, so a pipeline
  // across processes cannot join one (the failure's path).
  bool no_links = false;
  // "moe:": the small GPT with 4 experts, top-2, in every block.
  bool moe = false;
  // "ring:" or "a2a:": context parallelism's attention as --cp-mode ring or all-to-all.
  context::cp_mode cp_mode = context::cp_mode::all_gather;
};
// "nameN:" at the front of `text`: N, and the prefix removed; -1 otherwise.
inline int take_number(std::string& text, const std::string& name) {
  if (text.rfind(name, 0) != 0) return -1;
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == name.size()) return -1;
  const int n = std::stoi(text.substr(name.size(), colon - name.size()));
  text = text.substr(colon + 1);
  return n;
}
inline job_variant take_variant(std::string& text) {
  job_variant v;
  for (;;) {
    if (text.rfind("zero", 0) == 0 && text.size() > 5 && text[5] == ':') {
      v.zero = text[4] - '0';
      text = text.substr(6);
    } else if (text.rfind("nvme:", 0) == 0) {
      v.nvme = true;
      text = text.substr(5);
    } else if (text.rfind("both:", 0) == 0) {
      v.nvme = v.both = true;
      text = text.substr(5);
    } else if (text.rfind("gpu:", 0) == 0) {
      v.fake_gpu = true;
      text = text.substr(4);
    } else if (text.rfind("gpunccl:", 0) == 0) {
      v.fake_gpu = v.nccl = true;
      text = text.substr(8);
    } else if (text.rfind("gpunolinks:", 0) == 0) {
      v.fake_gpu = v.nccl = v.no_links = true;
      text = text.substr(11);
    } else if (text.rfind("moe:", 0) == 0) {
      v.moe = true;
      text = text.substr(4);
    } else if (text.rfind("ring:", 0) == 0) {
      v.cp_mode = context::cp_mode::ring;
      text = text.substr(5);
    } else if (text.rfind("a2a:", 0) == 0) {
      v.cp_mode = context::cp_mode::all_to_all;
      text = text.substr(4);
    } else if (text.rfind("bsp:", 0) == 0) {
      v.bsp = true;
      text = text.substr(4);
    } else if (int n = take_number(text, "ssp"); n >= 0) {
      v.ssp = n;
    } else if (int n = take_number(text, "shards"); n >= 0) {
      v.shards = n;
    } else if (int n = take_number(text, "servers"); n >= 0) {
      v.server_processes = n;
    } else {
      return v;
    }
  }
}
inline void apply(const job_variant& v, train_config& c) {
  c.zero = v.zero;
  c.cp_mode = v.cp_mode;
  if (v.moe) {
    c.model.experts = 4;
    c.model.top_k = 2;
  }
  if (v.bsp) c.consistency = consistency_model::bsp;
  if (v.ssp >= 0) {
    c.consistency = consistency_model::ssp;
    c.staleness = v.ssp;
  }
  c.server_shards = v.shards;
  c.server_processes = v.server_processes;
  if (v.nccl) {
    c.backend = net::backend_kind::nccl;
    c.devices = {device{device_type::cuda, 7}};  // the fake GPU's name, every rank's
  }
  if (!v.nvme) return;
  c.offload = v.both ? offload_what::both : offload_what::optimizer;
  c.offload_to = offload_target::nvme;
  c.offload_dir = c.out_dir + "/nvme";
  std::filesystem::create_directories(c.offload_dir);
  c.aio_block_size = 4096;  // several tiles even for these small shards
  c.aio_queue_depth = 2;
}

// A 64-bit FNV-1a hash of a tensor's bytes: equal tensors, equal hashes (the processes print
// it, the test compares it with the in-process run's).
inline uint64_t bytes_hash(const tensor& t) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < static_cast<size_t>(t.numel()) * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace troupe::test
