// data_loader: turns (step) into this rank's share of the step's global batch, a dispensed unit
// (batch_dispenser.cpp) into the share of a global batch it names, and (index) into a held-out
// batch. The sampler makes all of them reproducible from the seed alone.
#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "kernels/ring_attention.hpp"
#include "storage/sampler.hpp"

namespace troupe {

namespace {

struct loader_state {
  data_loader_args args;
  std::unique_ptr<storage::sampler> sampler;
  int64_t step = -1;  // the step of the batch being gathered, for a failure's report
  static inline const char* name = "data_loader";
};

caf::behavior data_loader(caf::stateful_actor<loader_state>* self, data_loader_args args) {
  auto& st = self->state;
  name_failures(self, [self] {
    return std::make_pair("the data loader of rank " + std::to_string(self->state.args.rank), self->state.step);
  });
  st.args = std::move(args);
  st.sampler = std::make_unique<storage::sampler>(st.args.train->size(), st.args.global_batch, st.args.seed);
  return {
      [self](const batch_request& r) {
        auto& s = self->state;
        s.step = r.step;
        const int64_t per_epoch = s.sampler->batches_per_epoch();
        // A unit is one share of a global batch, dispensed in order: units [b x ranks, (b + 1) x
        // ranks) are global batch b's shares, so an epoch's units cover its samples once.
        const int64_t global = r.unit >= 0 ? r.unit / s.args.ranks : r.step;
        const int share = r.unit >= 0 ? static_cast<int>(r.unit % s.args.ranks) : s.args.rank;
        auto idx = s.sampler->indices(global / per_epoch, global % per_epoch, share, s.args.ranks);
        batch b = s.args.train->gather(idx);
        if (s.args.context_ranks > 1)
          b = take_positions(b, ring_attention::balanced_positions(b.inputs.size(1), s.args.context_ranks,
                                                                   s.args.context_rank));
        return batch_msg{r.step, std::move(b)};
      },
      [self](const eval_batch_request& r) {
        auto& s = self->state;
        const eval_plan& plan = s.args.held_out;
        const int64_t begin = r.index * plan.piece;
        const int64_t end = std::min(plan.samples, begin + plan.piece);
        std::vector<int64_t> idx;
        for (int64_t i = begin; i < end; ++i) idx.push_back(i);
        return eval_batch_msg{r.epoch, r.index, plan.pieces(), s.args.eval->gather(idx)};
      },
  };
}

}  // namespace

caf::actor spawn_data_loader(caf::actor_system& sys, data_loader_args args) {
  return sys.spawn(data_loader, std::move(args));
}

}  // namespace troupe
