// Checkpoints (storage/checkpoint.hpp), in one run: (1) the bandwidth of a checkpoint's write
// (begin_checkpoint, write_shard_file of every shard file, commit_checkpoint: wall time, fsyncs
// included) and read (read_manifest, read_values of every array of every file) against fio on the
// same directory, with as many writers as files, each in its own thread as a job's ranks are, and
// fio with one job per file (--numjobs, --group_reporting), the same block size and queue depth;
// (2) the step time of a dp 2 ZeRO-1 MLP job checkpointing every K steps, as a ratio to the same
// job without checkpoints, and the share of each checkpoint's write hidden behind the next step.
// It does not measure the offload store's raw bandwidth (offload_bench.cpp does).
//
// usage: checkpoint_bench [--dir /tmp] [--size 1G] [--files 4] [--rounds 3] [--steps 60] [--only io|train]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "actors/run/training_job.hpp"
#include "bench/fio_peer.hpp"
#include "bench/flag_value.hpp"
#include "bench/load_average.hpp"
#include "kernels/blas_runtime.hpp"
#include "kernels/device_memory.hpp"
#include "storage/checkpoint.hpp"
#include "storage/dataset.hpp"

namespace {

using namespace troupe;
using clock_type = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int64_t block = int64_t{1} << 20;  // the store's default I/O, and fio's --bs
constexpr int queue_depth = 8;               // the store's default, and fio's --iodepth

struct flags {
  std::string dir = "/tmp";
  int64_t size = int64_t{1} << 30;
  int files = 4;
  int rounds = 3;
  int steps = 60;
  std::string only;  // "io", "train" or empty (both)
};

flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--dir /tmp] [--size 1G] [--files 4] [--rounds 3] [--steps 60] [--only io|train]\n", argv[0]);
      std::exit(0);
    }
    v = troupe::bench::flag_value(a, i, argc, argv);
    if (a == "--dir") f.dir = v;
    else if (a == "--size") f.size = parse_bytes(v);
    else if (a == "--files") f.files = std::max(1, std::atoi(v.c_str()));
    else if (a == "--rounds") f.rounds = std::max(1, std::atoi(v.c_str()));
    else if (a == "--steps") f.steps = std::max(2, std::atoi(v.c_str()));
    else if (a == "--only") f.only = v;
    else throw std::invalid_argument("unknown flag " + a + " (--help lists them)");
  }
  return f;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }
using troupe::bench::load_average;

