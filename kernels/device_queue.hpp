// device_queue: where a stage's compute runs, in stream order. On the CPU it runs inline on the
// caller's thread and completes at once (synchronous: the stage keeps its detached thread and
// today's speed); on CUDA the enqueued work launches kernels on the queue's stream and returns,
// and the completion callback comes later from the driver's thread, so the actor that enqueued
// never waits on the device (kernels/cuda/cuda_queue.hpp). No CAF: a completion is a plain
// callback, and the stage turns it into a message.
#pragma once

#include <functional>
#include <memory>

#include "kernels/tensor.hpp"

namespace troupe {

class device_queue {
 public:
  virtual ~device_queue() = default;
  // Runs `work` after everything enqueued before, on the device's thread (CPU: inline, now).
  // `work` must not wait for the caller: the caller may be a scheduler thread handling messages.
  virtual void enqueue(std::function<void()> work) = 0;
  // Calls `done` once everything enqueued before has completed, from any thread (CPU: inline,
  // now). `done` must only signal (send a message): on CUDA it runs where no CUDA call is allowed.
  virtual void when_done(std::function<void()> done) = 0;
  // Runs `launch` now, on the caller's thread, ordered on the device after everything enqueued
  // before and before everything after: for the stage's own bookkeeping between actions (a fresh
  // gradient buffer to zero, parameters to copy in), which only launches device work and needs
  // its result (a tensor handle) at once. It must not wait for the device.
  virtual void launch(const std::function<void()>& launch) = 0;
  // x, a host tensor, on this device: copied on a stream of the device's own for host-to-device
  // traffic, from pinned memory, so the copy overlaps the compute already enqueued, and ordered
  // before everything enqueued or launched after this call. From the caller's thread, without
  // waiting for the device (the stage stages a step's inputs as its batch arrives). A queue that
  // computes on host memory returns x itself.
  virtual tensor stage_in(const tensor& x) { return x; }
  // x, a tensor on this device, copied into host memory the device writes without waiting
  // (pinned for a GPU), after everything enqueued or launched before; `done` gets the copy once it
  // is complete, from any thread, and must only signal (send a message). x is kept until then.
  // The default copies in the queue's own order (enqueue, then when_done); cuda_queue copies on
  // its download stream, so the compute enqueued after goes on meanwhile.
  virtual void stage_out(const tensor& x, std::function<void(tensor)> done);
  // True when enqueue returns before the work has completed: the caller must wait for when_done.
  virtual bool asynchronous() const = 0;
  virtual device where() const = 0;
};

// The CPU device: work runs inline, so completion is immediate.
class cpu_queue final : public device_queue {
 public:
  explicit cpu_queue(int index = 0) : index_(index) {}
  void enqueue(std::function<void()> work) override { work(); }
  void when_done(std::function<void()> done) override { done(); }
  void launch(const std::function<void()>& launch) override { launch(); }
  bool asynchronous() const override { return false; }
  device where() const override { return {device_type::cpu, index_}; }

 private:
  int index_;
};

// True for a queue the caller must not wait on (null: the stage's synchronous CPU path).
inline bool is_asynchronous(const std::shared_ptr<device_queue>& q) { return q && q->asynchronous(); }

}  // namespace troupe
