// strict_cuda (strict_cuda.hpp): the CUDA runtime functions kernels/cuda's host code calls,
// over host memory and one device thread.
#include "tests/kernels/strict_cuda.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "kernels/cuda/device_alloc.hpp"

namespace troupe::test::strict_cuda {

namespace {

using clock_type = std::chrono::steady_clock;

struct event_state {
  uint64_t recorded = 0;  // the generation of the last record enqueued
  uint64_t reached = 0;   // the generation the device has run
  bool destroyed = false;
};

struct op {
  uint64_t seq = 0;
  std::function<void()> run;       // the effect, run without the lock
  event_state* records = nullptr;  // a record: sets records->reached = gen
  event_state* waits = nullptr;    // runnable once waits->reached >= gen
  uint64_t gen = 0;
  bool host_function = false;
};

struct stream_state {
  std::deque<op> ops;
  bool destroyed = false;
  bool running = false;
  bool idle() const { return ops.empty() && !running; }
};

thread_local bool in_host = false;
thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

// How long the host must have enqueued nothing before the device starts a batch on its own.
constexpr auto quiet = std::chrono::milliseconds(2);
// How long the device waits after a host function before it runs anything else.
constexpr auto host_function_stall = std::chrono::milliseconds(20);

class fake_gpu_state {
 public:
  static fake_gpu_state& get() {
    static fake_gpu_state* d = new fake_gpu_state;  // never destroyed: its thread runs until the process ends
    return *d;
  }

  std::mutex mu;
  std::condition_variable cv;
  std::map<cudaStream_t, std::unique_ptr<stream_state>> streams;
  std::vector<std::unique_ptr<event_state>> events;  // kept after destroy, so a late use is seen
  std::map<const char*, size_t> device_blocks, pinned_blocks;
  std::vector<std::string> violations;
  uint64_t seq = 0;
  clock_type::time_point last_enqueue = clock_type::now();
  int waiting_hosts = 0;

  void violation(const std::string& what) { violations.push_back(what); }

  // Under the lock. Null (and a violation) for a destroyed or unknown stream; the legacy stream
  // (null) is made on its first use.
  stream_state* stream(cudaStream_t s, const char* call) {
    auto it = streams.find(s);
    if (it == streams.end()) {
      if (s != nullptr) {
        violation(std::string(call) + " on a stream that was never created");
        return nullptr;
      }
      it = streams.emplace(nullptr, std::make_unique<stream_state>()).first;
    }
    if (it->second->destroyed) {
      violation(std::string(call) + " on a destroyed stream");
      return nullptr;
    }
    return it->second.get();
  }
  event_state* event(cudaEvent_t e, const char* call) {
    auto* ev = reinterpret_cast<event_state*>(e);
    if (ev && ev->destroyed) {
      violation(std::string(call) + " of a destroyed event");
      return nullptr;
    }
    return ev;
  }

  void enqueue(stream_state* s, op o) {
    o.seq = ++seq;
    s->ops.push_back(std::move(o));
    last_enqueue = clock_type::now();
    cv.notify_all();
  }

  // The host waits for `done` (under the lock), letting the device run at once meanwhile.
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred done) {
    ++waiting_hosts;
    cv.notify_all();
    cv.wait(lock, done);
    --waiting_hosts;
  }

 private:
  fake_gpu_state() : thread_([this] { loop(); }) { thread_.detach(); }

  bool runnable(const stream_state& s) const {
    if (s.ops.empty() || s.running) return false;
    const op& head = s.ops.front();
    return !head.waits || head.waits->reached >= head.gen;
  }
  bool any_work() const {
    for (const auto& [h, s] : streams)
      if (!s->ops.empty()) return true;
    return false;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return any_work(); });
      while (waiting_hosts == 0 && clock_type::now() - last_enqueue < quiet) cv.wait_for(lock, quiet);
      // The worst order the events allow: the runnable head enqueued last goes first.
      stream_state* pick = nullptr;
      for (const auto& [h, s] : streams)
        if (runnable(*s) && (!pick || s->ops.front().seq > pick->ops.front().seq)) pick = s.get();
      if (!pick) {  // every head waits for an event a later record will reach
        cv.wait_for(lock, quiet);
        continue;
      }
      op o = std::move(pick->ops.front());
      pick->ops.pop_front();
      if (o.records) {
        o.records->reached = std::max(o.records->reached, o.gen);
      } else if (o.run) {
        pick->running = true;
        lock.unlock();
        in_host = o.host_function;
        o.run();
        in_host = false;
        // After a host function nothing else runs for a while: what it signalled (a completion
        // thread's callback) reads the device's results now, before any later copy could land,
        // as on a GPU whose copy engine is busy.
        if (o.host_function) std::this_thread::sleep_for(host_function_stall);
        lock.lock();
        pick->running = false;
      }
      cv.notify_all();
    }
  }

  std::thread thread_;  // last: starts once the rest is built
};

