// Held-out evaluation and parameters of a whole-model actor (stage_evaluation.hpp).
#include "actors/coordinator/stage_evaluation.hpp"

#include "actors/messages.hpp"
#include "kernels/train_step.hpp"

namespace troupe {

caf::message_handler evaluation_handlers(caf::event_based_actor* self, const layer_stack& stack, caf::actor loader,
                                         caf::actor coordinator) {
  struct tally {
    step_stats stats;
    int64_t samples = 0;
  };
  auto t = std::make_shared<tally>();
  const layer_stack* s = &stack;
  return {
      [=](const eval_order& o) {
        *t = {};
        self->send(loader, eval_batch_request{o.epoch, 0});
      },
      [=](const eval_batch_msg& m) {
        t->stats.add(evaluate(*s, m.data));
        t->samples += m.data.samples();
        if (m.index + 1 < m.total)
          self->send(loader, eval_batch_request{m.epoch, m.index + 1});
        else
          self->send(coordinator,
                     eval_report{m.epoch, t->stats.loss_sum, t->stats.count, t->stats.correct, t->samples});
      },
      [=](const params_request&) {
        tensor p = s->params().clone();
        p.freeze();
        return params_msg{-2, 0, std::move(p)};
      },
  };
}

}  // namespace troupe
