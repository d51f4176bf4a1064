// ZeRO 1/2/3 and offload, in one run: (1) the step time of a GPT at dp 2 under ZeRO 1, 2,
// 2 + host offload and 2 + NVMe offload (pipelined and serial), 3, and 3 with its parameters
// offloaded (host, NVMe, with and without the optimizer), each as a ratio to plain DP (zero
// 0) measured in the same run, with each rank's peak model states by kind; every row's losses
// must equal zero 0's bit for bit or the program prints MISMATCH and exits 1. (2) The share of a
// tiled NVMe optimizer step's I/O hidden behind its updates: an offload_store and an
// optimizer_shard driven directly, pipeline on and off. It does not measure the store's raw
// bandwidth against fio (offload_bench.cpp does).
//
// usage: zero_bench [--dir /tmp] [--steps 20] [--warmup 3] [--rounds 5] [--bucket-mb 1] [--shard-floats 64Mi]
//                   [--shard-steps 5] [--block-size 1M] [--queue-depth 8] [--only train|shard]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/actors.hpp"
#include "actors/plan/memory_plan.hpp"
#include "actors/run/runtime_config.hpp"
#include "actors/run/training_job.hpp"
#include "actors/messages.hpp"
#include "actors/store/offload_store.hpp"
#include "bench/flag_value.hpp"
#include "bench/load_average.hpp"
#include "kernels/blas_runtime.hpp"

namespace {

using namespace troupe;
using clock_type = std::chrono::steady_clock;

struct flags {
  std::string dir = "/tmp";
  int steps = 20, warmup = 3, rounds = 5;
  double bucket_mb = 1;  // 4 buckets of this 3.15 MiB model; at 25 (DDP's default) it is one bucket
  int64_t shard_floats = int64_t{64} << 20;
  int shard_steps = 5;
  int64_t block_size = int64_t{1} << 20;
  int queue_depth = 8;
  std::string only;  // "train", "shard" or empty (both)
};

// A count with an optional binary unit: "67108864", "64Mi", "512Ki", "1Gi".
int64_t parse_count(const std::string& s) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  const double scale = unit.empty() ? 1 : unit == "Ki" ? 1 << 10 : unit == "Mi" ? 1 << 20 : unit == "Gi" ? 1 << 30 : 0;
  if (!(x > 0) || scale == 0) throw std::invalid_argument("cannot read a count from '" + s + "' (e.g. 64Mi)");
  return static_cast<int64_t>(x * scale);
}

flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--dir /tmp] [--steps 20] [--warmup 3] [--rounds 5] [--bucket-mb 1] [--shard-floats 64Mi] "
                  "[--shard-steps 5] [--block-size 1M] [--queue-depth 8] [--only train|shard]\n",
                  argv[0]);
      std::exit(0);
    }
    v = troupe::bench::flag_value(a, i, argc, argv);
    if (a == "--dir") f.dir = v;
    else if (a == "--steps") f.steps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--warmup") f.warmup = std::max(0, std::atoi(v.c_str()));
    else if (a == "--bucket-mb") f.bucket_mb = std::atof(v.c_str());
    else if (a == "--rounds") f.rounds = std::max(1, std::atoi(v.c_str()));
    else if (a == "--shard-floats") f.shard_floats = parse_count(v);
    else if (a == "--shard-steps") f.shard_steps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--block-size") f.block_size = parse_bytes(v);
    else if (a == "--queue-depth") f.queue_depth = std::atoi(v.c_str());
    else if (a == "--only") f.only = v;
    else throw std::invalid_argument("unknown flag " + a + " (--help lists them)");
  }
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }
using troupe::bench::load_average;
double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// ---- part 1: step time of a GPT under each ZeRO stage and offload, against plain DP ----

struct variant {
  std::string name;
  int zero = 0;
  offload_target to = offload_target::none;
  bool pipeline = true;
  offload_what what = offload_what::optimizer;
};

