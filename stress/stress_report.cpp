// The report folder of troupe stress. Numbers are written once into run_metrics and every file
// (JSON, CSV, HTML table, plots) is made from those, so they cannot disagree.
#include "stress/stress_report.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>

#include "schedules/plot.hpp"
#include "storage/output_file.hpp"
#include "stress/png.hpp"

namespace troupe::stress {

namespace fs = std::filesystem;

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr size_t histogram_bars = 24;  // the plot's last bar gathers the rest; report.json has them all

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return nan;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// Wall time at which the mean loss of the last `window` steps first reached `target` (NaN: never).
double time_to(const train_summary& s, double target, size_t window = 10) {
  if (!std::isfinite(target)) return nan;
  const size_t w = std::min(window, s.losses.size());
  for (size_t n = w; n <= s.losses.size() && n <= s.step_ends.size() && w > 0; ++n) {
    double sum = 0;
    for (size_t i = n - w; i < n; ++i) sum += s.losses[i];
    if (sum / static_cast<double>(w) <= target) return s.step_ends[n - 1];
  }
  return nan;
}

std::string num(double v, int digits = 9) {
  return std::isfinite(v) ? fmt::format("{:.{}g}", v, digits) : "null";
}
std::string str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", static_cast<int>(c));
    else out += c;
  }
  return out + "\"";
}
template <class T, class F>
std::string array(const std::vector<T>& v, F f) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + f(v[i]);
  return s + "]";
}
std::string cell(double v, const char* fmt_text) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(fmt_text), v) : "—";
}

struct scenario_rows {
  std::string name;
  std::vector<const run*> runs;
  std::vector<const run_metrics*> metrics;
  double target = nan;
};

std::vector<double> step_numbers(const train_summary& s) {
  std::vector<double> x;
  for (size_t i = 0; i < s.losses.size(); ++i) x.push_back(static_cast<double>(s.first_step + static_cast<int64_t>(i) + 1));
  return x;
}

// Writes NAME.svg and NAME.png under dir/plots.
void save_plot(const fs::path& dir, const std::string& name, const std::string& svg) {
  storage::write_output_file((dir / "plots" / (name + ".svg")).string(), svg);
  plot::write_png(svg, (dir / "plots" / (name + ".png")).string());
}

std::string run_json(const run& r, const run_metrics& m, const std::string& dir) {
  const train_summary& s = r.summary;
  std::string j = fmt::format(
      "{{\"index\": {}, \"mode\": {}, \"consistency\": {}, \"staleness_bound\": {}, \"scenario\": {}, \"faults\": {}, "
      "\"status\": {}, \"error\": {}, \"dir\": {},\n   ",
      r.index, str(r.how.name), str(to_string(r.how.consistency)), r.how.staleness, str(r.scenario),
      array(r.faults, str), str(r.error.empty() ? "ok" : "failed"), str(r.error), str(dir));
  j += fmt::format("\"samples_per_s\": {}, \"vs_sync\": {}, \"train_seconds\": {}, \"steps\": {}, "
                   "\"step_ms\": {{\"p50\": {}, \"p90\": {}, \"p99\": {}}},\n   ",
                   num(m.samples_per_s), num(m.vs_sync), num(m.train_seconds), m.steps, num(m.step_ms_p50),
                   num(m.step_ms_p90), num(m.step_ms_p99));
  j += fmt::format("\"server_updates\": {}, \"staleness\": {{\"max\": {}, \"mean\": {}, \"lead_max\": {}, \"held\": {}, "
                   "\"histogram\": {}}},\n   ",
                   m.updates, num(m.staleness_max), num(m.staleness_mean), m.lead_max, m.held,
                   array(m.staleness_histogram, [](int64_t v) { return std::to_string(v); }));
  j += fmt::format("\"final_loss\": {}, \"test_loss\": {}, \"test_accuracy\": {}, \"time_to_target\": {},\n   ",
                   num(m.final_loss), num(m.test_loss), num(m.test_accuracy), num(m.time_to_target));
  j += fmt::format("\"slow_rank\": {},\n   ",
                   s.slow_rank < 0 ? std::string("null")
                                   : fmt::format("{{\"rank\": {}, \"named_after_step\": {}}}", s.slow_rank, s.slow_rank_step));
  j += fmt::format("\"slow_link\": {},\n   ",
                   s.slow_link_to < 0 ? std::string("null")
                                      : fmt::format("{{\"from\": {}, \"to\": {}, \"named_after_step\": {}}}", s.slow_link_from,
                                                    s.slow_link_to, s.slow_link_step));
  j += fmt::format("\"membership\": {},\n   \"samples_per_s_by_step\": {},\n   ",
                   array(s.membership, [](const membership_event& e) { return str(to_string(e)); }),
                   array(s.step_samples_per_s, [](double v) { return num(v); }));
  j += fmt::format("\"first_step\": {}, \"losses\": {},\n   \"step_ends\": {},\n   \"rank_step_ms\": {}}}", s.first_step,
                   array(s.losses, [](double v) { return num(v); }), array(s.step_ends, [](double v) { return num(v); }),
                   array(s.rank_step_seconds, [](const std::vector<double>& v) {
                     return array(v, [](double x) { return num(x * 1e3); });
                   }));
  return j;
}

