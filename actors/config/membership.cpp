// The membership events' text form (membership.hpp).
#include "actors/config/membership.hpp"

#include <fmt/format.h>

#include <sstream>
#include <stdexcept>
#include <string_view>

#include "storage/input_file.hpp"

namespace troupe {

std::string to_string(const membership_event& e) {
  return "after step " + std::to_string(e.step) + ": " +
         (e.change == membership_change::lose ? "lose replica " + std::to_string(e.replica) : std::string("admit a replica"));
}

std::string to_text(const std::vector<membership_event>& events) {
  std::string out;
  for (const auto& e : events) out += to_string(e) + "\n";
  return out;
}

namespace {

// A line as an error quotes it: printable ASCII only (other bytes as \xNN), at most 80 characters,
// so a binary or huge line cannot fill the log.
std::string quoted_line(const std::string& line) {
  constexpr size_t shown = 80;
  std::string out = "\"";
  for (size_t i = 0; i < line.size() && i < shown; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out += static_cast<char>(c);
    else out += fmt::format("\\x{:02x}", c);
  }
  if (line.size() > shown) out += fmt::format("...\" ({} bytes)", line.size());
  else out += "\"";
  return out;
}

// Reads `word` at `at`, advancing past it; false when the text there differs.
bool take(std::string_view line, size_t& at, std::string_view word) {
  if (line.substr(at, word.size()) != word) return false;
  at += word.size();
  return true;
}

// Up to `max_digits` decimal digits at `at` (at least one); false otherwise.
bool take_number(std::string_view line, size_t& at, int max_digits, int64_t& out) {
  const size_t begin = at;
  out = 0;
  while (at < line.size() && line[at] >= '0' && line[at] <= '9' && static_cast<int>(at - begin) < max_digits)
    out = out * 10 + (line[at++] - '0');
  return at > begin && (at == line.size() || line[at] < '0' || line[at] > '9');
}

}  // namespace

std::vector<membership_event> parse_membership_events(const std::string& text, const std::string& origin) {
  // A plain scanner, not a regular expression: std::regex recurses per character, and a line of
  // 50,000 spaces overflowed the stack.
  std::vector<membership_event> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const size_t last = line.find_last_not_of(" \t\r");
    const std::string_view body = std::string_view(line).substr(first, last - first + 1);
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument(origin + ":" + std::to_string(n) + ": " + why);
    };
    membership_event e;
    size_t at = 0;
    int64_t replica = -1;
    bool ok = take(body, at, "after step ") && take_number(body, at, 12, e.step) && take(body, at, ": ");
    if (ok && take(body, at, "lose replica ")) {
      ok = take_number(body, at, 6, replica);
      e.replica = static_cast<int>(replica);
    } else if (ok) {
      ok = take(body, at, "admit a replica");
      e.change = membership_change::admit;
    }
    if (!ok || at != body.size())
      throw bad(quoted_line(line) + " is not \"after step S: lose replica R\" or \"after step S: admit a replica\"");
    if (e.step < 1) throw bad("a membership changes after step 1 at the earliest (after step 0 is the job's start)");
    if (!out.empty() && e.step < out.back().step)
      throw bad("after step " + std::to_string(e.step) + " comes before the line above's step " +
                std::to_string(out.back().step) + ": events go in step order");
    out.push_back(e);
  }
  return out;
}

std::vector<membership_event> read_membership_events(const std::string& path) {
  return parse_membership_events(storage::read_input_file(path, "--membership-events", storage::settings_file_limit), path);
}

std::vector<int> replicas_after(const std::vector<membership_event>& events, int dp, int min_replicas) {
  std::vector<int> out;
  for (const auto& e : events) {
    if (e.change == membership_change::admit) ++dp;
    else if (e.replica < 0 || e.replica >= dp)
      throw std::invalid_argument(to_string(e) + ": the job has replicas 0.." + std::to_string(dp - 1) + " then");
    else if (--dp < min_replicas)
      throw std::invalid_argument(to_string(e) + ": it leaves " + std::to_string(dp) + " replica" + (dp == 1 ? "" : "s") +
                                  ", fewer than the " + std::to_string(min_replicas) + " of --min-replicas");
    out.push_back(dp);
  }
  return out;
}

int64_t next_change(const std::vector<membership_event>& events, int64_t from) {
  for (const auto& e : events)
    if (e.step > from) return e.step;
  return -1;
}

std::vector<membership_event> events_at(const std::vector<membership_event>& events, int64_t step) {
  std::vector<membership_event> out;
  for (const auto& e : events)
    if (e.step == step) out.push_back(e);
  return out;
}

int replicas_after(const std::vector<membership_event>& at, int dp) {
  for (const auto& e : at) dp += e.change == membership_change::admit ? 1 : -1;
  return dp;
}

}  // namespace troupe
