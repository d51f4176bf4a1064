// toml++ parsing with a closed schema: every accepted key is listed here, with its type.
#include "cli/config_file.hpp"

#include <toml++/toml.h>

#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

namespace troupe::cli {

namespace {

std::string where(const std::string& path, const toml::node& n) {
  return path + ":" + std::to_string(n.source().begin.line);
}

struct reader {
  std::string path;
  [[noreturn]] void fail(const toml::node& n, const std::string& key, const std::string& what) const {
    throw std::invalid_argument(where(path, n) + ": " + key + ": " + what);
  }
  int64_t integer(const toml::node& n, const std::string& key, int64_t min) const {
    auto v = n.value<int64_t>();
    if (!n.is_integer() || !v) fail(n, key, "expected an integer");
    if (*v < min) fail(n, key, "must be >= " + std::to_string(min) + ", got " + std::to_string(*v));
    return *v;
  }
  float number(const toml::node& n, const std::string& key) const {
    if (!n.is_number()) fail(n, key, "expected a number");
    return static_cast<float>(*n.value<double>());
  }
  std::string text(const toml::node& n, const std::string& key) const {
    if (!n.is_string()) fail(n, key, "expected a string");
    return *n.value<std::string>();
  }
};

using setter = std::function<void(const toml::node&, const std::string&)>;

}  // namespace

std::vector<int64_t> parse_widths(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v <= 0)
      throw std::invalid_argument("hidden: \"" + item + "\" is not a positive layer width (expected e.g. 256,256)");
    out.push_back(v);
  }
  return out;
}