const char* const csv_head =
    "index,mode,scenario,status,samples_per_s,vs_sync,step_ms_p50,step_ms_p90,step_ms_p99,staleness_max,"
    "staleness_mean,lead_max,held,final_loss,test_loss,test_accuracy,time_to_target_s";

std::string csv_row(const run& r, const run_metrics& m) {
  auto q = [](const std::string& s) { return "\"" + s + "\""; };
  auto n = [](double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : std::string(); };
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}", r.index, q(r.how.name), q(r.scenario),
                     r.error.empty() ? "ok" : "failed", n(m.samples_per_s), n(m.vs_sync), n(m.step_ms_p50),
                     n(m.step_ms_p90), n(m.step_ms_p99), n(m.staleness_max), n(m.staleness_mean), m.lead_max, m.held,
                     n(m.final_loss), n(m.test_loss), n(m.test_accuracy), n(m.time_to_target));
}

// What the live detection named while the run went on (slow_rank.hpp, slow_link.hpp), and after
// which step: beside the scenario's injected faults, whether and how fast it found them.
std::string named_live(const train_summary& s) {
  std::string out;
  if (s.slow_rank >= 0) out = fmt::format("slow rank {} after step {}", s.slow_rank, s.slow_rank_step);
  if (s.slow_link_to >= 0)
    out += (out.empty() ? "" : "; ") +
           fmt::format("slow link {}→{} after step {}", s.slow_link_from, s.slow_link_to, s.slow_link_step);
  return out.empty() ? "—" : out;
}

std::string table_row(const run& r, const run_metrics& m) {
  auto td = [](const std::string& s) { return "<td>" + plot::xml_escape(s) + "</td>"; };
  std::string row = "<tr>" + td(std::to_string(r.index)) + td(r.how.name) + td(r.scenario);
  if (!r.error.empty()) return row + "<td colspan=\"14\" class=\"failed\">failed: " + plot::xml_escape(r.error) + "</td></tr>\n";
  const bool ps = r.how.consistency != consistency_model::none;
  row += td(cell(m.samples_per_s, "{:.0f}")) + td(cell(m.vs_sync, "{:.2f}x")) + td(cell(m.step_ms_p50, "{:.2f}")) +
         td(cell(m.step_ms_p90, "{:.2f}")) + td(cell(m.step_ms_p99, "{:.2f}")) +
         td(ps ? cell(m.staleness_max, "{:.0f}") : "—") + td(ps ? cell(m.staleness_mean, "{:.2f}") : "—") +
         td(ps ? std::to_string(m.lead_max) : "—") + td(ps ? std::to_string(m.held) : "—") +
         td(cell(m.final_loss, "{:.4f}")) + td(cell(m.test_loss, "{:.4f}")) + td(cell(m.test_accuracy, "{:.4f}")) +
         td(std::isfinite(m.time_to_target) ? fmt::format("{:.2f} s", m.time_to_target) : "not reached") +
         td(named_live(r.summary));
  return row + "</tr>\n";
}

std::string job_line(const train_config& c) {
  std::string hidden;
  for (size_t i = 0; i < c.model.hidden.size(); ++i) hidden += (i ? "-" : "") + std::to_string(c.model.hidden[i]);
  return fmt::format("{} {}, {} lr {:g}, global batch {} over dp {}, {} epoch(s){}, seed {}", to_string(c.model.kind),
                     c.model.kind == model_kind::mlp ? "784-" + hidden + "-10" : "", to_string(c.optim.kind), static_cast<double>(c.optim.lr),
                     c.batch_size, c.mesh.dp, c.epochs, c.max_steps > 0 ? fmt::format(", at most {} steps", c.max_steps) : "",
                     c.seed);
}

