// builders: explicit per-stage lists for GPipe, 1F1B, interleaved 1F1B and ZB-H1.
// Each is a short loop over the phases (warm-up, steady state, drain) written out per stage;
// nothing here knows about communication, timing or memory accounting.
#include "schedules/builders.hpp"

#include <algorithm>
#include <deque>
#include <stdexcept>

namespace troupe::sched {

namespace {

void require_at_least_one(const char* builder, const char* argument, int value) {
  if (value < 1)
    throw std::invalid_argument(std::string(builder) + ": " + argument + " must be >= 1, got " +
                                std::to_string(value));
}

schedule empty_schedule(const char* name, int num_stages, int num_microbatches, int v) {
  schedule s;
  s.name = name;
  s.num_stages = num_stages;
  s.num_microbatches = num_microbatches;
  s.virtual_stages = v;
  s.stages.resize(static_cast<std::size_t>(num_stages));
  return s;
}

action compute(int stage, op kind, int microbatch, int chunk = 0) {
  return action{stage, kind, microbatch, chunk, -1};
}

}  // namespace

schedule gpipe(int num_stages, int num_microbatches) {
  require_at_least_one("gpipe", "num_stages", num_stages);
  require_at_least_one("gpipe", "num_microbatches", num_microbatches);
  schedule s = empty_schedule("gpipe", num_stages, num_microbatches, 1);
  for (int d = 0; d < num_stages; ++d) {
    auto& list = s.stages[static_cast<std::size_t>(d)];
    for (int m = 0; m < num_microbatches; ++m) list.push_back(compute(d, op::forward, m));
    for (int m = 0; m < num_microbatches; ++m) list.push_back(compute(d, op::backward, m));
  }
  return s;
}

schedule one_f_one_b(int num_stages, int num_microbatches) {
  require_at_least_one("one_f_one_b", "num_stages", num_stages);
  require_at_least_one("one_f_one_b", "num_microbatches", num_microbatches);
  schedule s = empty_schedule("1f1b", num_stages, num_microbatches, 1);
  for (int d = 0; d < num_stages; ++d) {
    auto& list = s.stages[static_cast<std::size_t>(d)];
    const int warmup = std::min(num_stages - 1 - d, num_microbatches);
    for (int m = 0; m < warmup; ++m) list.push_back(compute(d, op::forward, m));
    for (int m = warmup; m < num_microbatches; ++m) {
      list.push_back(compute(d, op::forward, m));
      list.push_back(compute(d, op::backward, m - warmup));
    }
    for (int m = num_microbatches - warmup; m < num_microbatches; ++m)
      list.push_back(compute(d, op::backward, m));
  }
  return s;
}

schedule interleaved_1f1b(int num_stages, int num_microbatches, int virtual_stages) {
  require_at_least_one("interleaved_1f1b", "num_stages", num_stages);
  require_at_least_one("interleaved_1f1b", "num_microbatches", num_microbatches);
  require_at_least_one("interleaved_1f1b", "virtual_stages", virtual_stages);
  if (num_microbatches % num_stages != 0)
    throw std::invalid_argument(
        "interleaved_1f1b: num_microbatches (" + std::to_string(num_microbatches) +
        ") must be a multiple of num_stages (" + std::to_string(num_stages) +
        "): microbatches pass through the chunks in groups of num_stages");
  const int P = num_stages;
  const int v = virtual_stages;
  const int total = num_microbatches * v;  // chunk-microbatch units per device
  // Unit k (k-th forward or k-th backward on a device) -> (microbatch, chunk), as Megatron.
  auto microbatch_of = [&](int k) { return (k / (P * v)) * P + k % P; };
  auto chunk_of_unit = [&](int k, bool forward) {
    const int c = (k % (P * v)) / P;
    return forward ? c : v - 1 - c;
  };
  schedule s = empty_schedule("interleaved_1f1b", num_stages, num_microbatches, v);
  for (int d = 0; d < P; ++d) {
    auto& list = s.stages[static_cast<std::size_t>(d)];
    auto add = [&](int k, bool forward) {
      list.push_back(compute(d, forward ? op::forward : op::backward, microbatch_of(k),
                             chunk_of_unit(k, forward)));
    };
    const int warmup = std::min((P - 1 - d) * 2 + (v - 1) * P, total);
    for (int k = 0; k < warmup; ++k) add(k, true);
    for (int k = 0; k < total - warmup; ++k) {
      add(warmup + k, true);
      add(k, false);
    }
    for (int k = total - warmup; k < total; ++k) add(k, false);
  }
  return s;
}

schedule zb_h1(int num_stages, int num_microbatches) {
  require_at_least_one("zb_h1", "num_stages", num_stages);
  require_at_least_one("zb_h1", "num_microbatches", num_microbatches);
  schedule s = empty_schedule("zb_h1", num_stages, num_microbatches, 1);
  for (int d = 0; d < num_stages; ++d) {
    auto& list = s.stages[static_cast<std::size_t>(d)];
    std::deque<int> pending_w;  // microbatches whose input-gradient half ran, weight half not
    auto backward_input = [&](int m) {
      list.push_back(compute(d, op::backward_input, m));
      pending_w.push_back(m);
      // Stage d may leave d weight halves waiting: its 1F1B warm-up is d forwards shorter than
      // stage 0's, so d more stashed activations still stay within stage 0's peak of P.
      if (static_cast<int>(pending_w.size()) > d) {
        list.push_back(compute(d, op::backward_weight, pending_w.front()));
        pending_w.pop_front();
      }
    };
    const int warmup = std::min(num_stages - 1 - d, num_microbatches);
    for (int m = 0; m < warmup; ++m) list.push_back(compute(d, op::forward, m));
    for (int m = warmup; m < num_microbatches; ++m) {
      list.push_back(compute(d, op::forward, m));
      backward_input(m - warmup);
    }
    for (int m = num_microbatches - warmup; m < num_microbatches; ++m) backward_input(m);
    for (int m : pending_w) list.push_back(compute(d, op::backward_weight, m));
  }
  return s;
}

}  // namespace troupe::sched
