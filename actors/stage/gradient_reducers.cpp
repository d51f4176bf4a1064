// gradient_reducers: how a stage's gradients are reduced over its data-parallel group before its
// optimizer shard reads them. None (one replica, or a parameter server's client, whose server
// sums the pushes); every bucket all-reduced as backward produces it; or ZeRO's, whose shard
// takes this rank's segments only. The bucket traffic itself is stage_collectives.cpp's.
#include <memory>
#include <utility>

#include "actors/stage/stage_state.hpp"
#include "kernels/device_ops.hpp"

namespace troupe::stage_detail {

compute_parts gradient_reducer::gradients_out(self_ptr self, int64_t n) { return stage_detail::gradients_out(self, n); }

void gradient_reducer::launch(self_ptr self, int, size_t, tensor) {
  refuse(self->state, "a gradient bucket was cut, but the stage reduces no buckets");
}

namespace {

class none : public gradient_reducer {};

// Every bucket whose lowest layer is done goes to the collective at once, while backward goes on
// with the layers below; R waits for all of them.
class buckets : public gradient_reducer {
 public:
  // partitioned: reduce-scattered into the ZeRO shard's gradients (ZeRO-2 and 3); else all-reduced.
  buckets(std::shared_ptr<zero_shard> shard, bool partitioned) : shard_(std::move(shard)), partitioned_(partitioned) {}

  layer_stack::layer_done_fn bucket_hook(self_ptr self, int chunk) override {
    auto& s = self->state;
    const auto& list = s.args.buckets[static_cast<size_t>(chunk)];
    if (list.empty()) return nullptr;
    // Everything the hook needs, taken now: on an asynchronous device it runs on the device's
    // thread and never reads the stage's state. On a GPU the bucket is cut in device memory.
    bucket_delivery deliver = s.exec->from_backward(self, chunk, [self, chunk, into = partitioned_shard()](size_t b, tensor part) {
      launch_bucket(self, chunk, b, std::move(part), into);
    });
    // ZeRO-2 cuts a bucket out of its gradient unit once the unit is complete; an expert bucket
    // shares its unit with the rest of its layer, so both leave when the lower one is done.
    std::shared_ptr<const grad_units> units = partitioned_ ? shard_->units.at(static_cast<size_t>(chunk)) : nullptr;
    return [owner = s.chunks[static_cast<size_t>(chunk)], list, units, partitioned = partitioned_,
            on_device = s.args.groups.reduces_on_device || gpu_queue(s) != nullptr, memory = s.args.device.memory,
            next = std::make_shared<size_t>(0), held = std::make_shared<tensor>(),
            deliver = std::move(deliver)](size_t layer) {
      // Buckets become ready in order: bucket k's lowest layer is above bucket k+1's.
      auto ready = [&](size_t b) { return partitioned ? units->ready_layer[b] : list[b].first_layer; };
      while (*next < list.size() && ready(*next) == static_cast<int64_t>(layer)) {
        const size_t b = (*next)++;
        if (!partitioned || !units->shared(b)) {
          deliver(b, cut_bucket(owner->stack(), list[b], partitioned ? units->unit_of[b] : b, partitioned, on_device, memory));
          continue;
        }
        if (held->empty()) *held = owner->stack().take_unit_grads(units->unit_of[b]);
        deliver(b, slice_bucket(*held, units->at[b], list[b].count, memory));
        if (units->at[b] == 0) *held = tensor();  // the unit's lower bucket, its last
      }
    };
  }

  void launch(self_ptr self, int chunk, size_t b, tensor part) override {
    launch_bucket(self, chunk, b, std::move(part), partitioned_shard());
  }

  bool reduced(self_ptr self) override {
    auto& s = self->state;
    // A bucket cut on a device reaches the stage when its queue gets there, which may be after
    // the backward's own completion: R waits for every bucket of the step, not only those sent.
    if (s.buckets_launched < s.buckets_per_step) {
      s.waiting_for = std::to_string(s.buckets_per_step - s.buckets_launched) +
                      " gradient bucket(s) still on their way from the device";
      return false;
    }
    if (s.buckets_pending == 0) return true;
    s.waiting_for = "the all-reduce of " + std::to_string(s.buckets_pending) +
                    " gradient bucket(s) over its data-parallel group";
    return false;
  }

 protected:
  std::shared_ptr<zero_shard> partitioned_shard() const { return partitioned_ ? shard_ : nullptr; }

  std::shared_ptr<zero_shard> shard_;  // ZeRO's (null: plain data parallelism)
  bool partitioned_;
};

class zero : public buckets {
 public:
  using buckets::buckets;

  void begin_step(self_ptr self) override {
    if (!partitioned_) return;
    auto& s = self->state;  // every segment is written by its bucket's reduce-scatter
    stage_detail::launch(s, [&] { shard_->grads = ops_for(shard_device(s)).empty({shard_size(shard_->pieces)}); });
    if (const auto& ledger = shard_ledger(s)) ledger->charge(shard_->grads, memory_kind::gradients);
  }

  compute_parts gradients_out(self_ptr self, int64_t) override {
    return shard_gradients_out(self, *shard_, partitioned_);
  }
};

}  // namespace

std::unique_ptr<gradient_reducer> no_reduction() { return std::make_unique<none>(); }
std::unique_ptr<gradient_reducer> bucket_all_reduce() { return std::make_unique<buckets>(nullptr, false); }
std::unique_ptr<gradient_reducer> zero_reduce(std::shared_ptr<zero_shard> shard, bool partitioned) {
  return std::make_unique<zero>(std::move(shard), partitioned);
}

}  // namespace troupe::stage_detail
