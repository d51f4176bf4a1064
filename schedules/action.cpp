// action: predicates over ops, and the text form of an action with its parser.
// The parser accepts only the canonical text that to_string produces; it does not guess,
// trim or accept aliases, so every schedule has exactly one spelling (and golden diffs stay small).
#include "schedules/action.hpp"

#include <charconv>
#include <stdexcept>

namespace troupe::sched {

bool operator==(const action& a, const action& b) {
  return a.stage == b.stage && a.kind == b.kind && a.microbatch == b.microbatch &&
         a.chunk == b.chunk && a.peer == b.peer;
}

bool operator!=(const action& a, const action& b) { return !(a == b); }

bool is_compute(op kind) {
  return kind == op::forward || kind == op::backward || kind == op::backward_input ||
         kind == op::backward_weight;
}

bool reads_weights(op kind) {
  return kind == op::forward || kind == op::backward || kind == op::backward_input;
}

bool is_send(op kind) { return kind == op::send_act || kind == op::send_grad; }
bool is_recv(op kind) { return kind == op::recv_act || kind == op::recv_grad; }
bool is_communication(op kind) { return is_send(kind) || is_recv(kind); }
bool needs_microbatch(op kind) { return is_compute(kind) || is_communication(kind); }

std::string to_string(op kind) {
  switch (kind) {
    case op::forward: return "forward";
    case op::backward: return "backward";
    case op::backward_input: return "backward_input";
    case op::backward_weight: return "backward_weight";
    case op::send_act: return "send_act";
    case op::recv_act: return "recv_act";
    case op::send_grad: return "send_grad";
    case op::recv_grad: return "recv_grad";
    case op::reduce_grads: return "reduce_grads";
    case op::fetch_params: return "fetch_params";
    case op::release_params: return "release_params";
    case op::optimizer_step: return "optimizer_step";
  }
  return "?";  // unreachable for a valid enum value; keeps -Wreturn-type quiet
}

namespace {

const char* code_of(op kind) {
  switch (kind) {
    case op::forward: return "F";
    case op::backward: return "B";
    case op::backward_input: return "I";
    case op::backward_weight: return "W";
    case op::send_act: return "SA";
    case op::recv_act: return "RA";
    case op::send_grad: return "SG";
    case op::recv_grad: return "RG";
    case op::reduce_grads: return "R";
    case op::fetch_params: return "FP";
    case op::release_params: return "RP";
    case op::optimizer_step: return "O";
  }
  return "?";
}

// Two-letter codes first so that "RA" is not read as "R" followed by garbage.
constexpr op all_codes_longest_first[] = {
    op::send_act,     op::recv_act,       op::send_grad,      op::recv_grad,
    op::fetch_params, op::release_params, op::forward,        op::backward,
    op::backward_input, op::backward_weight, op::reduce_grads, op::optimizer_step,
};

[[noreturn]] void fail(std::string_view text, const std::string& why) {
  throw std::invalid_argument("parse_action: \"" + std::string(text) + "\": " + why);
}

// Reads a canonical non-negative decimal at `pos`; returns false when there is none.
bool read_number(std::string_view text, std::size_t& pos, int& value) {
  if (pos >= text.size() || text[pos] < '0' || text[pos] > '9') return false;
  if (text[pos] == '0' && pos + 1 < text.size() && text[pos + 1] >= '0' && text[pos + 1] <= '9')
    fail(text, "leading zero");
  auto [end, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), value);
  if (ec != std::errc()) fail(text, "number out of range");
  pos = static_cast<std::size_t>(end - text.data());
  return true;
}

}  // namespace

std::string body_string(const action& a) {
  std::string out = code_of(a.kind);
  if (a.microbatch != -1 || needs_microbatch(a.kind)) out += std::to_string(a.microbatch);
  if (is_send(a.kind)) out += ">" + std::to_string(a.peer);
  if (is_recv(a.kind)) out += "<" + std::to_string(a.peer);
  if (a.chunk != 0) out += ".c" + std::to_string(a.chunk);
  return out;
}

std::string to_string(const action& a) { return std::to_string(a.stage) + body_string(a); }

namespace {

// Parses the body that starts at `pos` of `text`; errors quote all of `text`.
action parse_body(std::string_view text, std::size_t pos, int stage) {
  if (stage < 0) fail(text, "negative stage");
  const std::string_view body = text.substr(pos);
  action a;
  a.stage = stage;
  bool found = false;
  for (op kind : all_codes_longest_first) {
    const std::string_view code = code_of(kind);
    if (body.substr(0, code.size()) == code) {
      a.kind = kind;
      pos += code.size();
      found = true;
      break;
    }
  }
  if (!found) fail(text, "unknown op code");
  if (!read_number(text, pos, a.microbatch)) {
    if (needs_microbatch(a.kind)) fail(text, to_string(a.kind) + " needs a microbatch");
    a.microbatch = -1;
  }
  const char dir = is_send(a.kind) ? '>' : is_recv(a.kind) ? '<' : '\0';
  if (dir != '\0') {
    if (pos >= text.size() || text[pos] != dir)
      fail(text, to_string(a.kind) + " needs '" + std::string(1, dir) + "peer'");
    ++pos;
    if (!read_number(text, pos, a.peer)) fail(text, "missing peer stage");
  }
  if (pos < text.size() && text[pos] == '.') {
    if (text.substr(pos, 2) != ".c") fail(text, "expected \".c<chunk>\"");
    pos += 2;
    if (!read_number(text, pos, a.chunk)) fail(text, "missing chunk number");
    if (a.chunk == 0) fail(text, "chunk 0 is written without \".c0\"");
  }
  if (pos != text.size()) fail(text, "unexpected text at position " + std::to_string(pos));
  return a;
}

}  // namespace

action parse_action(std::string_view body, int stage) { return parse_body(body, 0, stage); }

action parse_action(std::string_view text) {
  std::size_t pos = 0;
  int stage = 0;
  if (!read_number(text, pos, stage)) fail(text, "missing stage prefix");
  return parse_body(text, pos, stage);
}

std::ostream& operator<<(std::ostream& out, const action& a) { return out << to_string(a); }

}  // namespace troupe::sched