train_config config_for(const variant& v, const flags& f) {
  train_config c;
  c.model.kind = model_kind::gpt;  // examples/gpt.toml's model: 826,208 parameters on the fortunes corpus
  c.model.context = 64;
  c.model.channels = 128;
  c.model.heads = 4;
  c.model.blocks = 4;
  c.optim.kind = optimizer_kind::adamw;
  c.optim.lr = 3e-3f;
  c.batch_size = 16;
  c.epochs = 1;
  c.max_steps = f.warmup + f.steps;
  c.threads = 1;
  c.eval_max_batches = 1;
  c.eval_batch_size = 16;
  c.progress = false;
  c.mesh.dp = 2;
  c.bucket_mb = f.bucket_mb;
  c.zero = v.zero;
  if (v.to != offload_target::none) {
    c.offload = v.what;
    c.offload_to = v.to;
    c.offload_dir = f.dir;
    c.aio_block_size = f.block_size;
    c.aio_queue_depth = f.queue_depth;
    c.offload_pipeline = v.pipeline;
  }
  c.out_dir = "/tmp/troupe-bench-zero-" + std::to_string(::getpid());
  return c;
}

struct row {
  std::vector<double> step_s;  // one per round: max over ranks of each rank's median step
  std::vector<double> losses;  // the first round's
  bool repeatable = true;      // every later round's losses bitwise equal to the first's
  memory_figures device;       // the most each kind held on any rank
  int64_t host = 0;            // the most host memory any rank's offloaded shard held
};

int train_part(const flags& f) {
  const std::vector<variant> variants = {
      {"zero 0 (plain DP)", 0},
      {"zero 1", 1},
      {"zero 2", 2},
      {"zero 2 + offload host", 2, offload_target::host},
      {"zero 2 + offload nvme", 2, offload_target::nvme, true},
      {"zero 2 + offload nvme, serial", 2, offload_target::nvme, false},
      {"zero 3", 3},
      {"zero 3 + offload both host", 3, offload_target::host, true, offload_what::both},
      {"zero 3 + offload params nvme", 3, offload_target::nvme, true, offload_what::params},
      {"zero 3 + offload both nvme", 3, offload_target::nvme, true, offload_what::both},
  };
  std::vector<row> rows(variants.size());
  int64_t parameters = 0;
  const std::string load_before = load_average();
  for (int round = 0; round < f.rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      // Each round starts at another row, so load from other work falls on every row alike.
      const size_t i = (k + static_cast<size_t>(round)) % variants.size();
      const train_summary run = run_training(config_for(variants[i], f));
      double worst = 0;
      for (const auto& s : run.rank_step_seconds) {
        const auto from = s.begin() + std::min<long>(f.warmup, static_cast<long>(s.size()));
        worst = std::max(worst, median(std::vector<double>(from, s.end())));
      }
      row& r = rows[i];
      r.step_s.push_back(worst);
      if (round == 0) r.losses = run.losses;
      else if (run.losses.size() != r.losses.size() ||
               std::memcmp(run.losses.data(), r.losses.data(), r.losses.size() * sizeof(double)) != 0)
        r.repeatable = false;
      if (i == 0) parameters = run.final_params.numel();
      for (const auto& m : run.peak_memory)
        for (size_t j = 0; j < m.bytes.size(); ++j) r.device.bytes[j] = std::max(r.device.bytes[j], m.bytes[j]);
      for (const auto& m : run.peak_host_memory) r.host = std::max(r.host, m.total());
      std::fprintf(stderr, "round %d: %s %.1f ms\n", round + 1, variants[i].name.c_str(), worst * 1e3);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(config_for(variants[0], f).out_dir, ec);

  std::printf("GPT (fortunes corpus) T 64, C 128, 4 heads, 4 blocks, %lld parameters, AdamW, global batch 16, "
              "dp 2 in one process, 1 BLAS thread per rank, buckets of %g MiB; step = max over ranks of the median "
              "of %d steps after %d warm-up, median over %d rounds; nvme: %s, block %s, queue depth %d\n\n",
              static_cast<long long>(parameters), f.bucket_mb, f.steps, f.warmup, f.rounds, f.dir.c_str(),
              format_bytes(f.block_size).c_str(), f.queue_depth);
  std::printf("| run | step (ms), median (min–max) of rounds | step / zero 0, medians | step / zero 0 of the same round, "
              "median (min–max) | "
              "parameters (MiB) | gradients (MiB) | optimizer state (MiB) | host (MiB) | losses = zero 0 |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  auto lowest = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
  auto highest = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  const double base = median(rows[0].step_s);
  bool mismatch = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    // Bitwise, not within a tolerance: ZeRO and offload move model states, never a number.
    const bool same = r.repeatable && r.losses.size() == static_cast<size_t>(f.warmup + f.steps) &&
                      r.losses.size() == rows[0].losses.size() &&
                      std::memcmp(r.losses.data(), rows[0].losses.data(), r.losses.size() * sizeof(double)) == 0;
    if (!same) mismatch = true;
    std::vector<double> paired;  // against zero 0 of the same round: load changes between rounds
    for (size_t k = 0; k < r.step_s.size(); ++k) paired.push_back(r.step_s[k] / rows[0].step_s[k]);
    std::printf("| %s | %.1f (%.1f–%.1f) | %.2f | %.2f (%.2f–%.2f) | %.2f | %.2f | %.2f | %.2f | %s |\n",
                variants[i].name.c_str(), median(r.step_s) * 1e3, lowest(r.step_s) * 1e3, highest(r.step_s) * 1e3,
                median(r.step_s) / base, median(paired), lowest(paired), highest(paired),
                mib(r.device.of(memory_kind::parameters)),
                mib(r.device.of(memory_kind::gradients)), mib(r.device.of(memory_kind::optimizer_state)), mib(r.host),
                same ? "yes" : "MISMATCH");
  }
  std::printf("\nload average (1, 5, 15 min) before / after: %s / %s\nrounds (ms):", load_before.c_str(),
              load_average().c_str());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf(" %s", i ? "|" : "");
    for (double s : rows[i].step_s) std::printf(" %.1f", s * 1e3);
  }
  std::printf("\n\n");
  if (mismatch) std::printf("MISMATCH: a run's losses differ from plain DP's; its speed is not reported as valid\n");
  return mismatch ? 1 : 0;
}

