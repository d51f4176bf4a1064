// Parameter servers against sync DP with one straggler (issue 13, must-show 3): the same MLP on
// Fashion-MNIST, the same samples and seed, dp replicas of which replica 0 takes `slow` times
// the step time (a fixed sleep of (slow - 1) x the step time, measured first by a sync-DP run
// without it), under collective sync DP, PS-BSP, PS-SSP (s = 1, 3) and PS-ASP. Per mode:
// throughput and its ratio to sync DP in the same run, the final training loss, the test loss
// and accuracy, the training loss at equal wall time (when the fastest mode was done), and the
// time each took to reach sync DP's final loss. It does not tune the learning rate per mode.
//
// usage: ps_straggler_bench [--dp 4] [--slow 3] [--epochs 2] [--batch-size 256] [--hidden 256,256]
//                           [--lr 1e-3] [--data /usr/share/datasets/fashion-mnist] [--out /tmp/troupe-ps-straggler]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/run/training_job.hpp"
#include "bench/flag_value.hpp"
#include "bench/load_average.hpp"

namespace {

using namespace troupe;

struct flags {
  int dp = 4;
  double slow = 3;
  int64_t epochs = 2, batch = 256;
  std::vector<int64_t> hidden{256, 256};
  float lr = 1e-3f;
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "/tmp/troupe-ps-straggler";
};

double number(const std::string& flag, const std::string& v, double least) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= least))
    throw std::invalid_argument(fmt::format("{} wants a number >= {:g}, got '{}'", flag, least, v));
  return x;
}

flags parse(int argc, char** argv) {
  flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--dp 4] [--slow 3] [--epochs 2] [--batch-size 256] [--hidden 256,256] [--lr 1e-3] "
                  "[--data DIR] [--out DIR]\n",
                  argv[0]);
      std::exit(0);
    }
    const std::string v = bench::flag_value(a, i, argc, argv);
    if (a == "--dp") f.dp = static_cast<int>(number(a, v, 2));
    else if (a == "--slow") f.slow = number(a, v, 1);
    else if (a == "--epochs") f.epochs = static_cast<int64_t>(number(a, v, 1));
    else if (a == "--batch-size") f.batch = static_cast<int64_t>(number(a, v, 1));
    else if (a == "--lr") f.lr = static_cast<float>(number(a, v, 1e-9));
    else if (a == "--data") f.data = v;
    else if (a == "--out") f.out = v;
    else if (a == "--hidden") {
      f.hidden.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        f.hidden.push_back(static_cast<int64_t>(number(a, v.substr(at, comma - at), 1)));
        at = comma + 1;
      }
    } else {
      throw std::invalid_argument("unknown flag " + a + " (see --help)");
    }
  }
  if (f.batch % f.dp != 0)
    throw std::invalid_argument("--batch-size " + std::to_string(f.batch) + " must split evenly over --dp " + std::to_string(f.dp));
  return f;
}

struct mode {
  const char* name;
  consistency_model consistency;
  int staleness;
};

train_config job(const flags& f, const mode& m, double straggler_ms, const std::string& tag) {
  train_config c;
  c.model.hidden = f.hidden;
  c.optim.kind = optimizer_kind::adamw;
  c.optim.lr = f.lr;
  c.epochs = f.epochs;
  c.batch_size = f.batch;
  c.fashion_mnist_dir = f.data;
  c.mesh.dp = f.dp;
  c.consistency = m.consistency;
  c.staleness = m.staleness;
  c.progress = false;
  c.out_dir = f.out + "/" + tag;
  if (straggler_ms > 0) c.stragglers = {straggler_spec{0, straggler_ms}};
  return c;
}

// Mean training loss of the (up to) `window` steps done by wall time t.
double loss_at(const train_summary& s, double t, size_t window = 10) {
  size_t n = 0;
  while (n < s.step_ends.size() && s.step_ends[n] <= t) ++n;
  if (n == 0) return s.losses.front();
  double sum = 0;
  const size_t from = n > window ? n - window : 0;
  for (size_t i = from; i < n; ++i) sum += s.losses[i];
  return sum / static_cast<double>(n - from);
}

// Wall time at which the mean loss of the last `window` steps first reached `target` (-1: never).
double time_to(const train_summary& s, double target, size_t window = 10) {
  for (size_t n = window; n <= s.losses.size(); ++n) {
    double sum = 0;
    for (size_t i = n - window; i < n; ++i) sum += s.losses[i];
    if (sum / static_cast<double>(window) <= target) return s.step_ends[n - 1];
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  flags f;
  try {
    f = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_straggler_bench: %s\n", e.what());
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  std::filesystem::create_directories(f.out);
  const std::string load_before = bench::load_average();
  // The step time the straggler is a multiple of: sync DP's, without one, after its warm-up.
  train_config calib = job(f, {"sync DP", consistency_model::none, 0}, 0, "calibrate");
  calib.epochs = 1;
  calib.max_steps = 60;
  const train_summary c = run_training(calib);
  const size_t skip = 10;
  const double step_s = (c.step_ends.back() - c.step_ends[skip - 1]) / static_cast<double>(c.step_ends.size() - skip);
  const double straggler_ms = (f.slow - 1) * step_s * 1e3;
  std::printf("MLP 784-%s-10 on Fashion-MNIST, AdamW lr %g, batch %ld over dp %d, %ld epochs; sync DP step %.2f ms, "
              "replica 0 sleeps %.2f ms before each of its steps (%.1fx the step time)\n",
              [&] {
                std::string h;
                for (size_t i = 0; i < f.hidden.size(); ++i) h += (i ? "-" : "") + std::to_string(f.hidden[i]);
                return h;
              }().c_str(),
              static_cast<double>(f.lr), static_cast<long>(f.batch), f.dp, static_cast<long>(f.epochs), step_s * 1e3,
              straggler_ms, f.slow);
  const std::vector<mode> modes = {{"sync DP (collective)", consistency_model::none, 0},
                                   {"PS-BSP", consistency_model::bsp, 0},
                                   {"PS-SSP s=1", consistency_model::ssp, 1},
                                   {"PS-SSP s=3", consistency_model::ssp, 3},
                                   {"PS-ASP", consistency_model::asp, 0}};
  std::vector<train_summary> runs;
  for (size_t i = 0; i < modes.size(); ++i) runs.push_back(run_training(job(f, modes[i], straggler_ms, "mode" + std::to_string(i))));
  const train_summary& sync = runs.front();
  double first_done = sync.train_seconds;
  for (const auto& r : runs) first_done = std::min(first_done, r.train_seconds);
  const double target = loss_at(sync, sync.train_seconds);
  std::printf("\n| mode | samples/s | vs sync DP | train s | final train loss | test loss | test acc | train loss at %.2f s "
              "| time to sync DP's final loss %.4f |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
              first_done, target);
  for (size_t i = 0; i < modes.size(); ++i) {
    const train_summary& r = runs[i];
    const double reach = time_to(r, target);
    std::printf("| %s | %.0f | %.2f | %.2f | %.4f | %.4f | %.4f | %.4f | %s |\n", modes[i].name, r.samples_per_s,
                r.samples_per_s / sync.samples_per_s, r.train_seconds, loss_at(r, r.train_seconds), r.test_loss.back(),
                r.test_accuracy.back(), loss_at(r, first_done),
                reach < 0 ? "not reached" : fmt::format("{:.2f} s", reach).c_str());
  }
  std::printf("\nfinal train loss: the mean of the last 10 steps (a step: one global batch of samples, from whichever "
              "replicas); load average %s before, %s after\n",
              load_before.c_str(), bench::load_average().c_str());
  return 0;
}
