// schedule: the chunk layout arithmetic, message matching keys, and the schedule text form.
// It checks only what the text form itself needs (well-formed lines, stage rows in order);
// whether the schedule can run is validate()'s business, not the parser's.
#include "schedules/schedule.hpp"

#include <charconv>
#include <stdexcept>
#include <tuple>

namespace troupe::sched {

bool operator==(const schedule& a, const schedule& b) {
  return a.name == b.name && a.num_stages == b.num_stages &&
         a.num_microbatches == b.num_microbatches && a.virtual_stages == b.virtual_stages &&
         a.stages == b.stages;
}

bool operator!=(const schedule& a, const schedule& b) { return !(a == b); }

int num_model_chunks(const schedule& s) { return s.num_stages * s.virtual_stages; }
int model_chunk(const schedule& s, int stage, int chunk) { return chunk * s.num_stages + stage; }
int stage_of(const schedule& s, int model_chunk) { return model_chunk % s.num_stages; }
int chunk_of(const schedule& s, int model_chunk) { return model_chunk / s.num_stages; }

bool operator<(const message_key& a, const message_key& b) {
  return std::tie(a.is_grad, a.microbatch, a.boundary) <
         std::tie(b.is_grad, b.microbatch, b.boundary);
}

bool operator==(const message_key& a, const message_key& b) {
  return a.is_grad == b.is_grad && a.microbatch == b.microbatch && a.boundary == b.boundary;
}

message_key key_of(const schedule& s, const action& a) {
  const int k = model_chunk(s, a.stage, a.chunk);
  message_key key;
  key.microbatch = a.microbatch;
  key.is_grad = a.kind == op::send_grad || a.kind == op::recv_grad;
  // Activation: sent from chunk k over boundary k, received by chunk k over boundary k - 1.
  // Gradient: sent from chunk k over boundary k - 1, received by chunk k over boundary k.
  key.boundary = (a.kind == op::send_act || a.kind == op::recv_grad) ? k : k - 1;
  return key;
}

int expected_peer(const schedule& s, const action& a) {
  const int k = model_chunk(s, a.stage, a.chunk);
  const bool toward_output = a.kind == op::send_act || a.kind == op::recv_grad;
  const int neighbour = toward_output ? k + 1 : k - 1;
  if (neighbour < 0 || neighbour >= num_model_chunks(s)) return -1;
  return stage_of(s, neighbour);
}

std::string to_string(const schedule& s) {
  std::string out = "schedule " + s.name + " stages=" + std::to_string(s.num_stages) +
                    " microbatches=" + std::to_string(s.num_microbatches) +
                    " virtual=" + std::to_string(s.virtual_stages) + "\n";
  for (std::size_t d = 0; d < s.stages.size(); ++d) {
    out += "stage " + std::to_string(d) + ":";
    for (const action& a : s.stages[d]) out += " " + body_string(a);
    out += "\n";
  }
  return out;
}

namespace {

[[noreturn]] void fail(int line, const std::string& why) {
  throw std::invalid_argument("parse_schedule: line " + std::to_string(line) + ": " + why);
}

// Splits on single spaces; an empty field (two spaces, leading space) is an error upstream.
std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t space = text.find(' ', start);
    parts.push_back(text.substr(start, space - start));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  return parts;
}

int read_field(int line, std::string_view field, std::string_view prefix) {
  if (field.substr(0, prefix.size()) != prefix)
    fail(line, "expected \"" + std::string(prefix) + "<number>\", got \"" + std::string(field) + "\"");
  const std::string_view digits = field.substr(prefix.size());
  int value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  const bool canonical = !digits.empty() && (digits[0] != '0' || digits.size() == 1);
  if (ec != std::errc() || end != digits.data() + digits.size() || !canonical)
    fail(line, "bad number in \"" + std::string(field) + "\"");
  return value;
}

}  // namespace

schedule parse_schedule(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) fail(static_cast<int>(lines.size()) + 1, "missing final newline");
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.empty()) fail(1, "empty text");

  schedule s;
  const auto header = split(lines[0]);
  if (header.size() != 5 || header[0] != "schedule" || header[1].empty())
    fail(1, "expected \"schedule <name> stages=P microbatches=M virtual=v\"");
  s.name = std::string(header[1]);
  s.num_stages = read_field(1, header[2], "stages=");
  s.num_microbatches = read_field(1, header[3], "microbatches=");
  s.virtual_stages = read_field(1, header[4], "virtual=");
  if (static_cast<int>(lines.size()) - 1 != s.num_stages)
    fail(static_cast<int>(lines.size()), "expected " + std::to_string(s.num_stages) +
                                             " stage lines, got " + std::to_string(lines.size() - 1));

  for (int d = 0; d < s.num_stages; ++d) {
    const int line = d + 2;
    const std::string prefix = "stage " + std::to_string(d) + ":";
    std::string_view row = lines[static_cast<std::size_t>(d) + 1];
    if (row.substr(0, prefix.size()) != prefix) fail(line, "expected \"" + prefix + "\"");
    row.remove_prefix(prefix.size());
    std::vector<action> actions;
    if (!row.empty()) {
      if (row[0] != ' ') fail(line, "expected a space after \"" + prefix + "\"");
      for (std::string_view body : split(row.substr(1))) {
        if (body.empty()) fail(line, "empty action (double space?)");
        try {
          actions.push_back(parse_action(body, d));
        } catch (const std::invalid_argument& e) {
          fail(line, e.what());
        }
      }
    }
    s.stages.push_back(std::move(actions));
  }
  return s;
}

std::ostream& operator<<(std::ostream& out, const schedule& s) { return out << to_string(s); }

}  // namespace troupe::sched
