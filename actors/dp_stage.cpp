// dp_stage: one data-parallel rank holding the whole model. For each ordered step it runs
// forward on its share of the batch, then backward layer by layer; the moment a bucket's lowest
// layer is done it copies the bucket and requests its all-reduce (sum) from its collective
// actor, and backward goes on. When every bucket's sum is back it hands the gradients to its
// optimizer shard. It records what it did for the traced step. Evaluation is rank 0's alone.
#include <chrono>
#include <map>
#include <random>
#include <thread>
#include <utility>

#include "actors/actor_failure.hpp"
#include "comm/ring_schedule.hpp"
#include "actors/dp_actors.hpp"
#include "actors/stage_evaluation.hpp"
#include "actors/step_feed.hpp"
#include "kernels/layer_stack.hpp"
#include "kernels/train_step.hpp"

namespace troupe {

namespace {

using clock_type = std::chrono::steady_clock;

double now_seconds() { return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count(); }

struct dp_stage_state {
  dp_stage_args args;
  std::unique_ptr<layer_stack> stack;
  std::unique_ptr<step_feed> feed;  // prefetched batches and ordered steps
  double step_start = 0, compute_seconds = 0, optimizer_start = 0;
  int64_t buckets_pending = 0;
  int64_t step = -1;  // the step being worked on, for a failure's report
  step_stats last;
  std::vector<dp_trace_event> events;
  static inline const char* name = "dp_stage";
};

using self_ptr = caf::stateful_actor<dp_stage_state>*;

void record(self_ptr self, dp_event_kind kind, int32_t index, double start, double end) {
  self->state.events.push_back({self->state.args.rank, static_cast<int32_t>(kind), index, start, end});
}

void request_batches(self_ptr self, int64_t next_step) {
  for (int64_t step : self->state.feed->requests(next_step))
    self->send(self->state.args.base.loader, batch_request{step});
}

void straggle(self_ptr self, int64_t step) {
  const straggler_spec& st = self->state.args.straggler;
  if (st.ms <= 0) return;
  double ms = st.ms;
  if (st.random) {
    std::seed_seq seq{self->state.args.base.seed, static_cast<uint64_t>(st.rank), static_cast<uint64_t>(step)};
    std::mt19937_64 rng(seq);
    ms = std::uniform_real_distribution<double>(0.0, 2.0 * st.ms)(rng);
  }
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

void bucket_done(self_ptr self, int64_t step, size_t b, double sent, collective_result& r) {
  auto& s = self->state;
  const grad_bucket& bucket = s.args.buckets[b];
  const float* sum = std::as_const(r.data).data();
  std::copy(sum, sum + bucket.count, s.stack->grads().data() + bucket.offset);
  record(self, dp_event_kind::all_reduce, static_cast<int32_t>(b), sent, r.finished_at);
  if (--s.buckets_pending > 0) return;
  tensor grads = s.stack->take_grads();  // sent as it is; the next step gets a zeroed buffer
  grads.freeze();
  s.optimizer_start = now_seconds();
  self->send(s.args.base.optimizer, gradients_msg{step, 0, std::move(grads)});
}

void compute(self_ptr self, std::optional<int64_t> due) {
  if (!due) return;
  auto& s = self->state;
  const int64_t step = *due;
  s.step = step;
  const batch b = s.feed->take(step);
  straggle(self, step);
  const double t0 = now_seconds();
  stack_context ctx;
  tensor logits = s.stack->forward(b.inputs, ctx);
  loss_result loss = cross_entropy(logits, b.targets, 1.0f / static_cast<float>(s.args.base.global_rows));
  s.last = {loss.loss_sum, loss.count, loss.correct};
  double prev = now_seconds();
  record(self, dp_event_kind::forward, 0, t0, prev);
  s.buckets_pending = static_cast<int64_t>(s.args.buckets.size());
  const int64_t nb = s.buckets_pending;
  size_t next_bucket = 0;
  s.stack->backward(loss.dlogits, ctx, /*need_input_grad=*/false, [&](size_t layer) {
    const double t = now_seconds();
    record(self, dp_event_kind::backward, static_cast<int32_t>(layer), prev, t);
    prev = t;
    // Buckets become ready in order: bucket k's lowest layer is above bucket k+1's.
    while (next_bucket < s.args.buckets.size() &&
           s.args.buckets[next_bucket].first_layer == static_cast<int64_t>(layer)) {
      const size_t b = next_bucket++;
      const grad_bucket& bucket = s.args.buckets[b];
      const float* g = s.stack->grads().data() + bucket.offset;
      tensor part({bucket.count}, std::vector<float>(g, g + bucket.count));
      const double sent = now_seconds();
      self->request(s.args.collective, caf::infinite,
                    collective_request{step * nb + static_cast<int64_t>(b),
                                       static_cast<int32_t>(ring::op_kind::all_reduce_sum), 0, bucket.count,
                                       std::move(part)})
          .then([self, step, b, sent](collective_result& r) { bucket_done(self, step, b, sent, r); });
    }
  });
  s.compute_seconds = now_seconds() - t0;
  request_batches(self, step + 1);
}

caf::behavior dp_stage(self_ptr self, dp_stage_args args) {
  auto& st = self->state;
  name_failures(self, [self] {
    return std::make_pair("the stage of data-parallel rank " + std::to_string(self->state.args.rank), self->state.step);
  });
  st.args = std::move(args);
  st.stack = std::make_unique<layer_stack>(build_layers(st.args.base.model), 0, st.args.base.seed);
  tensor initial = st.stack->params().clone();
  initial.freeze();
  self->send(st.args.base.optimizer, params_msg{-1, 0, std::move(initial)});
  st.feed = std::make_unique<step_feed>(st.args.base.total_steps, st.args.base.prefetch);
  request_batches(self, 0);
  return caf::message_handler{
      [self](const step_order& o) {
        auto& s = self->state;
        s.step_start = now_seconds();
        s.events.clear();
        compute(self, s.feed->order(o.step, o.until));
      },
      [self](batch_msg& m) { compute(self, self->state.feed->arrive(m.step, std::move(m.data))); },
      [self](const params_msg& m) {
        auto& s = self->state;
        s.stack->adopt_params(m.params);
        if (m.step < 0) return;
        const double end = now_seconds();
        record(self, dp_event_kind::optimizer, 0, s.optimizer_start, end);
        self->send(s.args.base.coordinator,
                   dp_step_report{s.args.rank, m.step, s.last.loss_sum, s.last.count, s.last.correct,
                                  s.compute_seconds, end - s.step_start});
        if (m.step == s.args.trace_step) self->send(s.args.base.coordinator, dp_trace_msg{s.args.rank, m.step, s.events});
        s.step_start = end;  // the next ordered step, if any, starts now
        s.events.clear();
        compute(self, s.feed->finished(m.step));
      },
  }.or_else(evaluation_handlers(self, *st.stack, st.args.base.loader, st.args.base.coordinator));
}

}  // namespace

caf::actor spawn_dp_stage(caf::actor_system& sys, dp_stage_args args) {
  return sys.spawn<caf::detached>(dp_stage, std::move(args));
}

}  // namespace troupe