train_config load_config_file(const std::string& path, train_config c) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " +
                                std::string(e.description()));
  }
  const reader r{path};
  std::map<std::string, std::map<std::string, setter>> schema;
  auto& train = schema["train"];
  train["epochs"] = [&](auto& n, auto& k) { c.epochs = r.integer(n, k, 1); };
  train["batch_size"] = [&](auto& n, auto& k) { c.batch_size = r.integer(n, k, 1); };
  train["seed"] = [&](auto& n, auto& k) { c.seed = static_cast<uint64_t>(r.integer(n, k, 0)); };
  train["threads"] = [&](auto& n, auto& k) { c.threads = static_cast<int>(r.integer(n, k, 1)); };
  train["max_steps"] = [&](auto& n, auto& k) { c.max_steps = r.integer(n, k, 0); };
  train["out"] = [&](auto& n, auto& k) { c.out_dir = r.text(n, k); };
  train["eval_batches"] = [&](auto& n, auto& k) { c.eval_max_batches = r.integer(n, k, 0); };
  auto& model = schema["model"];
  model["kind"] = [&](auto& n, auto& k) {
    c.model.kind = r.text(n, k);
    if (c.model.kind != "mlp" && c.model.kind != "gpt") r.fail(n, k, "must be \"mlp\" or \"gpt\"");
  };
  model["hidden"] = [&](auto& n, auto& k) {
    const auto* arr = n.as_array();
    if (!arr || arr->empty()) r.fail(n, k, "expected a non-empty array of layer widths");
    c.model.hidden.clear();
    for (const auto& e : *arr) c.model.hidden.push_back(r.integer(e, k, 1));
  };
  model["context"] = [&](auto& n, auto& k) { c.model.context = r.integer(n, k, 1); };
  model["channels"] = [&](auto& n, auto& k) { c.model.channels = r.integer(n, k, 1); };
  model["heads"] = [&](auto& n, auto& k) { c.model.heads = r.integer(n, k, 1); };
  model["blocks"] = [&](auto& n, auto& k) { c.model.blocks = r.integer(n, k, 1); };
  auto& optim = schema["optimizer"];
  optim["kind"] = [&](auto& n, auto& k) {
    c.optim.kind = r.text(n, k);
    if (c.optim.kind != "adamw" && c.optim.kind != "sgd") r.fail(n, k, "must be \"adamw\" or \"sgd\"");
  };
  optim["lr"] = [&](auto& n, auto& k) {
    c.optim.lr = r.number(n, k);
    if (!(c.optim.lr > 0)) r.fail(n, k, "must be positive");
  };
  optim["weight_decay"] = [&](auto& n, auto& k) { c.optim.weight_decay = r.number(n, k); };
  optim["momentum"] = [&](auto& n, auto& k) { c.optim.momentum = r.number(n, k); };
  optim["beta1"] = [&](auto& n, auto& k) { c.optim.beta1 = r.number(n, k); };
  optim["beta2"] = [&](auto& n, auto& k) { c.optim.beta2 = r.number(n, k); };
  optim["eps"] = [&](auto& n, auto& k) { c.optim.eps = r.number(n, k); };
  auto& pipeline = schema["pipeline"];
  pipeline["stages"] = [&](auto& n, auto& k) { c.pp = static_cast<int>(r.integer(n, k, 1)); };
  pipeline["schedule"] = [&](auto& n, auto& k) {
    c.schedule = r.text(n, k);
    if (c.schedule != "gpipe" && c.schedule != "1f1b" && c.schedule != "interleaved" && c.schedule != "zb-h1")
      r.fail(n, k, "must be \"gpipe\", \"1f1b\", \"interleaved\" or \"zb-h1\"");
  };
  pipeline["micro_batches"] = [&](auto& n, auto& k) { c.micro_batches = static_cast<int>(r.integer(n, k, 1)); };
  pipeline["virtual_stages"] = [&](auto& n, auto& k) { c.virtual_stages = static_cast<int>(r.integer(n, k, 1)); };
  pipeline["cuts"] = [&](auto& n, auto& k) {
    const auto* arr = n.as_array();
    if (!arr) r.fail(n, k, "expected an array of layer indices, e.g. [3, 5]");
    c.cuts.clear();
    for (const auto& e : *arr) c.cuts.push_back(r.integer(e, k, 1));
  };
  pipeline["watchdog_seconds"] = [&](auto& n, auto& k) {
    c.watchdog_seconds = r.number(n, k);
    if (!(c.watchdog_seconds > 0)) r.fail(n, k, "must be positive");
  };
  auto& dp = schema["data_parallel"];
  dp["ranks"] = [&](auto& n, auto& k) { c.dp = static_cast<int>(r.integer(n, k, 1)); };
  dp["bucket_mb"] = [&](auto& n, auto& k) {
    if (!n.is_number() || *n.template value<double>() < 0) r.fail(n, k, "expected a number >= 0 (MiB)");
    c.bucket_mb = *n.template value<double>();
  };
  dp["stragglers"] = [&](auto& n, auto& k) {
    const auto* arr = n.as_array();
    if (!arr) r.fail(n, k, "expected an array of \"rank:ms\" or \"rank:ms:random\" strings, e.g. [\"1:50\"]");
    c.stragglers.clear();
    for (const auto& e : *arr) {
      try {
        c.stragglers.push_back(parse_straggler(r.text(e, k)));
      } catch (const std::invalid_argument& err) {
        r.fail(e, k, err.what());
      }
    }
  };
  dp["trace_step"] = [&](auto& n, auto& k) { c.trace_step = r.integer(n, k, -1); };
  auto& proc = schema["process"];
  proc["nodes"] = [&](auto& n, auto& k) { c.process.world = static_cast<int>(r.integer(n, k, 1)); };
  proc["master_addr"] = [&](auto& n, auto& k) { c.process.master_addr = r.text(n, k); };
  proc["master_port"] = [&](auto& n, auto& k) { c.process.master_port = static_cast<uint16_t>(r.integer(n, k, 0)); };
  proc["secret_file"] = [&](auto& n, auto& k) { c.process.secret_file = r.text(n, k); };
  proc["peer_timeout"] = [&](auto& n, auto& k) {
    c.process.peer_timeout_seconds = r.number(n, k);
    if (!(c.process.peer_timeout_seconds > 0)) r.fail(n, k, "must be positive (seconds)");
  };
  proc["tls_cert"] = [&](auto& n, auto& k) { c.process.tls_cert = r.text(n, k); };
  proc["tls_key"] = [&](auto& n, auto& k) { c.process.tls_key = r.text(n, k); };
  proc["tls_ca"] = [&](auto& n, auto& k) { c.process.tls_ca = r.text(n, k); };
  auto& data = schema["data"];
  data["fashion_mnist"] = [&](auto& n, auto& k) { c.fashion_mnist_dir = r.text(n, k); };
  data["corpus"] = [&](auto& n, auto& k) { c.corpus_path = r.text(n, k); };

  for (const auto& [table_key, table_node] : root) {
    const std::string table_name(table_key.str());
    auto t = schema.find(table_name);
    if (t == schema.end())
      r.fail(table_node, table_name, "unknown table (known: [train], [model], [optimizer], [pipeline], [data_parallel], [process], [data])");
    const auto* table = table_node.as_table();
    if (!table) r.fail(table_node, table_name, "expected a table, e.g. [" + table_name + "]");
    for (const auto& [key, node] : *table) {
      const std::string name = table_name + "." + std::string(key.str());
      auto s = t->second.find(std::string(key.str()));
      if (s == t->second.end()) {
        std::string known;
        for (const auto& [k, _] : t->second) known += (known.empty() ? "" : ", ") + k;
        r.fail(node, name, "unknown key (known in [" + table_name + "]: " + known + ")");
      }
      s->second(node, name);
    }
  }
  try {
    validate(c.optim);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
  return c;
}

}  // namespace troupe::cli
