// stage_device: a stage's compute on its device. On the CPU an action's work and its finish run
// in line; on an asynchronous device the work is enqueued and the finish waits for the completion
// the queue sends back as a message, so the stage never waits on its device (kernels/device_queue.hpp).
#include <exception>
#include <memory>
#include <utility>

#include "actors/stage/stage_state.hpp"

namespace troupe::stage_detail {

// Synchronous device (none, or the CPU): both parts now, in line, as the action always ran.
// Asynchronous: the work is enqueued, and the action waits, like a receive, for the message the
// queue's completion sends (device_done_atom); meanwhile the stage answers other messages.
bool run_compute(self_ptr self, const sched::action& a, compute_parts c) {
  auto& s = self->state;
  if (!is_asynchronous(s.args.queue)) {
    c.work();
    c.finish();
    return true;
  }
  auto error = std::make_shared<std::exception_ptr>();
  auto work = std::make_shared<std::function<void()>>(std::move(c.work));
  s.args.queue->enqueue([work, error] {
    try {
      (*work)();
    } catch (...) {  // the device's thread cannot fail the stage: the completion carries it there
      *error = std::current_exception();
    }
  });
  s.on_device = device_action{s.step, s.cursor, false, std::move(c.finish), error, std::move(work)};
  s.waiting_for = "the device's completion of " + sched::body_string(a);
  s.args.queue->when_done([stage = self->address(), step = s.step, index = static_cast<uint64_t>(s.cursor)] {
    if (auto to = caf::actor_cast<caf::actor>(stage)) caf::anon_send(to, device_done_atom::value, step, index);
  });
  return false;
}

// The device's action at the cursor: still running (false), or completed: its results are
// handed on, then what waited for the chunks to be free.
bool complete_on_device(self_ptr self) {
  auto& s = self->state;
  if (!s.on_device->done) return false;
  device_action d = std::move(*s.on_device);
  s.on_device.reset();
  if (*d.error) std::rethrow_exception(*d.error);
  d.finish();
  for (auto& f : std::exchange(s.after_device, {})) f();
  return !s.failed;
}

}  // namespace troupe::stage_detail