void write_files(const stress_plan& p, const results& res, const fs::path& dir) {
  fs::create_directories(dir / "plots");
  // The metrics, and the rows of each scenario in the plan's order.
  std::vector<run_metrics> metrics(res.runs.size());
  std::vector<scenario_rows> scenarios;
  for (const scenario& s : p.scenarios) {
    scenario_rows rows{s.name, {}, {}, p.target_loss > 0 ? p.target_loss : nan};
    const run* sync = nullptr;
    for (const run& r : res.runs)
      if (r.scenario == s.name && r.how.consistency == consistency_model::none &&
          r.how.dispatch == sched::dispatch_policy::fixed && r.error.empty())
        sync = &r;  // the baseline is sync DP as written: ready dispatch is compared with it
    if (!(p.target_loss > 0) && sync) rows.target = loss_by(sync->summary, std::numeric_limits<double>::infinity());
    for (size_t i = 0; i < res.runs.size(); ++i) {
      if (res.runs[i].scenario != s.name) continue;
      metrics[i] = measure(res.runs[i], sync, rows.target);
      rows.runs.push_back(&res.runs[i]);
      rows.metrics.push_back(&metrics[i]);
    }
    if (!rows.runs.empty()) scenarios.push_back(rows);
  }
  auto run_dir = [](const run& r) { return "runs/" + fs::path(r.cfg.out_dir).filename().string(); };

  std::string json = fmt::format("{{\"source\": {}, \"job\": {}, \"target_loss\": {}, \"calibrated_step_ms\": {},\n"
                                 " \"targets\": {{",
                                 str(p.source), str(job_line(p.job)), num(p.target_loss > 0 ? p.target_loss : nan),
                                 num(res.calibrated_step_s > 0 ? res.calibrated_step_s * 1e3 : nan));
  for (size_t i = 0; i < scenarios.size(); ++i)
    json += fmt::format("{}{}: {}", i ? ", " : "", str(scenarios[i].name), num(scenarios[i].target));
  json += "},\n \"runs\": [\n  ";
  std::string csv = std::string(csv_head) + "\n";
  for (size_t i = 0; i < res.runs.size(); ++i) {
    json += (i ? ",\n  " : "") + run_json(res.runs[i], metrics[i], run_dir(res.runs[i]));
    csv += csv_row(res.runs[i], metrics[i]) + "\n";
  }
  storage::write_output_file((dir / "report.json").string(), json + "\n ]\n}\n");
  storage::write_output_file((dir / "report.csv").string(), csv);

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>troupe stress: {0}</title>\n"
      "<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}} "
      "td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}} td:nth-child(2),td:nth-child(3){{text-align:left}} "
      ".failed{{color:#b00;text-align:left}} img{{max-width:100%}}</style></head><body>\n"
      "<h1>troupe stress: {0}</h1>\n<p>{1}.{2} Data: <a href=\"report.json\">report.json</a>, "
      "<a href=\"report.csv\">report.csv</a>; each run's own outputs under <code>runs/</code>.</p>\n",
      plot::xml_escape(p.source), plot::xml_escape(job_line(p.job)),
      res.calibrated_step_s > 0 ? fmt::format(" Sync DP step without faults (calibration): {:.2f} ms.", res.calibrated_step_s * 1e3) : "");
  html += "<table id=\"runs\"><tr><th>#</th><th>mode</th><th>scenario</th><th>samples/s</th><th>vs sync DP</th>"
          "<th>step p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>staleness max</th><th>staleness mean</th>"
          "<th>lead max (rounds)</th><th>held</th><th>final loss</th><th>test loss</th><th>test acc</th>"
          "<th>time to target</th><th>named live</th></tr>\n";
  for (size_t i = 0; i < res.runs.size(); ++i) html += table_row(res.runs[i], metrics[i]);
  html += "</table>\n<p>Step times: between consecutive step ends. Staleness: server updates applied between a "
          "replica's read of the parameters and the apply of its push; lead: rounds a replica's push was ahead of "
          "the slowest replica (SSP bounds it by s); held: pushes after which the bound held a replica back. Final "
          "loss: mean training loss of the last 10 steps. Time to target: wall time until that mean first reached "
          "the scenario's target.</p>\n<ul>";
  for (const run& r : res.runs)
    if (!r.faults.empty())
      html += fmt::format("<li>run {} ({} under {}): {}</li>", r.index, plot::xml_escape(r.how.name),
                          plot::xml_escape(r.scenario), plot::xml_escape(fmt::format("{}", fmt::join(r.faults, "; "))));
  html += "</ul>\n";
  auto figure = [&](const std::string& name, const std::string& svg) {
    save_plot(dir, name, svg);
    return fmt::format("<figure><img src=\"plots/{0}.svg\" alt=\"{0}\"><figcaption><a href=\"plots/{0}.png\">PNG</a>"
                       "</figcaption></figure>\n",
                       name);
  };
  for (const scenario_rows& sc : scenarios) {
    html += fmt::format("<h2 id=\"{0}\">Scenario {0}</h2>\n<p>Target loss {1}.</p>\n", plot::xml_escape(sc.name),
                        cell(sc.target, "{:.4f}"));
    std::vector<plot::series> by_step, by_time, stale;
    size_t widest = 0;
    for (size_t k = 0; k < sc.runs.size(); ++k) {
      const train_summary& s = sc.runs[k]->summary;
      by_step.push_back({sc.runs[k]->how.name, step_numbers(s), s.losses});
      by_time.push_back({sc.runs[k]->how.name, s.step_ends, s.losses});
      if (sc.runs[k]->how.consistency != consistency_model::none && !sc.metrics[k]->staleness_histogram.empty())
        widest = std::max(widest, sc.metrics[k]->staleness_histogram.size());
    }
    html += figure("loss-steps-" + sc.name, plot::line_chart({"Training loss by step: " + sc.name, "step", "loss"}, by_step));
    // An elastic job's membership changes: its throughput over time shows what each cost.
    std::vector<plot::series> rates;
    for (const run* r : sc.runs)
      if (!r->summary.membership.empty())
        rates.push_back({r->how.name, r->summary.step_ends, r->summary.step_samples_per_s});
    if (!rates.empty())
      html += figure("rate-time-" + sc.name,
                     plot::line_chart({"Samples/s by wall time, the membership changing: " + sc.name,
                                       "seconds of training (a change's time included)", "samples/s"},
                                      rates));
    html += figure("loss-time-" + sc.name,
                   plot::line_chart({"Training loss by wall time: " + sc.name, "seconds of training", "loss"}, by_time));
    if (widest > 0) {
      const size_t bars = std::min(widest, histogram_bars);
      std::vector<std::string> categories;
      for (size_t b = 0; b < bars; ++b)
        categories.push_back(b + 1 == bars && widest > bars ? std::to_string(b) + "+" : std::to_string(b));
      for (size_t k = 0; k < sc.runs.size(); ++k) {
        if (sc.runs[k]->how.consistency == consistency_model::none) continue;
        const std::vector<int64_t>& h = sc.metrics[k]->staleness_histogram;
        plot::series s{sc.runs[k]->how.name, {}, std::vector<double>(bars, 0.0)};
        for (size_t v = 0; v < h.size(); ++v) s.y[std::min(v, bars - 1)] += static_cast<double>(h[v]);
        stale.push_back(s);
      }
      html += figure("staleness-" + sc.name, plot::bar_chart({"Staleness of applied updates: " + sc.name,
                                                              "staleness (server updates)", "updates"},
                                                             categories, stale));
    }
  }
  html += "<h2>Step time per rank</h2>\n";
  for (const run& r : res.runs) {
    if (!r.error.empty() || r.summary.rank_step_seconds.empty()) continue;
    std::vector<plot::series> ranks;
    for (size_t k = 0; k < r.summary.rank_step_seconds.size(); ++k) {
      plot::series s{"rank " + std::to_string(k), {}, {}};
      for (size_t i = 0; i < r.summary.rank_step_seconds[k].size(); ++i) {
        s.x.push_back(static_cast<double>(i + 1));
        s.y.push_back(r.summary.rank_step_seconds[k][i] * 1e3);
      }
      ranks.push_back(s);
    }
    html += figure(fs::path(r.cfg.out_dir).filename().string() + "-step-time",
                   plot::line_chart({fmt::format("Step time per rank: run {}, {} under {}", r.index, r.how.name, r.scenario),
                                     "step", "ms"},
                                    ranks));
  }
  storage::write_output_file((dir / "index.html").string(), html + "</body></html>\n");
}

}  // namespace

