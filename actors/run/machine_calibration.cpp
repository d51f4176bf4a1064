// The calibration (see machine_calibration.hpp). Each op is timed on buffers of the model's own
// shapes, repeated until 20 ms have passed, the median of five such rounds kept: a shared
// machine's noise moves a median less than a mean or a minimum.
#include "actors/run/machine_calibration.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "actors/plan/prepared_job.hpp"
#include "actors/run/training_job.hpp"
#include "comm/tp_groups.hpp"
#include "kernels/blas_runtime.hpp"
#include "kernels/ops.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/ring_attention.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double seconds_per_call(F&& fn) {
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    int calls = 0;
    const auto start = clock_type::now();
    double elapsed = 0;
    do {
      fn();
      ++calls;
      elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    } while (elapsed < 0.02);
    rounds.push_back(elapsed / calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

std::vector<float> filled(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown CPU";
}

// The FLOP rate that fits the timed GEMMs best in relative error (least squares of t = a x with
// weights 1 / t^2): small GEMMs count as much as large ones. A second, byte term was tried and
// left out: on this machine its fit swung from run to run by orders of magnitude.
double fit_rate(const std::vector<double>& flops, const std::vector<double>& t) {
  double sxx = 0, sxt = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const double w = 1 / (t[i] * t[i]);
    sxx += w * flops[i] * flops[i];
    sxt += w * flops[i] * t[i];
  }
  return sxx / sxt;  // 1 / a
}

void measure_gemms(machine_costs& m, const model_spec& model, double rows) {
  // (out, in) of every linear the model runs, whole and split over two tp ranks.
  std::vector<std::pair<double, double>> shapes;
  if (model.kind == model_kind::gpt) {
    const double C = double(model.channels), V = double(model.vocab);
    for (double t : {1.0, 2.0})
      for (auto s : {std::pair{3 * C / t, C}, {C, C / t}, {4 * C / t, C}, {C, 4 * C / t}, {V / t, C}})
        shapes.push_back(s);
  } else {
    std::vector<int64_t> w{model.inputs};
    w.insert(w.end(), model.hidden.begin(), model.hidden.end());
    w.push_back(model.classes);
    for (size_t i = 0; i + 1 < w.size(); ++i) shapes.push_back({double(w[i + 1]), double(w[i])});
  }
  std::mt19937 rng(7);
  std::vector<double> flops, secs;
  for (double r : {rows / 4, rows / 2, rows}) {
    const auto R = static_cast<int64_t>(std::max(1.0, r));
    for (auto [out, in] : shapes) {
      const auto N = static_cast<int64_t>(out), K = static_cast<int64_t>(in);
      const auto x = filled(static_cast<size_t>(R * K), rng), w = filled(static_cast<size_t>(N * K), rng);
      std::vector<float> y(static_cast<size_t>(R * N)), dx(x.size()), dw(w.size());
      // Forward, input gradient and weight gradient: (R, N, K), (R, K, N), (N, K, R).
      const double dims[3][3] = {{double(R), out, in}, {double(R), in, out}, {out, in, double(R)}};
      const double t[3] = {seconds_per_call([&] { ops::matmul_forward(y.data(), x.data(), w.data(), nullptr, R, K, N); }),
                           seconds_per_call([&] { ops::matmul_backward_input(dx.data(), y.data(), w.data(), R, K, N); }),
                           seconds_per_call([&] { ops::matmul_backward_weight(dw.data(), nullptr, y.data(), x.data(), R, K, N); })};
      for (int i = 0; i < 3; ++i) {
        const auto& d = dims[i];
        flops.push_back(2 * d[0] * d[1] * d[2]);
        secs.push_back(t[i]);
      }
    }
  }
  m.gemm_flops_per_s = fit_rate(flops, secs);
  m.gemm_bytes_per_s = 0;  // no byte term (see fit_rate)
}

