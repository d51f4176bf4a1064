// What an actor holding the whole model (the evaluator) answers: evaluation on the held-out set,
// walked one batch message at a time so the mailbox stays responsive, and a copy of its
// parameters.
#pragma once

#include <caf/all.hpp>

#include "kernels/layer_stack.hpp"

namespace troupe {

// Handlers for eval_order, eval_batch_msg and params_request, to append to a stage's behavior
// (message_handler::or_else). `stack` must outlive the actor's behavior.
caf::message_handler evaluation_handlers(caf::event_based_actor* self, const layer_stack& stack, caf::actor loader,
                                         caf::actor coordinator);

}  // namespace troupe
