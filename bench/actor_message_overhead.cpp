// The actor runtime's own cost per micro-batch message: a round trip (two hand-offs) of a
// pipeline_tensor_msg between two stage-like actors, each on its own thread as pipeline stages
// are (a scoped actor on the benchmark thread, a detached echo actor), against the same round
// trip through two plain mutex + condition-variable queues between two threads. The payload is
// one frozen activation shared by reference in both, so only the hand-off is timed. Run by hand.
#include <benchmark/benchmark.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "actors/messages.hpp"

namespace {

using namespace troupe;

tensor activation() {
  tensor t({32, 512});  // one 1F1B microbatch of the bench MLP: 32 rows x 512 features
  t.freeze();
  return t;
}

caf::behavior echo(caf::event_based_actor* self) {
  return {[self](pipeline_tensor_msg& m) { self->send(caf::actor_cast<caf::actor>(self->current_sender()), std::move(m)); }};
}

void actor_round_trip(benchmark::State& state) {
  caf::actor_system_config cfg;
  add_message_types(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  auto peer = sys.spawn<caf::detached>(echo);
  {
    caf::scoped_actor self{sys};
    const tensor t = activation();
    int32_t mb = 0;
    for (auto _ : state) {
      self->send(peer, pipeline_tensor_msg{0, false, mb++, 0, t});
      self->receive([&](pipeline_tensor_msg& m) { benchmark::DoNotOptimize(std::as_const(m.value).data()); });
    }
  }
  caf::anon_send_exit(peer, caf::exit_reason::user_shutdown);
}

struct cv_queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<pipeline_tensor_msg> items;
  void push(pipeline_tensor_msg m) {
    {
      std::lock_guard<std::mutex> lock(mu);
      items.push_back(std::move(m));
    }
    cv.notify_one();
  }
  pipeline_tensor_msg pop() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !items.empty(); });
    pipeline_tensor_msg m = std::move(items.front());
    items.pop_front();
    return m;
  }
};

void cv_queue_round_trip(benchmark::State& state) {
  cv_queue to_peer, back;
  std::thread peer([&] {
    while (true) {
      pipeline_tensor_msg m = to_peer.pop();
      if (m.microbatch < 0) return;
      back.push(std::move(m));
    }
  });
  const tensor t = activation();
  int32_t mb = 0;
  for (auto _ : state) {
    to_peer.push(pipeline_tensor_msg{0, false, mb++, 0, t});
    pipeline_tensor_msg m = back.pop();
    benchmark::DoNotOptimize(std::as_const(m.value).data());
  }
  to_peer.push(pipeline_tensor_msg{0, false, -1, 0, t});
  peer.join();
}

}  // namespace

BENCHMARK(actor_round_trip)->UseRealTime()->MinTime(1.0);
BENCHMARK(cv_queue_round_trip)->UseRealTime()->MinTime(1.0);
BENCHMARK_MAIN();
