// completions (completions.hpp): one thread for the process, fed by host functions.
#include "kernels/cuda/completions.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/kernel_faults.hpp"

namespace troupe::cuda {

namespace {

struct waiting {
  cudaStream_t stream;
  int device;
  std::string what;
  std::function<void()> done;
  std::function<void(const std::string&)> fault;
};

class completion_thread {
 public:
  static completion_thread& get() {
    // Never destroyed: host functions may still fire while static destructors run.
    static completion_thread* t = new completion_thread;
    return *t;
  }

  void add(cudaStream_t stream, std::string what, std::function<void()> done,
           std::function<void(const std::string&)> fault) {
    int device = 0;
    TROUPE_CUDA_CHECK(cudaGetDevice(&device));
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = ++last_id_;
      waiting_.emplace(id, waiting{stream, device, std::move(what), std::move(done), std::move(fault)});
    }
    const cudaError_t e = cudaLaunchHostFunc(stream, &completion_thread::reached, reinterpret_cast<void*>(id));
    if (e != cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.erase(id);
      check(e, "cudaLaunchHostFunc", __FILE__, __LINE__);
    }
  }

  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    drained_.wait(lock, [&] { return reached_.empty() && running_ == 0; });
  }

 private:
  completion_thread() : thread_([this] { loop(); }) { thread_.detach(); }

  // The driver's thread: a lock and a notify, no CUDA call, nothing freed.
  static void CUDART_CB reached(void* id) {
    completion_thread& t = get();
    {
      std::lock_guard<std::mutex> lock(t.mu_);
      t.reached_.push_back(reinterpret_cast<uint64_t>(id));
    }
    t.wake_.notify_one();
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait_for(lock, std::chrono::milliseconds(100), [&] { return !reached_.empty(); });
      if (!reached_.empty()) {
        std::vector<waiting> run;
        for (uint64_t id : reached_) {
          auto it = waiting_.find(id);
          if (it == waiting_.end()) continue;  // reported as a fault already
          run.push_back(std::move(it->second));
          waiting_.erase(it);
        }
        reached_.clear();
        ++running_;
        lock.unlock();
        for (waiting& w : run) {
          // A data error a kernel of this GPU recorded (kernel_faults.hpp) ends the work that
          // waited for it, as the CPU op's throw would have.
          const std::string data_error = take_kernel_fault(w.device);
          if (data_error.empty()) w.done();
          else report(w, "a kernel before " + w.what + " completed found bad data: " + data_error);
          w = waiting{};  // what it captured goes here, on this thread
        }
        lock.lock();
        --running_;
        drained_.notify_all();
        continue;
      }
      if (!waiting_.empty()) poll(lock);
    }
  }

  static void report(waiting& w, const std::string& why) {
    if (w.fault) return w.fault(why);
    std::fprintf(stderr, "troupe: cuda:%d: %s\n", w.device, why.c_str());
    std::abort();
  }

  // A stream with callbacks outstanding that reports an error has faulted: its callbacks will not
  // come. Each is answered with the fault, naming what it waited for.
  void poll(std::unique_lock<std::mutex>& lock) {
    std::map<cudaStream_t, int> streams;
    for (const auto& [id, w] : waiting_) streams.emplace(w.stream, w.device);
    lock.unlock();
    std::map<cudaStream_t, std::string> faulted;
    for (const auto& [s, device] : streams) {
      if (cudaSetDevice(device) != cudaSuccess) continue;
      const cudaError_t e = cudaStreamQuery(s);
      if (e == cudaSuccess || e == cudaErrorNotReady) continue;
      faulted.emplace(s, std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
    }
    lock.lock();
    if (faulted.empty()) return;
    std::vector<waiting> failed;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (faulted.count(it->second.stream)) {
        failed.push_back(std::move(it->second));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    lock.unlock();
    for (waiting& w : failed) {
      report(w, "the GPU faulted before " + w.what + " completed: " + faulted[w.stream]);
      w = waiting{};
    }
    lock.lock();
  }

  std::mutex mu_;
  std::condition_variable wake_, drained_;
  std::map<uint64_t, waiting> waiting_;
  std::deque<uint64_t> reached_;
  uint64_t last_id_ = 0;
  int running_ = 0;
  std::thread thread_;
};

}  // namespace

void after(cudaStream_t stream, std::string what, std::function<void()> done,
           std::function<void(const std::string&)> fault) {
  completion_thread::get().add(stream, std::move(what), std::move(done), std::move(fault));
}

void drain_completions() { completion_thread::get().drain(); }

}  // namespace troupe::cuda
