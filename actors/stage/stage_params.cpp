// stage_params: the stage's side of its optimizer shard. Plain: its chunks' buffers laid end to
// end, on the stage's device, for the shard (the initial parameters, each step's gradients) and
// taken apart again when the updated parameters come back. ZeRO: this rank's segments of them,
// where the ZeRO shard runs (shard_device: the host, or the GPU when its group reduces there).
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
  auto grads = std::make_shared<tensor>(), on_host = std::make_shared<tensor>();
  // Observers, and parameter servers, read the gradients on the host: from a GPU, a copy to pinned
  // memory that the work enqueues and the finish (after the device's completion) hands on.
  const bool copy_to_host = on_accelerator(s) && (s.args.updates.host_gradients || !s.args.partners.observers.empty());
  compute_parts c;
  // One chunk hands its buffer over (the stack goes on with a fresh zeroed one, so what was sent
  // is never written again); several are laid end to end.
  c.work = [chunks = s.chunks, where = compute_device(s.args), memory = s.args.device.memory, n, grads, on_host, copy_to_host] {
    if (chunks.size() == 1) {
      *grads = chunks[0]->stack().take_grads();
    } else {
      *grads = end_to_end(chunks, where, n, true);
      if (memory) memory->charge(*grads, memory_kind::gradients);
    }
    if (!copy_to_host) return;
    *on_host = ops_for(where).host_copy(*grads);
  };
  c.finish = [self, grads, on_host] {
    auto& s = self->state;
    tensor g = std::move(*grads);
    g.freeze();
    tensor h = on_host->empty() ? g : std::move(*on_host);
    h.freeze();
    for (const auto& o : s.args.partners.observers) self->send(o, observed_gradients{s.args.rank, s.step, h});
    gradients_msg push{s.step, 0, s.args.updates.host_gradients ? std::move(h) : std::move(g), s.args.run.replica};
    s.batches_in->label(s, push);
    self->send(s.args.partners.optimizer, std::move(push));
    s.opt = stage_state::opt_phase::sent;
  };
  return c;
}

namespace {
// Copies this rank's segments (`pieces`) of each chunk's gradients or parameters into `out`, at
// their places in the shard. Touches only what it is given: it may run as a device's work.
void cut_segments(const std::vector<std::shared_ptr<pipeline_chunk>>& chunks,
                  const std::vector<std::vector<grad_bucket>>& buckets, const std::vector<shard_piece>& pieces,
                  bool grads, tensor& out) {
  for (const shard_piece& p : pieces) {
    const layer_stack& stack = chunks[static_cast<size_t>(p.chunk)]->stack();
    const tensor& from = grads ? stack.grads() : stack.params();
    const int64_t at = buckets[static_cast<size_t>(p.chunk)][p.bucket].offset + p.in_bucket;
    ops_for(stack.where()).copy_floats(f32_out(out) + p.at_shard, f32(from) + at, p.count);
  }
}
}  // namespace

compute_parts shard_gradients_out(self_ptr self, zero_shard& z, bool partitioned) {
  auto& s = self->state;
  auto grads = std::make_shared<tensor>();
  compute_parts c;
  if (!partitioned) {
    c.work = [chunks = s.chunks, buckets = s.args.buckets, pieces = z.pieces, where = compute_device(s.args),
              on_device = !shard_device(s).is_cpu(), ledger = shard_ledger(s), grads] {
      const device_ops& k = ops_for(where);
      // For a shard on the host, pinned on a GPU: the copies do not wait.
      *grads = on_device ? k.empty({shard_size(pieces)}) : k.host_empty({shard_size(pieces)});
      if (ledger) ledger->charge(*grads, memory_kind::buffers);
      cut_segments(chunks, buckets, pieces, true, *grads);
    };
  } else {
    *grads = std::move(z.grads);  // the reduce-scatters filled it
    z.grads = tensor();
    c.work = [] {};
  }
  c.finish = [self, grads] {
    auto& s = self->state;
    tensor g = std::move(*grads);
    g.freeze();
    self->send(s.args.partners.optimizer, gradients_msg{s.step, 0, std::move(g), s.args.run.replica});
    s.opt = stage_state::opt_phase::sent;
  };
  return c;
}

tensor shard_params(stage_state& s, const zero_shard& z) {
  tensor out;
  launch(s, [&] {
    out = ops_for(shard_device(s)).empty({shard_size(z.pieces)});
    cut_segments(s.chunks, s.args.buckets, z.pieces, false, out);
    ops_for(compute_device(s.args)).synchronize();  // on a GPU: waits once, at the start
  });
  return out;
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
