// The membership events' text form (membership.hpp).
#include "actors/job/membership.hpp"

#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

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

std::vector<membership_event> parse_membership_events(const std::string& text, const std::string& origin) {
  static const std::regex line_form(R"(\s*after step (\d{1,12}): (lose replica (\d{1,6})|admit a replica)\s*)");
  std::vector<membership_event> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::smatch m;
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument(origin + ":" + std::to_string(n) + ": " + why);
    };
    if (!std::regex_match(line, m, line_form))
      throw bad("\"" + line + "\" is not \"after step S: lose replica R\" or \"after step S: admit a replica\"");
    membership_event e;
    e.step = std::stoll(m[1].str());
    if (m[3].matched) e.replica = std::stoi(m[3].str());
    else e.change = membership_change::admit;
    if (e.step < 1) throw bad("a membership changes after step 1 at the earliest (after step 0 is the job's start)");
    if (!out.empty() && e.step < out.back().step)
      throw bad("after step " + std::to_string(e.step) + " comes before the line above's step " +
                std::to_string(out.back().step) + ": events go in step order");
    out.push_back(e);
  }
  return out;
}

std::vector<membership_event> read_membership_events(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::invalid_argument(path + ": cannot read the membership events");
  std::stringstream text;
  text << f.rdbuf();
  return parse_membership_events(text.str(), path);
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