// ---- part 2: the share of a tiled NVMe step's I/O hidden behind its updates ----

struct shard_run {
  caf::actor store, shard;
  std::vector<double> step_s;  // wall time of each measured step, request to answer
  offload_stats before, after;
  tensor last;                 // the parameters of the last step
};

int shard_part(const flags& f) {
  const std::string load_before = load_average();
  caf::actor_system_config cfg;
  configure_runtime(cfg);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  train_config tc;  // only for the tile size: the job's rule (memory_plan.hpp)
  tc.optim.kind = optimizer_kind::adamw;
  tc.aio_block_size = f.block_size;
  tc.aio_queue_depth = f.queue_depth;
  const int64_t S = f.shard_floats, tile = offload_tile_floats(tc), tiles = (S + tile - 1) / tile;
  const int64_t slot = tile * (1 + optimizer_state_floats(tc.optim));
  storage::uring_options io;
  io.block_size = f.block_size;
  io.queue_depth = f.queue_depth;

  // Uniform in [-0.02, 0.02) from a 64-bit LCG: std::normal_distribution took 10 s of 64 Mi floats.
  uint64_t seed = 7;
  std::vector<float> v(static_cast<size_t>(S));
  auto fill = [&] {
    for (auto& x : v) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      x = (static_cast<float>(seed >> 40) / static_cast<float>(1 << 24) - 0.5f) * 0.04f;
    }
  };
  fill();
  tensor params({S}, v);
  params.freeze();
  fill();
  tensor grads({S}, v);  // the same gradients every step: the point is the I/O, not the training
  grads.freeze();
  v = {};

  shard_run runs[2];  // [0] pipelined, [1] serial
  for (int m = 0; m < 2; ++m) {
    shard_memory where;
    where.host = device_memory::make(std::string("host, pipeline ") + (m == 0 ? "on" : "off"));
    where.ledger = where.host;
    where.master_kind = memory_kind::optimizer_state;
    where.tile_floats = tile;
    where.pipeline = m == 0;
    const std::string path = (std::filesystem::path(f.dir) / ("troupe-zero-bench-" + std::to_string(::getpid()) +
                                                              (m == 0 ? "-pipelined" : "-serial") + ".optimizer"))
                                 .string();
    where.store = spawn_offload_store(sys, path, tiles * slot * static_cast<int64_t>(sizeof(float)), io, where.host);
    runs[m].store = where.store;
    runs[m].shard = spawn_optimizer_shard(sys, tc.optim, 0, S, where);
    self->send(runs[m].shard, params_msg{-1, 0, params});
  }
  bool failed = false;
  auto step = [&](shard_run& r, int64_t k) {
    const auto t0 = clock_type::now();
    self->request(r.shard, caf::infinite, gradients_msg{k, 0, grads})
        .receive([&](params_msg& p) { r.last = std::move(p.params); },
                 [&](caf::error& e) {
                   std::fprintf(stderr, "step %lld failed: %s\n", static_cast<long long>(k), sys.render(e).c_str());
                   failed = true;
                 });
    return seconds_since(t0);
  };
  auto stats = [&](shard_run& r) {
    offload_stats out;
    self->request(r.shard, caf::infinite, offload_stats_request{})
        .receive([&](offload_stats& s) { out = s; }, [&](caf::error&) { failed = true; });
    return out;
  };
  // One warm-up step each (it also waits for the initial write), then the two shards' steps
  // alternate, each first in turn, so the disk's swings fall on both alike.
  for (auto& r : runs) step(r, 0), r.before = stats(r);
  for (int k = 1; k <= f.shard_steps && !failed; ++k)
    for (int j = 0; j < 2; ++j) {
      shard_run& r = runs[(j + k) % 2];
      r.step_s.push_back(step(r, k));
    }
  for (auto& r : runs) r.after = stats(r);
  const bool same = !failed && runs[0].last.numel() == S && runs[1].last.numel() == S &&
                    std::memcmp(std::as_const(runs[0].last).data(), std::as_const(runs[1].last).data(),
                                static_cast<size_t>(S) * sizeof(float)) == 0;
  for (auto& r : runs) {
    caf::anon_send_exit(r.shard, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(r.store, caf::exit_reason::user_shutdown);
    self->wait_for(r.shard, r.store);
  }

  std::printf("AdamW shard of %lld floats (%s; master + 2 moments = %s on disk in %lld tiles of %lld floats), "
              "%s, block %s, queue depth %d; %d steps after 1 warm-up, the two shards' steps alternating\n\n",
              static_cast<long long>(S), format_bytes(S * 4).c_str(), format_bytes(tiles * slot * 4).c_str(),
              static_cast<long long>(tiles), static_cast<long long>(tile), f.dir.c_str(),
              format_bytes(f.block_size).c_str(), f.queue_depth, f.shard_steps);
  std::printf("| pipeline | step (s), median | step (s), shard's mean | I/O (s) per step | update (s) per step | "
              "I/O hidden | ideal hidden min(io, update)/io | store busy io/step | GB/s moved |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  double med[2];
  for (int m = 0; m < 2; ++m) {
    const shard_run& r = runs[m];
    const double n = static_cast<double>(r.after.steps - r.before.steps);
    const double io = (r.after.io_seconds - r.before.io_seconds) / n;
    const double up = (r.after.update_seconds - r.before.update_seconds) / n;
    const double st = (r.after.step_seconds - r.before.step_seconds) / n;
    const double hidden = std::clamp((io + up - st) / io, 0.0, 1.0);
    med[m] = median(r.step_s);
    std::printf("| %s | %.3f | %.3f | %.3f | %.3f | %.0f%% | %.0f%% | %.0f%% | %.2f |\n", m == 0 ? "on" : "off", med[m],
                st, io, up, 100 * hidden, 100 * std::min(io, up) / io, 100 * io / st,
                2.0 * static_cast<double>(tiles * slot * 4) / med[m] / 1e9);
  }
  std::printf("\nspeed-up of the pipelined step over the serial one (median step off / on): %.2f\n", med[1] / med[0]);
  std::printf("pipelined and serial parameters after %d steps bitwise equal: %s\n", f.shard_steps + 1,
              same ? "yes" : "MISMATCH");
  std::printf("load average (1, 5, 15 min) before / after: %s / %s\n\n", load_before.c_str(), load_average().c_str());
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const flags f = parse(argc, argv);
    set_blas_threads(1);
    spdlog::set_level(spdlog::level::warn);
    std::printf("OpenBLAS core: %s; %ld cores online\n\n", blas_core_name().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
    int rc = 0;
    if (f.only.empty() || f.only == "train") rc |= train_part(f);
    if (f.only.empty() || f.only == "shard") rc |= shard_part(f);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_bench: %s\n", e.what());
    return 2;
  }
}