double loss_by(const train_summary& s, double t, size_t window) {
  size_t n = 0;
  while (n < s.losses.size() && (n >= s.step_ends.size() || s.step_ends[n] <= t)) ++n;
  if (n == 0) return s.losses.empty() ? nan : s.losses.front();
  const size_t from = n > window ? n - window : 0;
  double sum = 0;
  for (size_t i = from; i < n; ++i) sum += s.losses[i];
  return sum / static_cast<double>(n - from);
}

run_metrics measure(const run& r, const run* sync, double target_loss) {
  run_metrics m;
  const train_summary& s = r.summary;
  if (!r.error.empty()) {
    for (double* v : {&m.samples_per_s, &m.vs_sync, &m.train_seconds, &m.step_ms_p50, &m.step_ms_p90, &m.step_ms_p99,
                      &m.staleness_max, &m.staleness_mean, &m.final_loss, &m.test_loss, &m.test_accuracy, &m.time_to_target})
      *v = nan;
    return m;
  }
  m.samples_per_s = s.samples_per_s;
  m.vs_sync = sync && sync->summary.samples_per_s > 0 ? s.samples_per_s / sync->summary.samples_per_s : nan;
  m.train_seconds = s.train_seconds;
  m.steps = s.steps;
  std::vector<double> dt;
  for (size_t i = 0; i < s.step_ends.size(); ++i) dt.push_back((s.step_ends[i] - (i ? s.step_ends[i - 1] : 0.0)) * 1e3);
  m.step_ms_p50 = percentile(dt, 0.5);
  m.step_ms_p90 = percentile(dt, 0.9);
  m.step_ms_p99 = percentile(dt, 0.99);
  m.updates = static_cast<int64_t>(s.server_updates.size());
  m.staleness_max = m.staleness_mean = m.updates ? 0.0 : nan;
  for (const auto& u : s.server_updates) {
    const int64_t stale = u.version_applied - u.version_read;
    if (stale >= 0) {
      if (static_cast<size_t>(stale) >= m.staleness_histogram.size()) m.staleness_histogram.resize(static_cast<size_t>(stale) + 1);
      ++m.staleness_histogram[static_cast<size_t>(stale)];
    }
    m.staleness_max = std::max(m.staleness_max, static_cast<double>(stale));
    m.staleness_mean += static_cast<double>(stale) / static_cast<double>(m.updates);
    m.lead_max = std::max(m.lead_max, u.step - u.slowest);
    m.held += u.held ? 1 : 0;
  }
  m.final_loss = loss_by(s, std::numeric_limits<double>::infinity());
  m.test_loss = s.test_loss.empty() ? nan : s.test_loss.back();
  m.test_accuracy = s.test_accuracy.empty() ? nan : s.test_accuracy.back();
  m.time_to_target = time_to(s, target_loss);
  return m;
}

