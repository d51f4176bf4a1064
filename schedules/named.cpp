// Built-in schedules by name (see named.hpp).
#include "schedules/named.hpp"

#include <stdexcept>

#include "schedules/builders.hpp"
#include "schedules/passes.hpp"
#include "schedules/validate.hpp"

namespace troupe::sched {

namespace {
constexpr builder all_builders[] = {builder::gpipe, builder::one_f_one_b, builder::interleaved, builder::zb_h1};
}

const char* to_string(builder b) {
  switch (b) {
    case builder::gpipe:
      return "gpipe";
    case builder::one_f_one_b:
      return "1f1b";
    case builder::interleaved:
      return "interleaved";
    case builder::zb_h1:
      return "zb-h1";
  }
  return "?";
}

std::optional<builder> parse_builder(const std::string& name) {
  for (builder b : all_builders)
    if (name == to_string(b)) return b;
  return std::nullopt;
}

std::string known_builders() {
  std::string out;
  for (builder b : all_builders) out += (out.empty() ? "" : ", ") + std::string(to_string(b));
  return out;
}

schedule make_named_schedule(const std::string& name, int P, int M, int v) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (P < 1) bad("--pp must be >= 1, got " + std::to_string(P));
  if (M < 1) bad("--micro-batches must be >= 1, got " + std::to_string(M));
  const auto kind = parse_builder(name);
  if (!kind) bad("unknown schedule \"" + name + "\" (known: " + known_builders() + ")");
  schedule s;
  switch (*kind) {
    case builder::gpipe:
      s = gpipe(P, M);
      break;
    case builder::one_f_one_b:
      s = one_f_one_b(P, M);
      break;
    case builder::interleaved:
      if (v < 1) bad("--virtual-stages must be >= 1, got " + std::to_string(v));
      if (M % P != 0)
        bad("--micro-batches " + std::to_string(M) + " is not a multiple of --pp " + std::to_string(P) +
            ": the interleaved schedule passes microbatches through its chunks in groups of P");
      s = interleaved_1f1b(P, M, v);
      break;
    case builder::zb_h1:
      s = zb_h1(P, M);
      break;
  }
  s = complete(s);
  const auto check = validate(s);
  if (!check.ok()) bad("schedule " + name + " is invalid: " + check.error);
  return s;
}

schedule make_named_schedule_with_fetches(const std::string& name, int P, int M, int v) {
  const schedule s = add_param_fetches(make_named_schedule(name, P, M, v));
  const auto check = validate(s);
  if (!check.ok()) throw std::invalid_argument("schedule " + name + " with parameter fetches is invalid: " + check.error);
  return s;
}

}  // namespace troupe::sched
