// toml++ parsing with a closed schema: the accepted keys, their types and ranges are those of the
// table of tunables (tunables.hpp), the same that makes the flags.
#include "cli/config_file.hpp"

#include "cli/tunables.hpp"
#include "storage/input_file.hpp"

#include <toml++/toml.h>

#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

namespace troupe::cli {

namespace {

std::string where(const std::string& path, const toml::node& n) {
  return path + ":" + std::to_string(n.source().begin.line);
}

// A TOML node of the tunable's kind, or a failure naming what was expected.
value read_node(const tunable& t, const toml::node& n, const std::function<void(const toml::node&, const std::string&)>& fail) {
  value v;
  auto integer = [&](const toml::node& e) {
    if (!e.is_integer()) fail(e, "expected an integer (" + allowed(t) + ")");
    return *e.value<int64_t>();
  };
  auto text = [&](const toml::node& e) {
    if (!e.is_string()) fail(e, "expected a string");
    return *e.value<std::string>();
  };
  switch (t.kind) {
    case value_kind::integer:
      v.integer = integer(n);
      break;
    case value_kind::number:
      if (!n.is_number()) fail(n, "expected a number (" + allowed(t) + ")");
      v.number = *n.value<double>();
      break;
    case value_kind::text:
    case value_kind::choice:
      v.text = text(n);
      break;
    case value_kind::integers: {
      const auto* arr = n.as_array();
      if (!arr) fail(n, "expected an array of integers, e.g. [3, 5] (" + allowed(t) + ")");
      for (const auto& e : *arr) v.integers.push_back(integer(e));
      break;
    }
    case value_kind::texts: {
      const auto* arr = n.as_array();
      if (!arr) fail(n, "expected an array of strings, e.g. [\"1:50\"]");
      for (const auto& e : *arr) v.texts.push_back(text(e));
      break;
    }
  }
  return v;
}

}  // namespace

std::vector<int64_t> parse_widths(const std::string& text) {
  try {
    return parse_flag(*find_flag("--hidden"), {text}).integers;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("hidden: \"" + text + "\": " + e.what() + " (expected e.g. 256,256)");
  }
}

train_config load_config_file(const std::string& path, train_config c, std::set<std::string>* given,
                              const std::set<std::string>& foreign) {
  toml::table root;
  try {
    root = toml::parse(storage::read_input_file(path, "config", storage::settings_file_limit), path);
  } catch (const toml::parse_error& e) {
    throw std::invalid_argument(path + ":" + std::to_string(e.source().begin.line) + ": " +
                                std::string(e.description()));
  }
  // The tables and their keys, from the one table of tunables.
  std::map<std::string, std::map<std::string, const tunable*>> schema;
  for (const auto& t : tunables()) {
    if (t.key.empty()) continue;
    const auto dot = t.key.find('.');
    schema[t.key.substr(0, dot)][t.key.substr(dot + 1)] = &t;
  }
  // The mesh is one table, [mesh] dp / pp / tp; the older homes of dp and pp stay accepted, and
  // naming one value in both places is refused.
  for (const auto& [alias, key] : {std::pair{"dp", "data_parallel.ranks"}, {"pp", "pipeline.stages"}})
    for (const auto& t : tunables())
      if (t.key == key) schema["mesh"][alias] = &t;
  std::set<std::string> seen;  // canonical keys given so far
  std::string known_tables;
  for (const auto& [name, _] : schema) known_tables += (known_tables.empty() ? "[" : ", [") + name + "]";

  for (const auto& [table_key, table_node] : root) {
    const std::string table_name(table_key.str());
    if (foreign.count(table_name)) continue;
    auto fail_at = [&](const toml::node& n, const std::string& key, const std::string& what) {
      throw std::invalid_argument(where(path, n) + ": " + key + ": " + what);
    };
    auto t = schema.find(table_name);
    if (t == schema.end()) fail_at(table_node, table_name, "unknown table (known: " + known_tables + ")");
    const auto* table = table_node.as_table();
    if (!table) fail_at(table_node, table_name, "expected a table, e.g. [" + table_name + "]");
    for (const auto& [key, node] : *table) {
      const std::string name = table_name + "." + std::string(key.str());
      auto s = t->second.find(std::string(key.str()));
      if (s == t->second.end()) {
        std::string known;
        for (const auto& [k, _] : t->second) known += (known.empty() ? "" : ", ") + k;
        fail_at(node, name, "unknown key (known in [" + table_name + "]: " + known + ")");
      }
      const tunable& tn = *s->second;
      if (!seen.insert(tn.key).second)
        fail_at(node, name, "gives " + tn.key + " a second time (the mesh's dp and pp go in [mesh] or in their old "
                            "tables, not both)");
      const value v = read_node(tn, node, [&](const toml::node& n, const std::string& what) { fail_at(n, name, what); });
      try {
        check(tn, v);
        tn.apply(c, v);
      } catch (const std::invalid_argument& e) {
        fail_at(node, name, e.what());
      }
      if (given) given->insert(tn.key);
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
