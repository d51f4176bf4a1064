// schedule: for each device (pipeline stage rank) an ordered list of actions, plus the
// metadata needed to read it (P stages, M microbatches, v virtual stages, a name), and its
// round-tripping text form. It does not say how long anything takes (see simulate.hpp).
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "schedules/action.hpp"

namespace troupe::sched {

// Chunk layout (Megatron's): the model is cut into P * v consecutive chunks, numbered from the
// input side. Device (stage) d holds model chunks d, d + P, d + 2P, ...; its local chunk c is
// model chunk c * P + d. So activations flow d -> d+1 within a round of chunks and from the
// last device back to device 0 between rounds; gradients flow the opposite way.
// Without interleaving (v = 1) chunk is always 0 and model chunk == stage.
struct schedule {
  std::string name;          // a single word, e.g. "1f1b"; no whitespace (text form)
  int num_stages = 1;        // P: devices in the pipeline
  int num_microbatches = 1;  // M: microbatches per step
  int virtual_stages = 1;    // v: chunks per device
  std::vector<std::vector<action>> stages;  // stages[d]: device d's actions, in order
};

bool operator==(const schedule& a, const schedule& b);
bool operator!=(const schedule& a, const schedule& b);

int num_model_chunks(const schedule& s);                    // P * v
int model_chunk(const schedule& s, int stage, int chunk);   // chunk * P + stage
int stage_of(const schedule& s, int model_chunk);           // model_chunk % P
int chunk_of(const schedule& s, int model_chunk);           // model_chunk / P

// The tensor a send or receive moves, so a send and a receive match exactly when their keys
// are equal. `boundary` is the cut between model chunks boundary and boundary + 1 that the
// tensor crosses (activations go up across it, gradients come down across it).
struct message_key {
  bool is_grad = false;
  int microbatch = 0;
  int boundary = 0;
};
bool operator<(const message_key& a, const message_key& b);
bool operator==(const message_key& a, const message_key& b);

// For a send/recv action on its stage: which tensor it moves. Precondition: is_communication.
message_key key_of(const schedule& s, const action& a);

// The stage a send/recv of `a` must name as its peer under the chunk layout, or -1 when the
// neighbouring chunk does not exist (an activation sent out of the last chunk, say).
int expected_peer(const schedule& s, const action& a);

// Text form, one line per item, each ending in '\n':
//   schedule <name> stages=<P> microbatches=<M> virtual=<v>
//   stage 0: <body> <body> ...
//   stage 1: ...
// with exactly P stage lines in order; bodies are action::body_string (the stage is the row).
// parse_schedule is its exact inverse and throws std::invalid_argument("line N: ...").
std::string to_string(const schedule& s);
schedule parse_schedule(std::string_view text);

std::ostream& operator<<(std::ostream& out, const schedule& s);

}  // namespace troupe::sched
