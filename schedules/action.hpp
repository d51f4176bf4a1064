// action: one instruction of a pipeline schedule (a closed enum of ops plus its operands) and
// its compact text form, with a parser that is the exact inverse of to_string.
// Plain data only: an action says what a stage does, never how (no tensors, no actors, no I/O).
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace troupe::sched {

// Closed set of instructions. Code that interprets them switches with no `default:` so that
// -Wswitch -Werror names every place an added op must be handled.
enum class op {
  forward,          // F  run the chunk's forward for one microbatch; stashes its activation
  backward,         // B  full backward (input and weight gradients together); frees the stash
  backward_input,   // I  input-gradient half of a split backward (zero-bubble "B")
  backward_weight,  // W  weight-gradient half of a split backward; frees the stash
  send_act,         // SA send the chunk's output activation to the stage holding the next chunk
  recv_act,         // RA receive the input activation from the stage holding the previous chunk
  send_grad,        // SG send the gradient of the chunk's input to the previous chunk's stage
  recv_grad,        // RG receive the gradient of the chunk's output from the next chunk's stage
  reduce_grads,     // R  reduce this stage's weight gradients across data-parallel peers
  fetch_params,     // FP gather the chunk's parameters (ZeRO-3; passes.hpp add_param_fetches)
  release_params,   // RP free the gathered parameters again (ZeRO-3)
  optimizer_step,   // O  apply the optimizer to this stage's parameters
};

// One instruction. `chunk` is the virtual-stage index on this device (0 without interleaving);
// with P stages the model chunk it runs is chunk * P + stage (see schedule.hpp).
// `microbatch` is -1 for ops that are not per microbatch (reduce_grads, optimizer_step and,
// optionally, fetch/release). `peer` is the other stage of a send/recv and -1 otherwise.
struct action {
  int stage = 0;
  op kind = op::forward;
  int microbatch = -1;
  int chunk = 0;
  int peer = -1;
};

bool operator==(const action& a, const action& b);
bool operator!=(const action& a, const action& b);

bool is_compute(op kind);        // forward, backward, backward_input, backward_weight
bool reads_weights(op kind);     // forward, backward, backward_input: not backward_weight, whose
                                 // weight gradient needs only the stashed input and output gradient
bool is_send(op kind);           // send_act, send_grad
bool is_recv(op kind);           // recv_act, recv_grad
bool is_communication(op kind);  // is_send or is_recv
bool needs_microbatch(op kind);  // compute and communication ops
std::string to_string(op kind);  // "forward", "send_act", ... (for messages and renderers)

// Text grammar (no spaces inside an action):
//   action  := stage body                         e.g. "1F3", "0SA3>1", "2I5.c1", "3O"
//   body    := code [microbatch] [dir peer] [".c" chunk]
//   code    := "F" | "B" | "I" | "W"              forward, backward, backward_input/_weight
//            | "SA" | "SG" | "RA" | "RG"           send/recv activation, send/recv gradient
//            | "R" | "O" | "FP" | "RP"             reduce, optimizer step, fetch/release params
//   dir     := ">" for a send (to peer) | "<" for a receive (from peer)
// Numbers are decimal without leading zeros. The microbatch is required for compute and
// communication ops and optional (absent means -1) for the others; dir/peer is present exactly
// for sends and receives; ".cN" is present exactly when chunk != 0. The body alone is the form
// used inside a stage's row of a schedule and in error messages.
std::string to_string(const action& a);       // with the stage prefix: "1F3"
std::string body_string(const action& a);     // without it: "F3"

// Inverses of the two forms. Throw std::invalid_argument naming the offending text when it is
// not canonical (so parse(to_string(a)) == a and to_string(parse(s)) == s).
action parse_action(std::string_view text);
action parse_action(std::string_view body, int stage);

std::ostream& operator<<(std::ostream& out, const action& a);

}  // namespace troupe::sched
