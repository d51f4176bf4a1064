// Schedule files (schedule_file.hpp). The grammar is sched::parse_schedule's alone; this file
// adds only what a file edited by hand needs: comments, blank lines, CRLF line ends, and error
// lines counted in the file rather than in the text handed to the parser.
#include "cli/schedule_file.hpp"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cli/tunables.hpp"
#include "schedules/validate.hpp"
#include "storage/input_file.hpp"

namespace troupe::cli {

namespace {

[[noreturn]] void refuse(const std::string& path, int line, const std::string& why) {
  throw std::invalid_argument(path + ":" + std::to_string(line) + ": " + why);
}

// parse_schedule reports "parse_schedule: line N: why" (schedule.hpp): N counts the lines it
// was given, which the caller maps back to the file's.
std::pair<int, std::string> split_parse_error(const std::string& message) {
  std::size_t pos = message.find("line ");
  if (pos == std::string::npos) return {1, message};
  pos += 5;
  int line = 0;
  const std::size_t digits = pos;
  while (pos < message.size() && std::isdigit(static_cast<unsigned char>(message[pos])))
    line = line * 10 + (message[pos++] - '0');
  if (pos == digits || message.compare(pos, 2, ": ") != 0) return {1, message};
  return {line, message.substr(pos + 2)};
}

// The header's counts must fit what the same flags allow: a typo such as microbatches=80000000
// is refused here instead of becoming a huge allocation in validate.
void check_counts(const std::string& path, int line, const sched::schedule& s) {
  const std::pair<const char*, int> counts[] = {
      {"--pp", s.num_stages}, {"--micro-batches", s.num_microbatches}, {"--virtual-stages", s.virtual_stages}};
  const char* const fields[] = {"stages", "microbatches", "virtual"};
  for (std::size_t i = 0; i < 3; ++i) {
    value v;
    v.integer = counts[i].second;
    try {
      check(*find_flag(counts[i].first), v);
    } catch (const std::invalid_argument& e) {
      refuse(path, line, std::string(fields[i]) + ": " + e.what() + " (as " + counts[i].first + ")");
    }
  }
}

}  // namespace

sched::schedule read_schedule_file(const std::string& path) {
  std::istringstream in(storage::read_input_file(path, "schedule file", storage::settings_file_limit));
  std::string text;
  std::vector<int> file_line;  // file_line[i]: the file's line number of the parser's line i + 1
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    text += line + "\n";
    file_line.push_back(number);
  }
  if (in.bad()) throw std::invalid_argument("cannot read schedule file " + path + ": " + std::strerror(errno));
  if (file_line.empty())
    refuse(path, std::max(number, 1), "no schedule in the file (expected \"schedule <name> stages=P microbatches=M "
                                      "virtual=v\" and a \"stage d: ...\" line per stage)");
  auto at = [&](int parsed_line) {
    const int i = std::min(std::max(parsed_line, 1), static_cast<int>(file_line.size())) - 1;
    return file_line[static_cast<std::size_t>(i)];
  };
  sched::schedule s;
  try {
    s = sched::parse_schedule(text);
  } catch (const std::invalid_argument& e) {
    const auto [line, why] = split_parse_error(e.what());
    refuse(path, at(line), why);
  }
  check_counts(path, at(1), s);
  const sched::validation v = sched::validate(s);
  if (!v.ok()) refuse(path, at(v.stage >= 0 ? v.stage + 2 : 1), "schedule refused: " + v.error);
  return s;
}

std::string schedule_file_text(const sched::schedule& s, const std::string& origin) {
  std::string comment = origin;
  for (char& c : comment)
    if (c == '\n' || c == '\r') c = ' ';
  return "# " + comment + "\n" + sched::to_string(s);
}

}  // namespace troupe::cli