// A runtime call where CUDA forbids them (in a host function): recorded, and refused.
bool refused(const char* call) {
  if (!in_host) return false;
  fake_gpu_state& d = fake_gpu_state::get();
  std::lock_guard<std::mutex> lock(d.mu);
  d.violation(std::string(call) + " called from a host function");
  return true;
}

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

bool is_device_memory(const void* p) {
  fake_gpu_state& d = fake_gpu_state::get();
  const char* c = static_cast<const char*>(p);
  auto it = d.device_blocks.upper_bound(c);
  if (it == d.device_blocks.begin()) return false;
  --it;
  return c < it->first + it->second;
}

void* poisoned_block(size_t bytes) {
  void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (p) std::memset(p, 0xFF, bytes);  // every float NaN
  return p;
}

void synchronize_locked(std::unique_lock<std::mutex>& lock) {
  fake_gpu_state& d = fake_gpu_state::get();
  d.wait(lock, [&] {
    for (const auto& [h, s] : d.streams)
      if (!s->idle()) return false;
    return true;
  });
}

class checking_allocator final : public allocator {
 public:
  explicit checking_allocator(std::shared_ptr<allocator> inner) : inner_(std::move(inner)) {}
  void* allocate(size_t bytes) override {
    if (in_host) record("an allocation of a device block inside a host function");
    return inner_->allocate(bytes);
  }
  void deallocate(void* p, size_t bytes) noexcept override {
    if (in_host) record("a free of a device block inside a host function");
    inner_->deallocate(p, bytes);
  }
  void zero(void* p, size_t bytes) override { inner_->zero(p, bytes); }
  troupe::device where() const override { return inner_->where(); }

 private:
  static void record(const char* what) {
    fake_gpu_state& d = fake_gpu_state::get();
    std::lock_guard<std::mutex> lock(d.mu);
    d.violation(what);
  }
  std::shared_ptr<allocator> inner_;
};

}  // namespace

std::vector<std::string> violations() {
  fake_gpu_state& d = fake_gpu_state::get();
  std::lock_guard<std::mutex> lock(d.mu);
  return d.violations;
}

void clear_violations() {
  fake_gpu_state& d = fake_gpu_state::get();
  std::lock_guard<std::mutex> lock(d.mu);
  d.violations.clear();
}

bool in_host_function() { return in_host; }

void launch(cudaStream_t stream, std::function<void()> fn) {
  fake_gpu_state& d = fake_gpu_state::get();
  std::lock_guard<std::mutex> lock(d.mu);
  if (stream_state* s = d.stream(stream, "a kernel launch")) {
    op o;
    o.run = std::move(fn);
    d.enqueue(s, std::move(o));
  }
}

void synchronize_all() {
  fake_gpu_state& d = fake_gpu_state::get();
  std::unique_lock<std::mutex> lock(d.mu);
  synchronize_locked(lock);
}

std::shared_ptr<allocator> checking_device_allocator() {
  static const auto a = std::make_shared<checking_allocator>(cuda::cuda_device_allocator(0));
  return a;
}

}  // namespace troupe::test::strict_cuda

// ---- the runtime functions (declared by cuda_runtime_api.h with C linkage) ----

namespace {

using troupe::test::strict_cuda::fail;
using troupe::test::strict_cuda::fake_gpu_state;
using troupe::test::strict_cuda::refused;

fake_gpu_state& gpu() { return fake_gpu_state::get(); }

}  // namespace

cudaError_t CUDARTAPI cudaGetDevice(int* device) {
  if (refused("cudaGetDevice")) return fail(cudaErrorNotPermitted);
  *device = troupe::test::strict_cuda::current_device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaSetDevice(int device) {
  if (refused("cudaSetDevice")) return fail(cudaErrorNotPermitted);
  if (device != 0) return fail(cudaErrorInvalidDevice);
  troupe::test::strict_cuda::current_device = device;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaGetLastError(void) {
  const cudaError_t e = troupe::test::strict_cuda::last_error;
  troupe::test::strict_cuda::last_error = cudaSuccess;
  return e;
}

const char* CUDARTAPI cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    default: return "cudaError (strict fake)";
  }
}

