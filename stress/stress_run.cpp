// The runs of troupe stress, one at a time (they would only slow each other down on shared
// cores, and a throughput is only worth comparing when measured alone).
#include "stress/stress_run.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <stdexcept>

#include "actors/run/training_job.hpp"

namespace troupe::stress {

namespace {

std::string dir_name(const run& r) {
  std::string s = fmt::format("{:02}-{}-{}", r.index, r.how.name, r.scenario);
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '-';
  return s;
}

// The job of one run: the plan's, in one mode, with the scenario's faults at step time step_s.
// A membership change: an elastic job's, which the server modes do not have.
bool elastic(const scenario& s) { return s.kill_replica >= 0 || s.admit_after >= 0; }

train_config job_of(const stress_plan& p, const mode& m, const scenario& s, double step_s,
                    std::vector<std::string>* faults) {
  train_config c = p.job;
  c.consistency = m.consistency;
  c.staleness = m.staleness;
  c.dispatch = m.dispatch;
  c.ready_stash = m.ready_stash;
  c.jitter = s.jitter;
  for (const jitter_spec& j : s.jitter)
    if (faults) faults->push_back(fmt::format("jitter rank {}: up to {:g} ms per compute action", j.rank, j.max_ms));
  // The job's [server] settings are for the server modes; collectives have no servers to cut.
  if (m.consistency == consistency_model::none) c.server_shards = 1;
  c.progress = false;
  c.stragglers.clear();
  for (const relative_straggler& r : s.stragglers) {
    straggler_spec st = r.spec;
    if (r.times > 0) st.ms = (r.times - 1) * step_s * 1e3;
    c.stragglers.push_back(st);
    if (faults)
      faults->push_back(fmt::format("straggler replica {}: {} {:.2f} ms{}", st.rank, to_string(st.kind), st.ms,
                                    r.times > 0 ? fmt::format(" ({:g}x the step time)", r.times) : ""));
  }
  c.slow_links = s.slow_links;
  for (const slow_link_spec& l : s.slow_links)
    if (faults)
      faults->push_back(fmt::format("slow link from rank {}: {:g} MB/s{}", l.rank, l.mb_per_s,
                                    l.latency_ms > 0 ? fmt::format(", {:g} ms late", l.latency_ms) : ""));
  c.kill_server = s.kill_server;
  c.kill_server_after = s.kill_server_after;
  if (faults && s.kill_server >= 0)
    faults->push_back(fmt::format("kill server {} after {} updates", s.kill_server, s.kill_server_after));
  if (elastic(s)) {
    c.elastic = true;
    c.kill_replica = s.kill_replica;
    c.kill_replica_step = s.kill_replica_step;
    if (s.admit_after >= 0) c.membership_events = {{s.admit_after, membership_change::admit, -1}};
    if (faults && s.kill_replica >= 0)
      faults->push_back(fmt::format("kill replica {} as step {} begins (elastic)", s.kill_replica, s.kill_replica_step));
    if (faults && s.admit_after >= 0) faults->push_back(fmt::format("admit a replica after step {} (elastic)", s.admit_after));
  }
  return c;
}

// A server's fault needs servers; a slow link shapes the collectives' ring, which the server modes do not use.
bool applies(const mode& m, const scenario& s) {
  const bool sync = m.consistency == consistency_model::none;
  return !(s.kill_server >= 0 && sync) && !(!s.slow_links.empty() && !sync) && !(elastic(s) && !sync);
}

}  // namespace

mode parse_mode(const std::string& text) {
  if (text == "sync") return {"sync", consistency_model::none, 0};
  if (text == "ready" || text.rfind("ready:", 0) == 0) {
    int h = 0;
    if (text != "ready") {
      const std::string n = text.substr(6);
      size_t used = 0;
      try {
        h = std::stoi(n, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (n.empty() || used != n.size() || h < 0 || h > 1024)
        throw std::invalid_argument("mode \"" + text + "\": expected ready:H with H in 0..1024 (stash headroom)");
    }
    return {"sync ready+" + std::to_string(h), consistency_model::none, 0, sched::dispatch_policy::ready, h};
  }
  if (const auto c = parse_consistency(text); c && *c != consistency_model::none) {
    const int s = *c == consistency_model::ssp ? 1 : 0;  // "ssp" alone: S = 1
    return {"ps-" + text + (s ? " s=1" : ""), *c, s};
  }
  if (text.rfind("ssp:", 0) == 0) {
    const std::string n = text.substr(4);
    size_t used = 0;
    int s = -1;
    try {
      s = std::stoi(n, &used);
    } catch (const std::exception&) {
    }
    if (used == n.size() && s >= 1) return {"ps-ssp s=" + std::to_string(s), consistency_model::ssp, s};
  }
  throw std::invalid_argument("mode \"" + text + "\": expected sync, ready[:H], bsp, ssp:S (S >= 1) or asp");
}

relative_straggler parse_relative_straggler(const std::string& text) {
  relative_straggler r;
  r.text = text;
  const size_t a = text.find(':'), b = text.find(':', a == std::string::npos ? a : a + 1);
  const std::string ms = a == std::string::npos ? "" : text.substr(a + 1, b == std::string::npos ? b : b - a - 1);
  if (!ms.empty() && ms.back() == 'x') {
    size_t used = 0;
    try {
      r.times = std::stod(ms.substr(0, ms.size() - 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used + 1 != ms.size() || !(r.times > 1))
      throw std::invalid_argument("straggler \"" + text + "\": \"" + ms + "\" wants a multiple of the step time above 1, e.g. 3x");
    // The rest is checked by the one parser, at a stand-in delay.
    r.spec = parse_straggler(text.substr(0, a + 1) + "1" + (b == std::string::npos ? "" : text.substr(b)));
    return r;
  }
  r.spec = parse_straggler(text);
  return r;
}

std::vector<run> plan_runs(const stress_plan& p) {
  if (p.job.mesh.processes > 1)
    throw std::invalid_argument("troupe stress runs every job in one process; this one asks for " +
                                std::to_string(p.job.mesh.processes) + " processes");
  std::vector<run> runs;
  for (const scenario& s : p.scenarios)
    for (const mode& m : p.modes) {
      if (!applies(m, s)) continue;
      run r;
      r.index = static_cast<int>(runs.size()) + 1;
      r.how = m;
      r.scenario = s.name;
      r.cfg = job_of(p, m, s, 0.01, nullptr);
      try {
        validate(r.cfg);
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument("scenario " + s.name + ", mode " + m.name + ": " + e.what());
      }
      runs.push_back(std::move(r));
    }
  if (runs.empty())
    throw std::invalid_argument("no run: every scenario's faults need a mode they apply to (a killed server a parameter "
                                "server mode, a slow link a sync one)");
  return runs;
}

results run_stress(const stress_plan& p, const std::string& run_root) {
  results out;
  out.runs = plan_runs(p);
  bool relative = false;
  for (const scenario& s : p.scenarios)
    for (const relative_straggler& r : s.stragglers) relative = relative || r.times > 0;
  if (relative) {
    train_config c = job_of(p, parse_mode("sync"), scenario{}, 0, nullptr);
    c.max_steps = p.calibrate_steps;
    c.eval_max_batches = 1;
    c.out_dir = run_root + "/00-calibration";
    spdlog::info("calibration: sync DP without faults, {} steps, for the step time stragglers are multiples of",
                 p.calibrate_steps);
    const train_summary s = run_training(c);
    const size_t n = s.step_ends.size(), skip = std::min<size_t>(5, n / 4);
    if (n < 2) throw std::runtime_error("the calibration run made fewer than 2 steps: raise calibrate_steps");
    out.calibrated_step_s = (s.step_ends.back() - (skip ? s.step_ends[skip - 1] : 0.0)) / static_cast<double>(n - skip);
    spdlog::info("calibration: sync DP step {:.2f} ms", out.calibrated_step_s * 1e3);
  }
  const size_t total = out.runs.size();
  for (run& r : out.runs) {
    const scenario* s = nullptr;
    for (const scenario& x : p.scenarios)
      if (x.name == r.scenario) s = &x;
    r.cfg = job_of(p, r.how, *s, out.calibrated_step_s, &r.faults);
    r.cfg.out_dir = run_root + "/" + dir_name(r);
    spdlog::info("run {}/{}: {} under {}{} ...", r.index, total, r.how.name, r.scenario,
                 r.faults.empty() ? "" : " (" + fmt::format("{}", fmt::join(r.faults, "; ")) + ")");
    const auto t0 = std::chrono::steady_clock::now();
    try {
      r.summary = run_training(r.cfg);
      spdlog::info("run {}/{}: {} steps in {:.1f} s, {:.0f} samples/s, last loss {:.4f}", r.index, total,
                   r.summary.steps, r.summary.train_seconds, r.summary.samples_per_s,
                   r.summary.losses.empty() ? 0.0 : r.summary.losses.back());
    } catch (const std::exception& e) {
      r.error = e.what();
      spdlog::warn("run {}/{}: failed after {:.1f} s: {}", r.index, total,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), r.error);
    }
  }
  return out;
}

}  // namespace troupe::stress