void measure_attention(machine_costs& m, const model_spec& model, double sequences) {
  if (model.kind != model_kind::gpt) return;
  const int64_t B = std::max<int64_t>(1, static_cast<int64_t>(sequences)), T = model.context, C = model.channels,
                NH = model.heads;
  std::mt19937 rng(11);
  const auto qkv = filled(static_cast<size_t>(B * T * 3 * C), rng), dout = filled(static_cast<size_t>(B * T * C), rng);
  std::vector<float> out(static_cast<size_t>(B * T * C)), att(static_cast<size_t>(B * NH * T * T)), dqkv(qkv.size());
  const double units = double(B) * NH * T * T * (double(C) / NH);
  m.attention_forward_s = seconds_per_call([&] { ops::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH); }) / units;
  m.attention_backward_s =
      seconds_per_call([&] { ops::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH); }) / units;
  // The blockwise kernels every --cp mode runs instead (kernels/ring_attention.hpp), the whole
  // sequence as one block: an online softmax that keeps no T x T scores costs otherwise per unit.
  namespace ra = ring_attention;
  std::vector<int64_t> at(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) at[static_cast<size_t>(i)] = i;
  std::vector<float> lse(static_cast<size_t>(B * NH * T)), D(static_cast<size_t>(NH * T));
  m.blockwise_attention_forward_s = seconds_per_call([&] {
    for (int64_t b = 0; b < B; ++b) {
      const float* q = qkv.data() + b * T * 3 * C;
      ra::partial p = ra::start(T, C, NH);
      ra::accumulate(p, {q, 3 * C}, at.data(), {q + C, 3 * C}, {q + 2 * C, 3 * C}, at.data(), T);
      ra::finish(p, {out.data() + b * T * C, C}, lse.data() + b * NH * T);
    }
  }) / units;
  m.blockwise_attention_backward_s = seconds_per_call([&] {
    std::fill(dqkv.begin(), dqkv.end(), 0.0f);
    for (int64_t b = 0; b < B; ++b) {
      const float* q = qkv.data() + b * T * 3 * C;
      float* dq = dqkv.data() + b * T * 3 * C;
      ra::row_dots({dout.data() + b * T * C, C}, {out.data() + b * T * C, C}, T, C, NH, D.data());
      ra::backward_block({q, 3 * C}, at.data(), T, {dout.data() + b * T * C, C}, lse.data() + b * NH * T, D.data(),
                         {q + C, 3 * C}, {q + 2 * C, 3 * C}, at.data(), T, C, NH, {dq, 3 * C}, {dq + C, 3 * C},
                         {dq + 2 * C, 3 * C});
    }
  }) / units;
}

void measure_elementwise(machine_costs& m, const model_spec& model, double rows) {
  const int64_t C = model.kind == model_kind::gpt ? model.channels : model.hidden.empty() ? model.classes : model.hidden.front();
  const auto N = std::max<int64_t>(1, static_cast<int64_t>(rows));
  std::mt19937 rng(13);
  const auto x = filled(static_cast<size_t>(N * C), rng), w = filled(static_cast<size_t>(C), rng);
  std::vector<float> y(x.size()), dx(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  const double bytes = 4.0 * 2 * double(N * C);  // each reads its input and writes its output once
  // The passes the model runs: a GPT's layernorm and GELU (GELU's tanh makes it compute-bound
  // on a CPU), an MLP's relu.
  double a = 0, b = 0;
  if (model.kind == model_kind::gpt) {
    a = seconds_per_call([&] { ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), N, C); });
    b = seconds_per_call([&] { ops::gelu_forward(y.data(), x.data(), N * C); });
  } else {
    a = seconds_per_call([&] { ops::relu_forward(y.data(), x.data(), N * C); });
    b = seconds_per_call([&] { ops::relu_backward(dx.data(), x.data(), y.data(), N * C); }) * 2 / 3;  // reads two
  }
  m.elementwise_bytes_per_s = 2 * bytes / (a + b);
}

void measure_optimizer(machine_costs& m, const optimizer_config& o, int64_t params) {
  const int64_t n = std::clamp<int64_t>(params, 1 << 16, 1 << 22);
  std::mt19937 rng(17);
  auto p = filled(static_cast<size_t>(n), rng);
  const auto g = filled(static_cast<size_t>(n), rng);
  auto opt = make_optimizer(o, n, state_storage::internal);
  m.optimizer_s_per_param = seconds_per_call([&] { opt->step(p.data(), g.data(), n); }) / double(n);
}

void measure_all_reduce(machine_costs& m, double largest_bytes) {
  std::vector<double> sizes, secs;
  for (double bytes : {4096.0, largest_bytes / 4, largest_bytes}) {
    const auto n = std::max<int64_t>(1, static_cast<int64_t>(bytes / 4));
    // Both members make the same number of calls, about 50 ms' worth at a few GB/s.
    const int calls = static_cast<int>(std::clamp(2e8 / bytes, 5.0, 2000.0));
    auto group = net::make_local_tp_group(2);
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));  // zeros: sums stay finite
    std::thread peer([&] {
      for (int i = 0; i < calls; ++i) group[1]->all_reduce_sum(b.data(), n);
    });
    const auto start = clock_type::now();
    for (int i = 0; i < calls; ++i) group[0]->all_reduce_sum(a.data(), n);
    const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    peer.join();
    sizes.push_back(bytes);
    secs.push_back(elapsed / calls);
  }
  // Latency from the smallest, bandwidth from the slope to the largest.
  m.all_reduce_bytes_per_s = (sizes.back() - sizes.front()) / std::max(1e-9, secs.back() - secs.front());
  m.all_reduce_latency_s = std::max(0.0, secs.front() - sizes.front() / m.all_reduce_bytes_per_s);
}

}  // namespace

double measured_step_seconds(const train_summary& run) {
  std::vector<double> steps;
  size_t n = 0;
  for (const auto& r : run.rank_step_seconds) n = std::max(n, r.size());
  for (size_t s = std::min<size_t>(2, n > 2 ? 2 : 0); s < n; ++s) {
    double slowest = 0;
    for (const auto& r : run.rank_step_seconds)
      if (s < r.size()) slowest = std::max(slowest, r[s]);
    steps.push_back(slowest);
  }
  if (steps.empty()) return 0;
  std::sort(steps.begin(), steps.end());
  return steps[steps.size() / 2];
}

