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
  static inline const char* name = "optimizer_shard";
};

caf::behavior optimizer_shard(caf::stateful_actor<shard_state>* self, optimizer_config cfg, int64_t offset,
                              int64_t size) {
  auto& st = self->state;
  name_failures(self, [self] {
    const auto& s = self->state;
    return std::make_pair("optimizer shard [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")", s.step);
  });
  st.offset = offset;
  st.size = size;
  st.opt = make_optimizer(cfg, size);
  return {
      [self](const params_msg& m) {
        auto& s = self->state;
        if (m.offset != s.offset || m.params.numel() != s.size)
          throw std::invalid_argument("optimizer_shard: initial parameters for [" + std::to_string(m.offset) + ", +" +
                                      std::to_string(m.params.numel()) + "), shard owns [" +
                                      std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")");
        s.master = m.params;  // frozen: read, never written; each step writes a new tensor
        s.master.freeze();
      },
      [self](const gradients_msg& m) {
        auto& s = self->state;
        s.step = m.step;
        if (s.master.empty()) throw std::logic_error("optimizer_shard: gradients before initial parameters");
        // Out of place: the previous parameters may still be in a stage's hands, so the update
        // goes into a fresh tensor, which becomes the master copy and is sent without a copy.
        tensor next = tensor::uninitialized({s.size});
        s.opt->step(next.data(), std::as_const(s.master).data(), m.grads.data(), m.grads.numel());
        next.freeze();
        s.master = next;
        return params_msg{m.step, s.offset, std::move(next)};
      },
  };
}

}  // namespace

caf::actor spawn_optimizer_shard(caf::actor_system& sys, optimizer_config cfg, int64_t offset, int64_t size) {
  return sys.spawn<caf::detached>(optimizer_shard, std::move(cfg), offset, size);
}

}  // namespace troupe