// Runs body(i) for i in [0, n) on n threads; rethrows the first failure after all have ended.
template <class Body>
void on_threads(int n, Body body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// ---- part 1: write and read bandwidth against fio ----

const std::vector<std::string> arrays = {"params", "exp_avg", "exp_avg_sq"};  // AdamW's, as a shard writes

// F shard files, each the ZeRO shard of one rank: floats [i * n, (i + 1) * n) of every array.
struct shard_set {
  int files = 0;
  int64_t floats = 0;       // per array per file
  std::vector<float> data;  // file i's array j at (3 i + j) * floats
  const float* at(int i, size_t j) const { return data.data() + (3 * static_cast<int64_t>(i) + static_cast<int64_t>(j)) * floats; }
  std::vector<storage::value_run> runs(int i) const { return {{0, i * floats, floats}}; }
};

storage::checkpoint_manifest manifest_for(const shard_set& s) {
  storage::checkpoint_manifest m;
  m.mesh = "dp" + std::to_string(s.files);
  m.zero = 1;
  m.optimizer = "adamw";
  m.global_floats = s.files * s.floats;
  m.arrays = arrays;
  return m;
}

// One checkpoint written as a job writes it: every file on its own thread, then the commit.
double troupe_write(const shard_set& s, const std::string& root, int64_t step) {
  const auto t0 = clock_type::now();
  const std::string partial = storage::begin_checkpoint(root, step);
  storage::checkpoint_manifest m = manifest_for(s);
  m.step = step;
  m.files.resize(static_cast<size_t>(s.files));
  on_threads(s.files, [&](int i) {
    char name[32];
    std::snprintf(name, sizeof name, "rank-%05d.bin", i);
    std::vector<const float*> ptrs;
    for (size_t j = 0; j < arrays.size(); ++j) ptrs.push_back(s.at(i, j));
    m.files[static_cast<size_t>(i)] =
        storage::write_shard_file(partial, name, "rank " + std::to_string(i), arrays, ptrs, s.floats, s.runs(i));
  });
  storage::commit_checkpoint(root, m, 0);
  return seconds_since(t0);
}

// Every rank reads its own shard back, as a resumed job of the same mesh does; each section is
// read whole and its CRC-32 checked, into the buffer it was written from.
double troupe_read(shard_set& s, const std::string& root) {
  const auto t0 = clock_type::now();
  const std::string dir = storage::resolve_checkpoint(root);
  const storage::checkpoint_manifest m = storage::read_manifest(dir);
  on_threads(s.files, [&](int i) {
    for (size_t j = 0; j < arrays.size(); ++j)
      storage::read_values(dir, m, arrays[j], s.runs(i), const_cast<float*>(s.at(i, j)));
  });
  return seconds_since(t0);
}

struct fio_figures {
  double bw = 0;    // fio's own: bytes over its jobs' run time
  double wall = 0;  // bytes over the fio process's wall time, start-up and file layout included
};

// One job per file, as one writer per rank: the files are fio's jobname.N.0 in `dir`, so the read
// after a write finds them.
std::optional<fio_figures> fio_pass(const std::string& dir, int files, int64_t file_bytes, bool write) {
  const std::string rw = write ? "write" : "read";
  const std::string cmd = "fio --name=ckpt --directory=" + troupe::bench::shell_quoted(dir) +
                          " --ioengine=io_uring --direct=1 --rw=" + rw + " --bs=" + std::to_string(block) +
                          " --iodepth=" + std::to_string(queue_depth) + " --numjobs=" + std::to_string(files) +
                          " --size=" + std::to_string(file_bytes) +
                          (write ? " --fsync_on_close=1 --end_fsync=1" : "") + " --group_reporting --output-format=json";
  const auto t0 = clock_type::now();
  const auto out = troupe::bench::run_command(cmd);
  const double wall = seconds_since(t0);
  if (!out) return std::nullopt;
  const auto bw = troupe::bench::fio_bw_bytes(*out, rw);
  if (!bw) return std::nullopt;
  return fio_figures{*bw, static_cast<double>(files * file_bytes) / wall};
}

int io_part(const flags& f) {
  shard_set s;
  s.files = f.files;
  // Whole 1 MiB blocks per array, so that fio's files (whole --bs blocks) are the shard files' size.
  const int64_t array_bytes = std::max<int64_t>(4096, f.size / (3 * f.files) / block * block);
  s.floats = array_bytes / 4;
  s.data.resize(static_cast<size_t>(3 * s.files * s.floats));
  std::mt19937 rng(7);
  for (auto& x : s.data) x = static_cast<float>(rng() >> 8);  // not zeros: every page faulted in, the CRC has work
  const int64_t file_bytes = 3 * array_bytes;
  const int64_t total = f.files * file_bytes;
  const std::string root = f.dir + "/troupe-ckbench-" + std::to_string(::getpid());
  const std::string fio_dir = root + "-fio";
  const auto fio_version = troupe::bench::fio_version();

  std::printf("== checkpoint write and read against fio\n");
  std::printf("%d shard files of 3 arrays x %lld bytes (%lld bytes in all), one thread per file; in %s (%s); block %lld, "
              "queue depth %d, O_DIRECT; %d rounds; load %s; peer: %s\n",
              f.files, static_cast<long long>(array_bytes), static_cast<long long>(total), f.dir.c_str(),
              troupe::bench::fs_type(f.dir).c_str(), static_cast<long long>(block), queue_depth, f.rounds,
              load_average().c_str(), fio_version ? fio_version->c_str() : "fio not found");
  {
    // Both peers' reads are O_DIRECT, so the page cache is no part of them; say so where it is not.
    storage::uring_options o;
    o.remove_on_close = true;
    storage::uring_store probe(f.dir + "/troupe-ckbench-probe-" + std::to_string(::getpid()), 4096, o);
    if (!probe.direct()) std::printf("warning: O_DIRECT refused in %s: reads measure the page cache\n", f.dir.c_str());
  }
  bool fio_ok = fio_version.has_value();
  std::vector<double> tw, tr, fw, fr, fw_wall, fr_wall;
  for (int round = 0; round < f.rounds; ++round) {
    std::error_code ec;
    fs::remove_all(fio_dir, ec);
    fs::create_directories(fio_dir, ec);
    for (const bool write : {true, false}) {
      // Each peer first in turn: this virtual disk drifts by 2x within minutes.
      for (int k = 0; k < 2; ++k) {
        if ((k + round) % 2 == 0) {
          const double t = write ? troupe_write(s, root, round + 1) : troupe_read(s, root);
          (write ? tw : tr).push_back(static_cast<double>(total) / t);
        } else if (fio_ok) {
          const auto r = fio_pass(fio_dir, f.files, file_bytes, write);
          if (!r) {
            std::printf("fio failed or printed no bandwidth: the peer was not measured\n");
            fio_ok = false;
            continue;
          }
          (write ? fw : fr).push_back(r->bw);
          (write ? fw_wall : fr_wall).push_back(r->wall);
        }
      }
    }
    fs::remove_all(root, ec);
    fs::remove_all(fio_dir, ec);
    std::printf("round %d: troupe write %.3f read %.3f GB/s", round + 1, tw.back() / 1e9, tr.back() / 1e9);
    if (fio_ok) std::printf(", fio write %.3f read %.3f GB/s", fw.back() / 1e9, fr.back() / 1e9);
    std::printf("\n");
  }
  std::printf("\nmedians of %d rounds (GB/s = 1e9 B/s)\n", f.rounds);
  std::printf("| direction | troupe checkpoint (GB/s) | fio, %d jobs (GB/s) | troupe / fio | fio by its wall clock (GB/s) |\n",
              f.files);
  std::printf("|---|---:|---:|---:|---:|\n");
  const char* names[] = {"write (fsync'd, committed)", "read (CRC-checked)"};
  const std::vector<double>* t[] = {&tw, &tr};
  const std::vector<double>* p[] = {&fw, &fr};
  const std::vector<double>* pw[] = {&fw_wall, &fr_wall};
  for (int i = 0; i < 2; ++i) {
    std::printf("| %s | %.3f |", names[i], median(*t[i]) / 1e9);
    if (fio_ok) std::printf(" %.3f | %.2f | %.3f |\n", median(*p[i]) / 1e9, median(*t[i]) / median(*p[i]), median(*pw[i]) / 1e9);
    else std::printf(" not measured | | |\n");
  }
  if (!fio_version) std::printf("fio is not installed (Debian: apt-get install fio): the peer was not measured\n");
  return 0;
}

// ---- part 2: the step time of a job that checkpoints every K steps ----

// The coordinator's line per commit, "checkpoint after step N: DIR (F files, X MB; slowest writer
// S s, committed after C s)": the only place the in-run write time is known.
struct commit_record {
  double mb = 0, writer_s = 0, commit_s = 0;
};
class commit_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<commit_record> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(records_, {});
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string text(msg.payload.data(), msg.payload.size());
    if (text.rfind("checkpoint after step ", 0) != 0) return;
    const auto files = text.find(" files, ");
    const auto writer = text.find("slowest writer ");
    const auto commit = text.find("committed after ");
    if (files == std::string::npos || writer == std::string::npos || commit == std::string::npos) return;
    records_.push_back({std::atof(text.c_str() + files + 8), std::atof(text.c_str() + writer + 15),
                        std::atof(text.c_str() + commit + 16)});
  }
  void flush_() override {}

 private:
  std::vector<commit_record> records_;
};

