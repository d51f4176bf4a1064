// toml++ over a closed schema, as config_file.cpp does for the job's own tables: an unknown key,
// a wrong type or a bad value is refused naming the file, the line and the key.
#include "cli/stress_file.hpp"

#include <toml++/toml.h>

#include <functional>
#include <set>
#include <stdexcept>

#include "cli/config_file.hpp"
#include "cli/tunables.hpp"
#include "storage/input_file.hpp"

namespace troupe::cli {

const char* const stress_file_help =
    "A scenario file holds the job in the tables of `troupe train --config` ([train], [model], [optimizer],\n"
    "[mesh], [data], ...), and:\n"
    "  [stress]\n"
    "  modes = [\"sync\", \"ready:4\", \"bsp\", \"ssp:1\", \"ssp:3\", \"asp\"]  training modes, each run under every\n"
    "                               scenario (ready:H: sync with ready dispatch and H activations of stash headroom)\n"
    "  out = \"runs/stress\"          the report folder (replaced whole once the new report is written)\n"
    "  target_loss = 0.6            time to this training loss (default: sync DP's final loss per scenario)\n"
    "  calibrate_steps = 40         steps of the sync DP run that measures the step time for \"Nx\" stragglers\n"
    "  [[scenario]]                 one per scenario, in order\n"
    "  name = \"straggler-3x\"        letters, digits, '-', '_' and '.'\n"
    "  stragglers = [\"0:3x\"]        replica:ms[:fixed|uniform|exponential|pareto|burst[:param]]; ms may be\n"
    "                               Nx: N times the sync DP step time\n"
    "  kill_server = \"0:20\"         server:updates; the server dies after that many (parameter server modes only)\n"
    "  jitter = [\"1:5\"]             mesh rank:max_ms: each compute action of that rank sleeps up to max_ms more\n"
    "  kill_replica = \"1:40\"        replica:step: an elastic job (sync modes only) loses that replica as the step\n"
    "                               begins and goes on without it\n"
    "  admit_after = 80             an elastic job (sync modes only) admits a replica after that many steps\n"
    "No [[scenario]]: one, \"none\", without faults. Every run is a job in this process: slow links, paused and\n"
    "killed processes need jobs over several processes, which troupe stress does not run.\n";

namespace {

std::string at(const std::string& path, const toml::node& n) { return path + ":" + std::to_string(n.source().begin.line); }

[[noreturn]] void fail(const std::string& path, const toml::node& n, const std::string& key, const std::string& what) {
  throw std::invalid_argument(at(path, n) + ": " + key + ": " + what);
}

std::string text(const std::string& path, const toml::node& n, const std::string& key) {
  if (!n.is_string()) fail(path, n, key, "expected a string");
  return *n.value<std::string>();
}

// Each string of an array, through `each` (which throws std::invalid_argument on a bad one).
void texts(const std::string& path, const toml::node& n, const std::string& key,
           const std::function<void(const std::string&)>& each) {
  const auto* arr = n.as_array();
  if (!arr) fail(path, n, key, "expected an array of strings, e.g. [\"0:3x\"]");
  for (const auto& e : *arr) {
    const std::string v = text(path, e, key);
    try {
      each(v);
    } catch (const std::invalid_argument& x) {
      fail(path, e, key, x.what());
    }
  }
}

// "A:B" (two_counts), refused naming the file, line and key.
std::pair<int64_t, int64_t> counts(const std::string& path, const toml::node& n, const std::string& key, const char* form) {
  try {
    return two_counts(text(path, n, key), form);
  } catch (const std::invalid_argument& e) {
    fail(path, n, key, e.what());
  }
}

void read_stress(const std::string& path, const toml::node& node, stress::stress_plan& p) {
  const auto* t = node.as_table();
  if (!t) fail(path, node, "stress", "expected a table, e.g. [stress]");
  for (const auto& [k, n] : *t) {
    const std::string key = "stress." + std::string(k.str());
    if (k == "modes") {
      texts(path, n, key, [&](const std::string& v) { p.modes.push_back(stress::parse_mode(v)); });
      std::set<std::string> seen;
      for (const auto& m : p.modes)
        if (!seen.insert(m.name).second) fail(path, n, key, "mode " + m.name + " is given twice");
    } else if (k == "out") {
      p.out_dir = text(path, n, key);
      if (p.out_dir.empty()) fail(path, n, key, "expected a folder");
    } else if (k == "target_loss") {
      if (!n.is_number() || !(*n.value<double>() > 0)) fail(path, n, key, "expected a number > 0");
      p.target_loss = *n.value<double>();
    } else if (k == "calibrate_steps") {
      if (!n.is_integer() || *n.value<int64_t>() < 10) fail(path, n, key, "expected an integer >= 10");
      p.calibrate_steps = *n.value<int64_t>();
    } else {
      fail(path, n, key, "unknown key (known in [stress]: modes, out, target_loss, calibrate_steps)");
    }
  }
}

stress::scenario read_scenario(const std::string& path, const toml::node& node) {
  const auto* t = node.as_table();
  if (!t) fail(path, node, "scenario", "expected a table, [[scenario]]");
  stress::scenario s;
  for (const auto& [k, n] : *t) {
    const std::string key = "scenario." + std::string(k.str());
    if (k == "name") {
      s.name = text(path, n, key);
      if (s.name.empty() || s.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
                                std::string::npos)
        fail(path, n, key, "\"" + s.name + "\": expected letters, digits, '-', '_' or '.' (it names files)");
    } else if (k == "stragglers") {
      texts(path, n, key, [&](const std::string& v) { s.stragglers.push_back(stress::parse_relative_straggler(v)); });
    } else if (k == "jitter") {
      texts(path, n, key, [&](const std::string& v) { s.jitter.push_back(parse_jitter(v)); });
    } else if (k == "slow_links") {
      texts(path, n, key, [&](const std::string& v) { s.slow_links.push_back(parse_slow_link(v)); });
    } else if (k == "kill_server") {
      const auto [server, after] = counts(path, n, key, "server:updates, e.g. \"0:20\"");
      s.kill_server = static_cast<int>(server);
      s.kill_server_after = after;
    } else if (k == "kill_replica") {
      const auto [replica, step] = counts(path, n, key, "replica:step, e.g. \"1:40\"");
      s.kill_replica = static_cast<int>(replica);
      s.kill_replica_step = step;
    } else if (k == "admit_after") {
      if (!n.is_integer() || *n.value<int64_t>() < 1) fail(path, n, key, "expected an integer >= 1 (steps done)");
      s.admit_after = *n.value<int64_t>();
    } else {
      fail(path, n, key,
           "unknown key (known in [[scenario]]: name, stragglers, jitter, slow_links, kill_server, kill_replica, admit_after)");
    }
  }
  if (s.name.empty()) fail(path, node, "scenario.name", "every [[scenario]] needs a name");
  return s;
}

}  // namespace

stress::stress_plan load_stress_file(const std::string& path) {
  stress::stress_plan p;
  p.source = path;
  // The job first: its tables, with their own checks and messages.
  const train_config defaults;  // named: GCC 12 warns (wrongly) of an unset vector in a temporary one
  p.job = load_config_file(path, defaults, nullptr, {"stress", "scenario"});
  toml::table root;
  try {
    root = toml::parse(storage::read_input_file(path, "stress file", storage::settings_file_limit), path);
  } catch (const toml::parse_error& e) {  // load_config_file has read it already; kept for safety
    throw std::invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  }
  const toml::node* stress_node = root.get("stress");
  if (!stress_node) throw std::invalid_argument(path + ": no [stress] table (it lists the modes: see troupe stress --help)");
  read_stress(path, *stress_node, p);
  if (p.modes.empty()) fail(path, *stress_node, "stress.modes", "no mode: give e.g. modes = [\"sync\", \"asp\"]");
  std::vector<int> lines;
  if (const toml::node* sn = root.get("scenario")) {
    const auto* arr = sn->as_array();
    if (!arr) fail(path, *sn, "scenario", "expected tables, [[scenario]]");
    std::set<std::string> names;
    for (const auto& e : *arr) {
      p.scenarios.push_back(read_scenario(path, e));
      lines.push_back(static_cast<int>(e.source().begin.line));
      if (!names.insert(p.scenarios.back().name).second)
        fail(path, e, "scenario.name", "\"" + p.scenarios.back().name + "\" names two scenarios");
    }
  }
  if (p.scenarios.empty()) {  // no fault: every mode once, as it runs undisturbed
    p.scenarios.push_back(stress::scenario{"none", {}, {}, {}, -1, 0, -1, 0, -1});
    lines.push_back(static_cast<int>(stress_node->source().begin.line));
  }
  // Each scenario's runs must be jobs the runtime takes: checked one scenario at a time, so the
  // message names its line.
  for (size_t i = 0; i < p.scenarios.size(); ++i) {
    stress::stress_plan one = p;
    one.scenarios = {p.scenarios[i]};
    try {
      stress::plan_runs(one);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ":" + std::to_string(lines[i]) + ": " + e.what());
    }
  }
  return p;
}

}  // namespace troupe::cli
