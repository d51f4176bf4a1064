// stage: one model stage on one device. Here a single stage holds the whole model: it computes
// gradients for each ordered step from a prefetched batch, hands them to the optimizer shard,
// and reports the step once the updated parameters are back. Evaluation walks the held-out
// batches one message at a time, so the mailbox stays responsive between them.
#include <chrono>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/stage_evaluation.hpp"
#include "actors/step_feed.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/train_step.hpp"

namespace troupe {

namespace {

struct stage_state {
  stage_args args;
  std::unique_ptr<layer_stack> stack;
  std::unique_ptr<step_feed> feed;  // prefetched batches and ordered steps
  step_stats last;                  // stats of the step awaiting its parameters
  double last_seconds = 0.0;
  int64_t step = -1;                // the step being worked on, for a failure's report
  static inline const char* name = "stage";
};

using clock_type = std::chrono::steady_clock;

void request_batches(caf::stateful_actor<stage_state>* self, int64_t next_step) {
  for (int64_t step : self->state.feed->requests(next_step)) self->send(self->state.args.loader, batch_request{step});
}

void compute(caf::stateful_actor<stage_state>* self, std::optional<int64_t> due) {
  if (!due) return;
  auto& s = self->state;
  const int64_t step = *due;
  s.step = step;
  const batch b = s.feed->take(step);
  const auto t0 = clock_type::now();
  // take_grads leaves a zeroed buffer behind, so every step starts from zero gradients.
  s.last = compute_gradients(*s.stack, b, 1.0f / static_cast<float>(s.args.global_rows));
  tensor grads = s.stack->take_grads();
  grads.freeze();
  s.last_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  self->send(s.args.optimizer, gradients_msg{step, 0, std::move(grads)});
  request_batches(self, step + 1);
}

caf::behavior stage(caf::stateful_actor<stage_state>* self, stage_args args) {
  auto& st = self->state;
  name_failures(self, [self] { return std::make_pair(std::string("stage"), self->state.step); });
  st.args = std::move(args);
  st.stack = std::make_unique<layer_stack>(build_layers(st.args.model), 0, st.args.seed);
  tensor initial = st.stack->params().clone();
  initial.freeze();
  self->send(st.args.optimizer, params_msg{-1, 0, std::move(initial)});
  st.feed = std::make_unique<step_feed>(st.args.total_steps, st.args.prefetch);
  request_batches(self, 0);
  return caf::message_handler{
      [self](const step_order& o) { compute(self, self->state.feed->order(o.step, o.until)); },
      [self](batch_msg& m) { compute(self, self->state.feed->arrive(m.step, std::move(m.data))); },
      [self](const params_msg& m) {
        auto& s = self->state;
        s.stack->adopt_params(m.params);
        if (m.step < 0) return;
        self->send(s.args.coordinator,
                   step_report{m.step, s.last.loss_sum, s.last.count, s.last.correct, s.last_seconds});
        compute(self, s.feed->finished(m.step));
      },
  }.or_else(evaluation_handlers(self, *st.stack, st.args.loader, st.args.coordinator));
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& sys, stage_args args) {
  return sys.spawn<caf::detached>(stage, std::move(args));
}

}  // namespace troupe
