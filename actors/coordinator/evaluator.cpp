// evaluator: the one evaluation path of every job shape. It holds the whole model, takes the
// parameters the coordinator gathered from the first replica's stages, and walks the held-out
// batches one message at a time (stage_evaluation.hpp), so its mailbox stays responsive.
#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/coordinator/stage_evaluation.hpp"
#include "kernels/layer_stack.hpp"

namespace troupe {

namespace {

struct evaluator_state {
  std::unique_ptr<layer_stack> stack;
  static inline const char* name = "evaluator";
};

caf::behavior evaluator(caf::stateful_actor<evaluator_state>* self, model_spec model, uint64_t seed, caf::actor loader,
                        caf::actor coordinator) {
  name_failures(self, [] { return std::make_pair(std::string("the evaluator"), int64_t{-1}); });
  self->state.stack = std::make_unique<layer_stack>(build_layers(model), 0, seed);
  return caf::message_handler{
      [self](const params_msg& m) {
        auto& stack = *self->state.stack;
        if (m.params.numel() != stack.num_params())
          throw std::invalid_argument("evaluator: " + std::to_string(m.params.numel()) + " parameters for a model of " +
                                      std::to_string(stack.num_params()));
        stack.adopt_params(m.params);
      },
  }.or_else(evaluation_handlers(self, *self->state.stack, std::move(loader), std::move(coordinator)));
}

}  // namespace

caf::actor spawn_evaluator(caf::actor_system& sys, const model_spec& model, uint64_t seed, caf::actor loader,
                           caf::actor coordinator) {
  return sys.spawn<caf::detached>(evaluator, model, seed, std::move(loader), std::move(coordinator));
}

}  // namespace troupe
