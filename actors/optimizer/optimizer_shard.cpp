// optimizer_shard: owns the fp32 master copy of a flat parameter range and its optimizer state.
// It adopts the initial values a stage sends, then answers every gradient message with the
// updated parameters. One shard holding everything is plain training; ZeRO cuts the range.
#include <spdlog/spdlog.h>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"

namespace troupe {

namespace {

struct shard_state {
  int64_t offset = 0;
  int64_t size = 0;
  tensor master;
  std::unique_ptr<optimizer> opt;
  int64_t step = -1;  // the step being updated, for a failure's report
  shard_memory memory;
  memory_charge state_bytes;  // the optimizer's own state (moments)
  static inline const char* name = "optimizer_shard";
};

caf::behavior optimizer_shard(caf::stateful_actor<shard_state>* self, optimizer_config cfg, int64_t offset,
                              int64_t size, shard_memory memory) {
  auto& st = self->state;
  name_failures(self, [self] {
    const auto& s = self->state;
    return std::make_pair("optimizer shard [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")", s.step);
  });
  st.offset = offset;
  st.size = size;
  st.opt = make_optimizer(cfg, size);
  st.memory = std::move(memory);
  if (st.memory.ledger) st.state_bytes = memory_charge(st.memory.ledger, memory_kind::optimizer_state, st.opt->state_bytes());
  return {
      [self](const params_msg& m) {
        auto& s = self->state;
        if (m.offset != s.offset || m.params.numel() != s.size)
          throw std::invalid_argument("optimizer_shard: initial parameters for [" + std::to_string(m.offset) + ", +" +
                                      std::to_string(m.params.numel()) + "), shard owns [" +
                                      std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")");
        s.master = m.params;  // frozen: written again only once nobody else holds it (reclaim)
        s.master.freeze();
        if (s.memory.ledger) s.memory.ledger->charge(s.master, s.memory.master_kind);
      },
      [self](gradients_msg& m) {
        auto& s = self->state;
        s.step = m.step;
        // The gradients are dropped before the answer leaves, so the stage never holds next
        // step's gradients while these still exist (the ledger would count both).
        const tensor grads = std::move(m.grads);
        if (s.master.empty()) throw std::logic_error("optimizer_shard: gradients before initial parameters");
        // In place when nobody else holds the master copy any more (a ZeRO stage copies out its
        // segments); otherwise out of place, since the previous parameters are still in a
        // stage's hands: a fresh tensor becomes the master copy and is sent without a copy.
        tensor next = std::move(s.master);
        if (next.reclaim()) {
          s.opt->step(next.data(), grads.data(), grads.numel());
        } else {
          const tensor previous = std::move(next);
          next = tensor::uninitialized({s.size});
          if (s.memory.ledger) s.memory.ledger->charge(next, s.memory.master_kind);
          s.opt->step(next.data(), previous.data(), grads.data(), grads.numel());
        }
        next.freeze();
        s.master = next;
        return params_msg{m.step, s.offset, std::move(next)};
      },
  };
}

}  // namespace

caf::actor spawn_optimizer_shard(caf::actor_system& sys, optimizer_config cfg, int64_t offset, int64_t size,
                                 shard_memory memory) {
  return sys.spawn<caf::detached>(optimizer_shard, std::move(cfg), offset, size, std::move(memory));
}

}  // namespace troupe