namespace {

// Every line troupe logs while the report is made, also in <report>/stress.log: the runs' own
// lines (their steps, their faults, their failures) are part of what the report shows.
class log_beside_report {
 public:
  explicit log_beside_report(const fs::path& file)
      : sink_(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file.string(), true)) {
    sink_->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~log_beside_report() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  log_beside_report(const log_beside_report&) = delete;
  log_beside_report& operator=(const log_beside_report&) = delete;

 private:
  std::shared_ptr<spdlog::sinks::basic_file_sink_mt> sink_;
};

}  // namespace

int run_and_report(const stress_plan& p) {
  const fs::path out = fs::absolute(p.out_dir);
  // The new report is made where it stays, so every path its runs log exists afterwards (they
  // pointed into a temporary folder renamed at the end). The previous report is kept whole
  // beside it until the new one is complete, and comes back if this one fails.
  const fs::path previous = out.string() + ".previous-" + std::to_string(::getpid());
  if (fs::exists(out)) {
    fs::rename(out, previous);
    spdlog::info("the previous report is kept as {} until this one is complete", previous.string());
  }
  fs::create_directories(out);
  results res;
  try {
    log_beside_report log(out / "stress.log");
    res = run_stress(p, (out / "runs").string());
    spdlog::info("writing the report");
    write_files(p, res, out);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(out, ec);
    if (fs::exists(previous, ec)) fs::rename(previous, out, ec);
    throw;
  }
  fs::remove_all(previous);
  int failed = 0;
  for (const run& r : res.runs) failed += r.error.empty() ? 0 : 1;
  spdlog::info("report: {} ({} runs, {} failed; every line logged: {})", (out / "index.html").string(),
               res.runs.size(), failed, (out / "stress.log").string());
  return failed;
}

}  // namespace troupe::stress
