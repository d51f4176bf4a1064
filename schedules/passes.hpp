// passes: schedule -> schedule transformations, one concern each, composed after a builder.
// A pass never reorders the compute actions it is given; it only inserts around them. The
// ZeRO-3 fetch/release pass and offload passes will join here; they do not exist yet.
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

}  // namespace troupe::sched