machine_costs calibrate_machine(const train_config& job, const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& what) {
    if (progress) progress(what);
  };
  train_config cfg = job;
  cfg.mesh = {};
  cfg.schedule = "1f1b";
  cfg.micro_batches = 1;
  cfg.threads = 1;
  cfg.progress = false;
  cfg.max_steps = 24;
  cfg.checkpoint_dir.clear();
  cfg.resume.clear();
  cfg.eval_max_batches = 1;
  // Its runs write their metrics and traces aside, never over the job's own folder.
  cfg.out_dir = (std::filesystem::temp_directory_path() / ("troupe-calibration-" + std::to_string(::getpid()))).string();
  const prepared_job data = prepare_job(cfg);
  set_blas_threads(1);
  machine_costs m;
  m.name = cpu_name();
  m.calibrated_with = describe(data.model);
  const double sequences = double(cfg.batch_size);
  const double rows = data.model.kind == model_kind::gpt ? sequences * data.model.context : sequences;
  say("GEMMs at the model's shapes");
  measure_gemms(m, data.model, rows);
  say("attention");
  measure_attention(m, data.model, sequences);
  say("elementwise passes");
  measure_elementwise(m, data.model, rows);
  say("the optimizer step");
  measure_optimizer(m, cfg.optim, data.num_params);
  say("a two-rank all-reduce");
  measure_all_reduce(m, 4.0 * double(data.num_params));

  // Two single-device runs, the batch and a quarter of it: measured = scale * ops + 2 actions'
  // overhead, two equations for the two unknowns.
  // A first run in a process is slower (its heap and the data loader warm up): one unmeasured.
  {
    train_config warm = cfg;
    warm.max_steps = 4;
    say("a warm-up run");
    run_training(warm);
  }
  // Each run three times, the fastest kept: a shared machine only ever adds time, and what it
  // adds is its neighbours', not this machine's. Medians let it into the fit: fitted from median
  // runs, CI calibrations found 1 to 5 ms per action where the idle machine finds none, and
  // predicted every two-stage pipeline (16 and more actions a step) 20-90% too slow.
  auto fastest_step = [&](const train_config& run) {
    std::vector<double> steps;
    for (int i = 0; i < 3; ++i) steps.push_back(measured_step_seconds(run_training(run)));
    return *std::min_element(steps.begin(), steps.end());
  };
  auto bare_forecast = [&](const train_config& run, const machine_costs& costs) {
    const prepared_job d = prepare_job(run);
    return forecast_job(run, plan_job(run, d), d.model, costs).step_seconds;
  };
  machine_costs bare = m;
  bare.op_scale = 1;
  bare.action_overhead_s = 0;
  // The scale from the batch, where the ops dominate (the optimizer step is outside it); then
  // what a quarter of the batch takes beyond its scaled ops is its two actions' overhead.
  const double fixed = double(data.num_params) * m.optimizer_s_per_param;
  say("the model on one device, batch " + std::to_string(cfg.batch_size));
  const double ops = bare_forecast(cfg, bare) - fixed, measured = fastest_step(cfg) - fixed;
  m.op_scale = measured / ops;
  train_config quarter = cfg;
  quarter.batch_size = std::max<int64_t>(1, cfg.batch_size / 4);
  say("the model on one device, batch " + std::to_string(quarter.batch_size));
  const double quarter_ops = bare_forecast(quarter, bare) - fixed, quarter_measured = fastest_step(quarter) - fixed;
  m.action_overhead_s = std::max(0.0, (quarter_measured - m.op_scale * quarter_ops) / 2);
  // Ranks side by side: the model as two data-parallel replicas, each on the whole batch, against
  // the same forecast with no slowdown (every core its own rank when there are two cores or more).
  m.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (m.cores >= 2) {
    train_config pair = cfg;
    pair.mesh.dp = 2;
    pair.batch_size = 2 * cfg.batch_size;
    say("the model as two replicas side by side");
    machine_costs alone = m;
    alone.concurrent_slowdown = 1;
    const double predicted = bare_forecast(pair, alone), got = fastest_step(pair);
    m.concurrent_slowdown = std::max(1.0, got / predicted);
    spdlog::info("calibration: two replicas side by side {:.4f} s against {:.4f} s alone: {:.2f}x", got, predicted,
                 m.concurrent_slowdown);
  }
  std::error_code ignored;
  std::filesystem::remove_all(cfg.out_dir, ignored);
  spdlog::info("calibration: ops {:.4f} s and {:.4f} s, measured {:.4f} s and {:.4f} s: scale {:.3f}, {:.2f} ms per action",
               ops, quarter_ops, measured, quarter_measured, m.op_scale, m.action_overhead_s * 1e3);
  return m;
}

}  // namespace troupe