const char* CUDARTAPI cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (refused("cudaStreamCreateWithFlags")) return fail(cudaErrorNotPermitted);
  auto* handle = reinterpret_cast<cudaStream_t>(new char);  // an address only: never dereferenced
  std::lock_guard<std::mutex> lock(gpu().mu);
  gpu().streams.emplace(handle, std::make_unique<troupe::test::strict_cuda::stream_state>());
  *stream = handle;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream) {
  if (refused("cudaStreamDestroy")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* s = gpu().stream(stream, "cudaStreamDestroy");
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  s->destroyed = true;  // what it was given still runs, as on a GPU
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream) {
  if (refused("cudaStreamSynchronize")) return fail(cudaErrorNotPermitted);
  std::unique_lock<std::mutex> lock(gpu().mu);
  auto* s = gpu().stream(stream, "cudaStreamSynchronize");
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  gpu().wait(lock, [&] { return s->idle(); });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamQuery(cudaStream_t stream) {
  if (refused("cudaStreamQuery")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* s = gpu().stream(stream, "cudaStreamQuery");
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  return s->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  if (refused("cudaEventCreateWithFlags")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  gpu().events.push_back(std::make_unique<troupe::test::strict_cuda::event_state>());
  *event = reinterpret_cast<cudaEvent_t>(gpu().events.back().get());
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t event) {
  if (refused("cudaEventDestroy")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* e = gpu().event(event, "cudaEventDestroy");
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  e->destroyed = true;  // a record or wait already enqueued still completes, as on a GPU
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (refused("cudaEventRecord")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* e = gpu().event(event, "cudaEventRecord");
  auto* s = gpu().stream(stream, "cudaEventRecord");
  if (!e || !s) return fail(cudaErrorInvalidResourceHandle);
  troupe::test::strict_cuda::op o;
  o.records = e;
  o.gen = ++e->recorded;
  gpu().enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  if (refused("cudaEventQuery")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* e = gpu().event(event, "cudaEventQuery");
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  return e->reached >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t event) {
  if (refused("cudaEventSynchronize")) return fail(cudaErrorNotPermitted);
  std::unique_lock<std::mutex> lock(gpu().mu);
  auto* e = gpu().event(event, "cudaEventSynchronize");
  if (!e) return fail(cudaErrorInvalidResourceHandle);
  gpu().wait(lock, [&] { return e->reached >= e->recorded; });
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (refused("cudaStreamWaitEvent")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* e = gpu().event(event, "cudaStreamWaitEvent");
  auto* s = gpu().stream(stream, "cudaStreamWaitEvent");
  if (!e || !s) return fail(cudaErrorInvalidResourceHandle);
  troupe::test::strict_cuda::op o;
  o.waits = e;
  o.gen = e->recorded;  // what was recorded by now; an event never recorded is no wait
  gpu().enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (refused("cudaLaunchHostFunc")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* s = gpu().stream(stream, "cudaLaunchHostFunc");
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  troupe::test::strict_cuda::op o;
  o.run = [fn, data] { fn(data); };
  o.host_function = true;
  gpu().enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMalloc(void** p, size_t bytes) {
  if (refused("cudaMalloc")) return fail(cudaErrorNotPermitted);
  *p = troupe::test::strict_cuda::poisoned_block(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(gpu().mu);
  gpu().device_blocks[static_cast<const char*>(*p)] = std::max<size_t>(bytes, 1);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFree(void* p) {
  if (refused("cudaFree")) return fail(cudaErrorNotPermitted);
  std::unique_lock<std::mutex> lock(gpu().mu);
  troupe::test::strict_cuda::synchronize_locked(lock);  // as cudaFree synchronizes the device
  gpu().device_blocks.erase(static_cast<const char*>(p));
  std::free(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  if (refused("cudaHostAlloc")) return fail(cudaErrorNotPermitted);
  *p = troupe::test::strict_cuda::poisoned_block(bytes);
  if (!*p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(gpu().mu);
  gpu().pinned_blocks[static_cast<const char*>(*p)] = std::max<size_t>(bytes, 1);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaFreeHost(void* p) {
  if (refused("cudaFreeHost")) return fail(cudaErrorNotPermitted);
  std::unique_lock<std::mutex> lock(gpu().mu);
  troupe::test::strict_cuda::synchronize_locked(lock);
  gpu().pinned_blocks.erase(static_cast<const char*>(p));
  std::free(p);
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaHostGetDevicePointer(void** device_ptr, void* host, unsigned int) {
  *device_ptr = host;
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (refused("cudaMemsetAsync")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* s = gpu().stream(stream, "cudaMemsetAsync");
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  troupe::test::strict_cuda::op o;
  o.run = [p, value, bytes] { std::memset(p, value, bytes); };
  gpu().enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  if (refused("cudaMemcpyAsync")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  auto* s = gpu().stream(stream, "cudaMemcpyAsync");
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  // Host memory written by a copy reads NaN until the copy has run.
  if (!troupe::test::strict_cuda::is_device_memory(dst)) std::memset(dst, 0xFF, bytes);
  troupe::test::strict_cuda::op o;
  o.run = [dst, src, bytes] { std::memmove(dst, src, bytes); };
  gpu().enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t CUDARTAPI cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  if (refused("cudaPointerGetAttributes")) return fail(cudaErrorNotPermitted);
  std::lock_guard<std::mutex> lock(gpu().mu);
  *attributes = cudaPointerAttributes{};
  const char* c = static_cast<const char*>(p);
  auto in = [&](const std::map<const char*, size_t>& blocks) {
    auto it = blocks.upper_bound(c);
    if (it == blocks.begin()) return false;
    --it;
    return c < it->first + it->second;
  };
  if (troupe::test::strict_cuda::is_device_memory(p)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = 0;
  } else if (in(gpu().pinned_blocks)) {
    attributes->type = cudaMemoryTypeHost;
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}
