// stage_checkpoint: a stage's part in checkpoints. Resuming hands its optimizer shard the saved
// state; a checkpoint order has the shard write this rank's part.
#include <algorithm>
#include <cstdio>
#include <utility>

#include "actors/stage/stage_state.hpp"
#include "kernels/device_ops.hpp"
#include "storage/checkpoint.hpp"

namespace troupe::stage_detail {

// Resuming: the shard gets its master copy with the saved optimizer state and step count, in
// one message, instead of the initial parameters.
void restore_shard(self_ptr self, tensor initial) {
  auto& s = self->state;
  const resume_point& from = *s.args.checkpoints.resume;
  const int64_t n = initial.numel();
  const auto arrays = static_cast<int32_t>(from.manifest.arrays.size() - 1);
  tensor state({arrays * n});
  for (int32_t j = 0; j < arrays; ++j)
    from.read(from.manifest.arrays[static_cast<size_t>(1 + j)], s.shard_runs, state.data() + j * n);
  state.freeze();
  self->request(s.args.partners.optimizer, caf::infinite,
                shard_state{0, from.manifest.optimizer_steps, from.manifest.optimizer, arrays, std::move(initial), std::move(state)})
      .then([](const shard_state_restored&) {},
            [self](caf::error& e) {
              fail(self, "rank " + std::to_string(self->state.args.rank) + ": its optimizer shard refused the checkpoint's state: " +
                             self->system().render(e));
            });
}

// The coordinator's checkpoint order: this rank's shard writes its part, and its answer goes
// back to the coordinator; a rank that holds a copy of another's state answers with no file.
caf::result<checkpoint_part> write_checkpoint(self_ptr self, const checkpoint_order& o) {
  auto& s = self->state;
  if (o.stage_params) {  // in memory, from the chunks' buffers, laid end to end as stage_runs says
    int64_t n = 0;
    for (const auto& c : s.chunks) n += c->stack().num_params();
    checkpoint_part p;
    p.arrays = {"params"};
    p.values = tensor::uninitialized({n});
    int64_t at = 0;
    for (const auto& c : s.chunks) {
      tensor here;
      launch(s, [&] { here = on_host(c->stack().params()); });  // on a GPU, after the stage's stream
      std::copy(std::as_const(here).data(), std::as_const(here).data() + here.numel(), p.values.data() + at);
      at += here.numel();
    }
    p.values.freeze();
    p.runs = flatten(s.stage_runs);
    return p;
  }
  // An image (no dir) is asked of the ranks the coordinator picked.
  if ((!s.args.checkpoints.writes && !o.dir.empty()) || !s.args.partners.optimizer) return checkpoint_part{};
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", s.args.rank);
  std::string writer = "rank " + std::to_string(s.args.rank) + " (stage " + std::to_string(s.args.stage) + ", dp " +
                       std::to_string(s.args.run.replica) + ")";
  auto reply = self->make_response_promise<checkpoint_part>();
  self->request(s.args.partners.optimizer, caf::infinite, checkpoint_write{o.step, o.dir, name, std::move(writer), flatten(s.shard_runs)})
      .then([reply](checkpoint_part& p) mutable { reply.deliver(std::move(p)); },
            [reply](caf::error& e) mutable { reply.deliver(std::move(e)); });
  return reply;
}

}  // namespace troupe::stage_detail
