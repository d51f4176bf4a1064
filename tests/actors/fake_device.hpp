// fake_device: an asynchronous device_queue for host-side tests, on the strict streams of
// tests/kernels/fake_streams.hpp: a compute stream, an upload stream for stage_in and a download
// stream for stage_out, each its own thread, out of step with each other (the download stream
// eager, compute lazy, the upload stream lazier), so a missing wait between them reads what was
// not written yet. Enqueued work runs in order on the compute stream's thread, as a GPU runs its
// kernels (or at once in the caller's, as cuda_queue's launches do: launches_in_caller; the
// device ops it calls then go to the compute stream, deferred). Completions run on the stream that
// reached them, in its order; a device op launched from one fails the test. The test can hold
// completions (hold_completions) and let them go (release_completions); a held completion holds
// everything on its stream after it too, as a stream would. Nothing here depends on wall-clock
// time for its results, only for how far the streams drift apart.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "kernels/device_ops.hpp"
#include "kernels/device_queue.hpp"
#include "kernels/allocator.hpp"
#include "kernels/tensor.hpp"
#include "tests/kernels/fake_streams.hpp"

namespace troupe::test {

class fake_device final : public device_queue {
 public:
  // launches_in_caller: enqueued work runs at once on the caller's thread, as cuda_queue's
  // launches do (only the device ops it launches run later, on the compute stream). Otherwise
  // the work itself runs on the compute stream's thread. download_quiet: how long the download
  // stream lets its work wait (0: at once, as soon as compute got there), for a test whose
  // copies to the host must arrive late.
  explicit fake_device(device where = {}, bool launches_in_caller = false,
                       std::chrono::microseconds download_quiet = std::chrono::microseconds(0))
      : where_(where),
        in_caller_(launches_in_caller),
        compute_("compute", std::chrono::microseconds(500)),
        upload_("upload", std::chrono::microseconds(1500)),
        download_("download", download_quiet) {}
  ~fake_device() override {
    release_completions();
    for (fake_streams::stream* s : {&compute_, &upload_, &download_}) s->synchronize();
  }
  fake_device(const fake_device&) = delete;
  fake_device& operator=(const fake_device&) = delete;

  void enqueue(std::function<void()> work) override {
    if (in_caller_)
      launch(work);
    else
      compute_.push(std::move(work));
  }
  void when_done(std::function<void()> done) override { completion_on(compute_, std::move(done)); }
  bool asynchronous() const override { return true; }
  device where() const override { return where_; }
  // The device ops `launch` calls go to the compute stream, after everything enqueued before.
  void launch(const std::function<void()>& launch) override {
    fake_streams::stream_guard on(&compute_);
    launch();
  }
  // A device that is not the host's takes a copy on the upload stream (the host's bytes taken
  // now), which compute waits for; on the host, x itself.
  tensor stage_in(const tensor& x) override {
    if (where_.is_cpu()) return x;
    tensor out;
    {
      fake_streams::stream_guard on(&upload_);
      out = ops_for(where_).to_here(x);
    }
    compute_.wait(upload_.record());
    out.freeze();
    std::lock_guard<std::mutex> lock(mu_);
    ++staged_;
    return out;
  }
  int64_t staged() const {
    std::lock_guard<std::mutex> lock(mu_);
    return staged_;
  }
  // On the download stream after what compute was given so far; `done` gets the host copy as a
  // completion of that stream. A queue on the host keeps device_queue's default (compute's order).
  void stage_out(const tensor& x, std::function<void(tensor)> done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++staged_out_;
    }
    if (where_.is_cpu()) return device_queue::stage_out(x, std::move(done));
    download_.wait(compute_.record());
    tensor host = tensor::uninitialized(x.shape(), x.type(), cpu_allocator());
    if (host.nbytes() > 0) std::memset(host.raw(), 0xFF, static_cast<size_t>(host.nbytes()));  // poison until the copy
    download_.push([x, host]() mutable {
      if (x.nbytes() > 0) std::memcpy(host.raw(), x.raw(), static_cast<size_t>(x.nbytes()));
    });
    completion_on(download_, [host, done = std::move(done)]() mutable { done(host); });
  }
  int64_t staged_out() const {
    std::lock_guard<std::mutex> lock(mu_);
    return staged_out_;
  }

  // From now on the next completion waits (with everything after it on its stream) until released.
  void hold_completions() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  void release_completions() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      holding_ = false;
    }
    cv_.notify_all();
  }
  // True once a completion is being held (its work has run); false if none is by `limit`.
  bool wait_until_holding(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return held_; });
  }
  int64_t completions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return completions_;
  }

 private:
  // done runs on s's thread once s reached this point; meanwhile a device op from it fails.
  void completion_on(fake_streams::stream& s, std::function<void()> done) {
    s.push([this, done = std::move(done)]() mutable {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (holding_) {
          held_ = true;
          cv_.notify_all();
          cv_.wait(lock, [this] { return !holding_; });
          held_ = false;
        }
        ++completions_;
      }
      fake_streams::in_completion() = true;
      done();
      done = nullptr;  // what it captured goes while the flag is up
      fake_streams::in_completion() = false;
    });
  }

  const device where_;
  const bool in_caller_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool holding_ = false, held_ = false;
  int64_t completions_ = 0, staged_ = 0, staged_out_ = 0;
  // Last: their threads start once the rest is built, and end (after draining) before it goes.
  fake_streams::stream compute_, upload_, download_;
};

}  // namespace troupe::test
