// passes: schedule -> schedule transformations, one concern each, composed after a builder.
// A pass never reorders the actions it is given; it only inserts around them. Offload passes
// (prefetch/evict) will join here; they do not exist yet.
#pragma once

#include "schedules/schedule.hpp"

namespace troupe::sched {

// Inserts matched point-to-point transfers for every cross-device chunk boundary:
//   before forward(m, c):                      recv_act(m, c) from the previous chunk's stage
//   after  forward(m, c):                      send_act(m, c) to the next chunk's stage
//   before backward/backward_input(m, c):      recv_grad(m, c) from the next chunk's stage
//   after  backward/backward_input(m, c):      send_grad(m, c) to the previous chunk's stage
// Sends are asynchronous (they never block the stage), receives block; a receive sits right
// before the action that consumes it, so any compute order that can run stays deadlock-free.
// Boundaries inside one device (P == 1) need no transfer. Throws std::invalid_argument if the
// schedule already contains communication, so a pass is never applied twice by accident.
schedule add_communication(const schedule& s);

// Appends reduce_grads then optimizer_step to every stage. Throws std::invalid_argument if any
// stage already has one of them.
schedule add_optimizer_step(const schedule& s);

// The full training step from a compute-only builder: add_optimizer_step(add_communication(s)).
schedule complete(const schedule& s);

// ZeRO-3 / FSDP parameter residency: brackets every action that reads its chunk's weights,
// forward, backward and backward_input of (m, c), with fetch_params(m, c) before it and
// release_params(m, c) right after it (before its send, which needs only the result).
// backward_weight is not bracketed: the weight gradient needs the stashed input and the output
// gradient, not the weights. When the action's own receive (recv_act before a forward,
// recv_grad before a backward, same microbatch and chunk) sits right before it, as
// add_communication puts it, the fetch goes before that receive: a receive blocks, and a fetch
// issued first lets the all-gather run while the stage waits for the tensor (simulate.hpp), at
// the price of holding the gathered parameters during the wait. Across chunks, the previous
// action's release comes before the next fetch, so a stage holds one (chunk, microbatch) at a
// time. For example a middle stage of 1F1B becomes
//   FP0 RA0<0 F0 RP0 SA0>2 ... FP0 RG0<2 B0 RP0 SG0>0 ...
// Works on a compute-only schedule as on a complete() one; never reorders the given actions.
// Throws std::invalid_argument if the schedule already has fetch_params or release_params.
schedule add_param_fetches(const schedule& s);

}  // namespace troupe::sched
