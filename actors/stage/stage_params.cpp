// stage_params: the stage's side of its optimizer shard (plain, not ZeRO). Its chunks' buffers
// laid end to end, on the stage's device, for the shard (the initial parameters, each step's
// gradients) and taken apart again when the updated parameters come back.
#include <utility>

#include "actors/stage/stage_state.hpp"
#include "kernels/device_ops.hpp"

namespace troupe::stage_detail {

tensor end_to_end(const std::vector<std::shared_ptr<pipeline_chunk>>& chunks, const device& where, int64_t n,
                  bool grads) {
  const device_ops& k = ops_for(where);
  tensor out = k.empty({n});
  int64_t at = 0;
  for (const auto& c : chunks) {
    const layer_stack& stack = c->stack();
    const tensor& part = grads ? stack.grads() : stack.params();
    k.copy_floats(f32_out(out) + at, f32(part), part.numel());
    at += part.numel();
  }
  return out;
}

compute_parts gradients_out(self_ptr self, int64_t n) {
  auto& s = self->state;
  auto grads = std::make_shared<tensor>();
  compute_parts c;
  // One chunk hands its buffer over (the stack goes on with a fresh zeroed one, so what was sent
  // is never written again); several are laid end to end.
  c.work = [chunks = s.chunks, where = compute_device(s.args), memory = s.args.memory, n, grads] {
    if (chunks.size() == 1) {
      *grads = chunks[0]->stack().take_grads();
      return;
    }
    *grads = end_to_end(chunks, where, n, true);
    if (memory) memory->charge(*grads, memory_kind::gradients);
  };
  c.finish = [self, grads] {
    auto& s = self->state;
    tensor g = std::move(*grads);
    g.freeze();
    for (const auto& o : s.args.observers) self->send(o, observed_gradients{s.args.rank, s.step, g});
    gradients_msg push{s.step, 0, std::move(g), s.args.dp_rank};
    if (dispensing(s)) {
      const int64_t next = s.units.unit(s.step + 1);
      push.unit = s.units.unit(s.step);
      push.next_round = next >= 0 ? next / s.args.dp_size : s.units.until();
      push.fresh = next < 0;
    }
    self->send(s.args.optimizer, std::move(push));
    s.opt = stage_state::opt_phase::sent;
  };
  return c;
}

void adopt_params(stage_state& s, const params_msg& m) {
  if (s.chunks.size() == 1 && m.params.where() == compute_device(s.args)) {
    s.chunks[0]->stack().adopt_params(m.params);  // frozen: the next update is a new tensor
    return;
  }
  launch(s, [&] {  // copied in, on a GPU on the stage's stream
    if (s.chunks.size() == 1) return s.chunks[0]->stack().load_params(m.params);
    const device_ops& k = ops_for(compute_device(s.args));
    int64_t at = 0;
    for (auto& c : s.chunks) {
      k.copy_floats(f32_out(c->stack().params()), f32(m.params) + at, c->stack().num_params());
      at += c->stack().num_params();
    }
  });
}

}  // namespace troupe::stage_detail
