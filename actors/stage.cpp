// stage: one model stage on one device. Here a single stage holds the whole model: it computes
// gradients for each ordered step from a prefetched batch, hands them to the optimizer shard,
// and reports the step once the updated parameters are back. Evaluation walks the held-out
// batches one message at a time, so the mailbox stays responsive between them.
#include <chrono>
#include <map>

#include "actors/actors.hpp"
#include "actors/stage_evaluation.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/train_step.hpp"

namespace troupe {

namespace {

struct stage_state {
  stage_args args;
  std::unique_ptr<layer_stack> stack;
  std::map<int64_t, batch> ready;   // prefetched batches by step
  int64_t ordered = -1;             // step ordered but not yet computed
  int64_t until = 0;                // ordered steps end before this one
  int64_t next_request = 0;         // next step whose batch to request
  step_stats last;                  // stats of the step awaiting its parameters
  double last_seconds = 0.0;
  static inline const char* name = "stage";
};

using clock_type = std::chrono::steady_clock;

void request_batches(caf::stateful_actor<stage_state>* self, int64_t up_to) {
  auto& s = self->state;
  for (; s.next_request < std::min(up_to, s.args.total_steps); ++s.next_request)
    self->send(s.args.loader, batch_request{s.next_request});
}

void compute(caf::stateful_actor<stage_state>* self, int64_t step) {
  auto& s = self->state;
  auto it = s.ready.find(step);
  const auto t0 = clock_type::now();
  // take_grads leaves a zeroed buffer behind, so every step starts from zero gradients.
  s.last = compute_gradients(*s.stack, it->second, 1.0f / static_cast<float>(s.args.global_rows));
  s.ready.erase(it);
  tensor grads = s.stack->take_grads();
  grads.freeze();
  s.last_seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  self->send(s.args.optimizer, gradients_msg{step, 0, std::move(grads)});
  s.ordered = -1;
  request_batches(self, step + 1 + s.args.prefetch);
}

caf::behavior stage(caf::stateful_actor<stage_state>* self, stage_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  st.stack = std::make_unique<layer_stack>(build_layers(st.args.model), 0, st.args.seed);
  tensor initial = st.stack->params().clone();
  initial.freeze();
  self->send(st.args.optimizer, params_msg{-1, 0, std::move(initial)});
  request_batches(self, st.args.prefetch);
  return caf::message_handler{
      [self](const step_order& o) {
        auto& s = self->state;
        s.ordered = o.step;
        s.until = o.until;
        if (s.ready.count(o.step)) compute(self, o.step);
      },
      [self](batch_msg& m) {
        auto& s = self->state;
        const int64_t step = m.step;
        s.ready.emplace(step, std::move(m.data));
        if (s.ordered == step) compute(self, step);
      },
      [self](const params_msg& m) {
        auto& s = self->state;
        s.stack->adopt_params(m.params);
        if (m.step < 0) return;
        self->send(s.args.coordinator,
                   step_report{m.step, s.last.loss_sum, s.last.count, s.last.correct, s.last_seconds});
        if (m.step + 1 < s.until) {  // the next ordered step
          s.ordered = m.step + 1;
          if (s.ready.count(s.ordered)) compute(self, s.ordered);
        }
      },
  }.or_else(evaluation_handlers(self, *st.stack, st.args.loader, st.args.coordinator));
}

}  // namespace

caf::actor spawn_stage(caf::actor_system& sys, stage_args args) {
  return sys.spawn<caf::detached>(stage, std::move(args));
}

}  // namespace troupe
