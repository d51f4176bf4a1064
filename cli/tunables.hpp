// Every tunable of `troupe train` and `troupe worker`, declared once (as NCCL does with
// NCCL_PARAM): its flag, its config-file key, its help with the default, its allowed range and
// where it lands in train_config. The CLI11 options, the TOML reader (config_file.cpp) and
// --help are all made from this table, so a value is range-checked in one place whichever way
// it arrives. It deliberately holds no launcher input (--rank, --world-size, RANK, MASTER_PORT,
// ...): comm/launch_env.hpp checks those, because they also arrive from the environment.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "actors/config/train_config.hpp"

namespace troupe::cli {

enum class value_kind { integer, number, text, choice, integers, texts };

// A checked value; the field that matters is the one of the tunable's kind.
struct value {
  int64_t integer = 0;
  double number = 0;
  std::string text;                // text, choice
  std::vector<int64_t> integers;   // e.g. model.hidden, pipeline.cuts
  std::vector<std::string> texts;  // e.g. data_parallel.stragglers
};

struct tunable {
  std::string flag;  // "--batch-size"; empty: config file only
  std::string key;   // "train.batch_size"; empty: flag only
  std::string help;  // with the default in brackets
  value_kind kind = value_kind::integer;
  int64_t min_int = 0, max_int = 0;  // integer, and each element of integers
  double min_num = 0, max_num = 0;   // number: finite, in [min, max] (open ends below)
  bool min_open = false, max_open = false;
  std::string bound_note;            // why the bound is what it is, when it depends on the machine
  std::string bound_rule;            // that bound as a rule, for the reference (no machine's numbers)
  std::vector<std::string> choices;  // choice
  std::function<void(train_config&, const value&)> apply;
};

// The table, in --help order. Built once; the --threads bound reads the machine.
const std::vector<tunable>& tunables();
const tunable* find_flag(const std::string& flag);
const tunable* find_key(const std::string& key);

// "1..256", "[0, 1)", "(0, 100]", "one of mlp, gpt": what check() allows.
std::string allowed(const tunable& t);

// Range and choice check of a value of the tunable's kind. Throws std::invalid_argument with
// the problem only ("must be in 1..256, got 1000"); the caller prefixes the flag or file:line:key.
void check(const tunable& t, const value& v);

// A flag's text to a checked value (texts: one element per repetition). Same exceptions.
value parse_flag(const tunable& t, const std::vector<std::string>& texts);

// Adds t's flag to cmd, bound as text to `into`, its help ending with what it allows.
void add_tunable_option(CLI::App* cmd, const tunable& t, std::string& into);

// The upper bound of --threads on this machine: twice its hardware threads (more only
// oversubscribes the cores), and never more than this OpenBLAS was built for.
int max_threads();

// "A:B", two counts >= 0 (A at most 1,000,000): a fault's place and when; throws
// std::invalid_argument "\"TEXT\": expected FORM".
std::pair<int64_t, int64_t> two_counts(const std::string& text, const std::string& form);

}  // namespace troupe::cli
