// executors: where a stage's compute runs. On the host an action's work and its finish run in
// line, on the stage's own thread; on an asynchronous device the work is enqueued and the finish
// waits for the completion the queue sends back as a message, so the stage never waits on its
// device (kernels/device_queue.hpp).
#include <exception>
#include <memory>
#include <optional>
#include <utility>

#include "actors/stage/stage_state.hpp"

namespace troupe::stage_detail {

namespace {

class in_line : public executor {
 public:
  bool run(self_ptr, const sched::action&, compute_parts c) override {
    c.work();
    c.finish();
    return true;
  }
  bool run_update(self_ptr self, const sched::action& a, compute_parts c) override { return run(self, a, std::move(c)); }
  bucket_delivery from_backward(self_ptr, int, bucket_delivery launch) override { return launch; }
};

// The compute action the device holds: the cursor stays on it until its completion message for
// (step, index) arrives; then `finish` hands its results on, on the stage's thread. `error`: what
// the work threw on the device's thread.
struct device_action {
  int64_t step = -1;
  size_t index = 0;
  bool done = false;
  std::function<void()> finish;
  std::shared_ptr<std::exception_ptr> error;
  // The enqueued work, kept until the device has run it: what it captured (an activation from
  // another rank, a gradient) goes back to its allocator only once no kernel still reads it.
  std::shared_ptr<std::function<void()>> work;
};

class queued : public executor {
 public:
  explicit queued(bool updates_on_device) : updates_on_device_(updates_on_device) {}

  bool run(self_ptr self, const sched::action& a, compute_parts c) override {
    auto& s = self->state;
    auto error = std::make_shared<std::exception_ptr>();
    auto work = std::make_shared<std::function<void()>>(std::move(c.work));
    s.args.device.queue->enqueue([work, error] {
      try {
        (*work)();
      } catch (...) {  // the device's thread cannot fail the stage: the completion carries it there
        *error = std::current_exception();
      }
    });
    held_ = device_action{s.step, s.cursor, false, std::move(c.finish), error, std::move(work)};
    s.waiting_for = "the device's completion of " + sched::body_string(a);
    s.args.device.queue->when_done([stage = self->address(), step = s.step, index = static_cast<uint64_t>(s.cursor)] {
      if (auto to = caf::actor_cast<caf::actor>(stage)) caf::anon_send(to, device_done_atom::value, step, index);
    });
    return false;
  }

  bool run_update(self_ptr self, const sched::action& a, compute_parts c) override {
    if (updates_on_device_) return run(self, a, std::move(c));
    c.work();
    c.finish();
    return true;
  }

  // The hook runs on the device's thread: it never reads the stage's state, and what it cuts
  // goes to the stage as a message. On a GPU the bucket is cut on the device, on its stream, and
  // posted when the queue gets there, so the group reads it complete; one bound for the host
  // leaves on the queue's copy stream (stage_out): backward goes on with the layers below while
  // it crosses.
  bucket_delivery from_backward(self_ptr self, int chunk, bucket_delivery) override {
    auto& s = self->state;
    auto post = [stage = self->address(), step = s.step, chunk](size_t b, tensor part) {
      if (auto to = caf::actor_cast<caf::actor>(stage))
        caf::anon_send(to, bucket_ready_atom::value, step, static_cast<int32_t>(chunk), static_cast<uint64_t>(b),
                       std::move(part));
    };
    std::shared_ptr<device_queue> gpu = gpu_queue(s);
    if (!gpu) return post;
    if (s.args.groups.reduces_on_device)
      return [gpu, post](size_t b, tensor part) {
        gpu->when_done([post, b, part = std::move(part)]() mutable { post(b, std::move(part)); });
      };
    return [gpu, post](size_t b, tensor part) {
      gpu->stage_out(part, [post, b](tensor host) {
        host.freeze();
        post(b, std::move(host));
      });
    };
  }

  bool holds_action() const override { return held_.has_value(); }

  bool done(int64_t step, size_t index) override {
    if (!held_ || held_->step != step || held_->index != index) return false;  // not the action it holds
    held_->done = true;
    return true;
  }

  bool complete(self_ptr self) override {
    if (!held_->done) return false;
    device_action d = std::move(*held_);
    held_.reset();
    if (*d.error) std::rethrow_exception(*d.error);
    d.finish();
    for (auto& f : std::exchange(deferred_, {})) f();
    return !self->state.failed;
  }

  bool defer(std::function<void()> f) override {
    if (!held_) return false;
    deferred_.push_back(std::move(f));
    return true;
  }

 private:
  bool updates_on_device_;
  std::optional<device_action> held_;
  // What arrived meanwhile that writes the chunks the device is reading, run on the stage's thread
  // right after the held action's finish.
  std::vector<std::function<void()>> deferred_;
};

}  // namespace

std::unique_ptr<executor> inline_executor() { return std::make_unique<in_line>(); }
std::unique_ptr<executor> queued_executor(bool updates_on_device) { return std::make_unique<queued>(updates_on_device); }

}  // namespace troupe::stage_detail
