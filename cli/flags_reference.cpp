// The generated flag reference (flags_reference.hpp).
#include "cli/flags_reference.hpp"

#include <map>
#include <set>
#include <vector>

#include "cli/tunables.hpp"
#include "comm/launch_env.hpp"

namespace troupe::cli {

namespace {

// A table cell: a '|' would end it early.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string code(const std::string& s) { return s.empty() ? "" : "`" + s + "`"; }

}  // namespace

std::string flags_reference(const CLI::App& train) {
  std::string out =
      "# Flags and config keys\n\n"
      "Every flag of `troupe train` (and of `troupe worker`, which takes the same), the key that sets it in a\n"
      "`--config` TOML file (`[section]` then `key = value`), the values it allows, and what it does with its\n"
      "default in brackets. A flag given on the command line overrides the file; a value out of range is refused\n"
      "before anything runs, naming the flag or the file's line.\n\n"
      "This page is generated from the table in `cli/tunables.cpp`: `troupe info --flags-reference >\n"
      "docs/reference/flags.md`. The test `cli.flags_reference_is_current` fails when it is stale.\n";
  // Sections in the order their first key appears in the table, as --help lists the flags.
  std::vector<std::string> sections;
  std::map<std::string, std::vector<const tunable*>> by_section;
  std::set<std::string> table_flags;
  for (const tunable& t : tunables()) {
    if (!t.flag.empty()) table_flags.insert(t.flag);
    const std::string section = t.key.empty() ? "" : t.key.substr(0, t.key.find('.'));
    if (!by_section.count(section)) sections.push_back(section);
    by_section[section].push_back(&t);
  }
  for (const std::string& section : sections) {
    out += "\n## " + (section.empty() ? std::string("Command line only") : "[" + section + "]") + "\n\n";
    out += "| Flag | Config key | Allowed | What it does [default] |\n|---|---|---|---|\n";
    for (const tunable* t : by_section[section]) {
      const std::string key = t->key.empty() ? "" : t->key.substr(t->key.find('.') + 1);
      const std::string bound = !t->bound_rule.empty() ? t->bound_rule : allowed(*t);
      const std::string repeat = t->kind == value_kind::texts ? " (repeatable; in the file, a list)" : "";
      out += "| " + code(t->flag) + " | " + code(key) + " | " + cell(bound + repeat) + " | " + cell(t->help) + " |\n";
    }
  }
  out += "\n## Flags without a config key\n\n| Flag | What it does |\n|---|---|\n";
  for (const CLI::Option* o : train.get_options()) {
    const std::string name = o->get_name();
    if (name.rfind("--", 0) != 0 || name == "--help" || table_flags.count(name)) continue;
    out += "| " + code(name) + " | " + cell(o->get_description()) + " |\n";
  }
  out +=
      "\n## Launcher environment\n\n"
      "Read when no `--rank`/`--world-size` flag is given; when launchers nest, the first listed wins. "
      "Flags `--master-addr`/`--master-port` win over the variables.\n\n"
      "| Variables | Meaning |\n|---|---|\n";
  for (const launch_variable& v : launch_variables()) out += "| " + code(v.name) + " | " + cell(v.meaning) + " |\n";
  return out;
}

}  // namespace troupe::cli