train_config train_config_for(const flags& f, std::shared_ptr<const storage::dataset> data, int every) {
  train_config c;
  c.model.kind = model_kind::mlp;
  c.model.inputs = 784;
  c.model.hidden = {1024, 1024, 1024};
  c.model.classes = 10;
  c.optim.kind = optimizer_kind::adamw;
  c.batch_size = 128;
  c.epochs = 1;
  c.max_steps = f.steps;
  c.threads = 1;
  c.train_data = std::move(data);
  c.eval_max_batches = 1;
  c.eval_batch_size = 128;
  c.progress = false;
  c.mesh.dp = 2;
  c.zero = 1;  // each rank's shard holds half the state and writes it: two writers, as part 1's threads
  c.out_dir = "/tmp/troupe-bench-ckpt-" + std::to_string(::getpid());
  if (every > 0) {
    c.checkpoint_dir = f.dir + "/troupe-ckbench-train-" + std::to_string(::getpid());
    c.checkpoint_every = every;
    c.keep = 2;
  }
  return c;
}

int train_part(const flags& f, commit_sink& sink) {
  const int64_t samples = 128 * static_cast<int64_t>(f.steps);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> px;
  std::vector<float> pixels(static_cast<size_t>(samples * 784));
  for (auto& p : pixels) p = px(rng);
  std::vector<int32_t> labels(static_cast<size_t>(samples));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>(rng() % 10);
  auto data = std::make_shared<storage::image_dataset>("synthetic", 784, std::move(pixels), std::move(labels));

  const std::vector<int> every = {0, 20, 5, 1};  // 0: no checkpoint_dir at all
  const size_t n = every.size();
  std::vector<std::vector<double>> step_s(n);  // per round: train_seconds / steps
  std::vector<std::vector<double>> extra(n);   // per round: (train_s - the same round's none) / checkpoints inside
  std::vector<std::vector<commit_record>> commits(n);
  std::vector<int> inside(n, 0);
  std::vector<double> round_s(n);
  int64_t parameters = 0;
  const std::string load_before = load_average();
  for (int round = 0; round < f.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = round % 2 == 0 ? k : n - 1 - k;  // the order alternates, so drift falls on every row
      const train_config c = train_config_for(f, data, every[i]);
      sink.take();
      const train_summary run = run_training(c);
      const auto got = sink.take();
      commits[i].insert(commits[i].end(), got.begin(), got.end());
      // The last checkpoint follows the last step, outside train_seconds; the others overlap the next step.
      inside[i] = every[i] > 0 ? static_cast<int>((run.steps - 1) / every[i]) : 0;
      round_s[i] = run.train_seconds;
      step_s[i].push_back(run.train_seconds / static_cast<double>(run.steps));
      if (parameters == 0) parameters = run.final_params.numel();
      std::error_code ec;
      if (!c.checkpoint_dir.empty()) fs::remove_all(c.checkpoint_dir, ec);
      fs::remove_all(c.out_dir, ec);
      std::fprintf(stderr, "round %d: every %d: %.1f ms/step, %zu checkpoints\n", round + 1, every[i],
                   step_s[i].back() * 1e3, got.size());
    }
    for (size_t i = 1; i < n; ++i) extra[i].push_back((round_s[i] - round_s[0]) / std::max(1, inside[i]));
  }

  std::printf("\n== step time of checkpointing every K steps\n");
  std::printf("MLP 784-1024-1024-1024-10 (%lld parameters), AdamW, global batch 128 of synthetic in-memory samples, %d steps, dp 2 "
              "ZeRO-1 in one process (two shard files written in parallel), 1 BLAS thread per rank; checkpoints in %s "
              "(%s), keep 2; medians of %d rounds, order alternating; load before %s, after %s\n\n",
              static_cast<long long>(parameters), f.steps, f.dir.c_str(), troupe::bench::fs_type(f.dir).c_str(),
              f.rounds, load_before.c_str(), load_average().c_str());
  std::printf("| checkpoint every | checkpoints inside the timed steps | ms / step | / none | MB per checkpoint | slowest "
              "writer (ms) | commit after (ms) | step time added per checkpoint (ms) | write hidden |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const double none = median(step_s[0]);
  for (size_t i = 0; i < n; ++i) {
    std::vector<double> mb, writer, commit;
    for (const auto& r : commits[i]) mb.push_back(r.mb), writer.push_back(r.writer_s), commit.push_back(r.commit_s);
    const double step = median(step_s[i]);
    if (every[i] == 0) {
      std::printf("| none | 0 | %.2f | 1.00 | | | | | |\n", step * 1e3);
      continue;
    }
    const double added = median(extra[i]);
    const double w = median(writer);
    std::printf("| %d | %d | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", every[i], inside[i], step * 1e3,
                step / none, median(mb), w * 1e3, median(commit) * 1e3, added * 1e3,
                w > 0 ? 100 * std::clamp(1 - added / w, 0.0, 1.0) : 0.0);
  }
  std::printf("\nwrite hidden = 1 - (step time added per checkpoint) / (slowest writer's time), clamped to [0, 100%%]; "
              "the added time is the same round's train seconds minus none's, over the checkpoints inside the timed steps\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const flags f = parse(argc, argv);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the tables between the rounds' lines on stderr, in order
    set_blas_threads(1);
    // Only warnings on the terminal; the coordinator's info lines go to the sink that times the writes.
    auto sink = std::make_shared<commit_sink>();
    for (auto& s : spdlog::default_logger()->sinks()) s->set_level(spdlog::level::warn);
    spdlog::default_logger()->sinks().push_back(sink);
    spdlog::set_level(spdlog::level::info);
    std::printf("OpenBLAS core: %s; %ld cores online\n\n", blas_core_name().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
    int rc = 0;
    if (f.only.empty() || f.only == "io") rc |= io_part(f);
    if (f.only.empty() || f.only == "train") rc |= train_part(f, *sink);
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    return 1;
  }
}
