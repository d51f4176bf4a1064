// param_sources: where a stage's parameters come from. Its own chunks' buffers, replaced by each
// update of its optimizer shard; ZeRO-1 and 2, this rank's segments updated by its shard and
// every bucket all-gathered back; ZeRO-3, only the segments kept, each unit gathered right before
// its first layer runs and dropped after its last (param_fetcher, stage_collectives.cpp).
#include <algorithm>
#include <memory>
#include <utility>

#include "actors/stage/stage_state.hpp"
#include "kernels/device_ops.hpp"

namespace troupe::stage_detail {

bool param_source::fetch(self_ptr self, const sched::action& a) {
  refuse(self->state, sched::to_string(a.kind) + " needs ZeRO-3 (--zero 3 over a data-parallel group)");
}
bool param_source::release(self_ptr self, const sched::action& a) { return fetch(self, a); }
void param_source::gather_ready(self_ptr self, int64_t, size_t, tensor) {
  refuse(self->state, "a segment of updated parameters was copied for an all-gather, but the stage gathers none");
}

namespace {

// A copy of local chunk c's parameters on the host, which the shard no longer writes.
void copy_whole(stage_state& s, size_t c, pipeline_params_msg& out) {
  tensor p;
  if (on_accelerator(s)) launch(s, [&] { p = on_host(s.chunks[c]->stack().params()); });
  else p = s.chunks[c]->stack().params().clone();
  p.freeze();
  out.params.push_back(std::move(p));
}

class own : public param_source {
 public:
  tensor initial(self_ptr self, int64_t n) override {
    auto& s = self->state;
    // One chunk: the shard's master copy is the stack's own buffer (frozen: neither writes it
    // again), so the rank holds its parameters once.
    if (s.chunks.size() == 1) return s.chunks[0]->stack().params();
    tensor out;
    launch(s, [&] { out = end_to_end(s.chunks, compute_device(s.args), n, false); });
    return out;
  }
  void updated(self_ptr self, const params_msg& m) override {
    auto& s = self->state;
    // The device may read these parameters now: they change once it is done.
    if (s.exec->defer([self, m] {
          adopt_params(self->state, m);
          if (m.step >= 0) self->state.opt = stage_state::opt_phase::done;
        }))
      return;
    adopt_params(s, m);
    if (m.step < 0) return;  // the shard's initial copy
    s.opt = stage_state::opt_phase::done;
    advance_after_message(self);
  }
  void copy_out(self_ptr self, size_t c, pipeline_params_msg& out) override { copy_whole(self->state, c, out); }
};

class gathered : public param_source {
 public:
  explicit gathered(std::shared_ptr<zero_shard> shard) : z_(std::move(shard)) {}
  tensor initial(self_ptr self, int64_t) override { return shard_params(self->state, *z_); }
  void updated(self_ptr self, const params_msg& m) override {
    if (m.step >= 0) gather_params(self, m, z_);
  }
  void gather_ready(self_ptr self, int64_t step, size_t i, tensor part) override {
    request_gather(self, step, i, std::move(part), z_);
  }
  std::string awaited(const stage_state& s) const override {
    if (z_->gathers_pending == 0) return param_source::awaited(s);
    return "the all-gather of " + std::to_string(z_->gathers_pending) +
           " bucket(s) of updated parameters over its data-parallel group";
  }
  void copy_out(self_ptr self, size_t c, pipeline_params_msg& out) override { copy_whole(self->state, c, out); }

 private:
  std::shared_ptr<zero_shard> z_;
};

class fetched : public param_source {
 public:
  explicit fetched(std::shared_ptr<zero_shard> shard) : z_(std::move(shard)) {}
  tensor initial(self_ptr self, int64_t) override {
    auto& s = self->state;
    // The whole stage was built (its init needs every layer); from here on it keeps its segments.
    tensor segments = shard_params(s, *z_);
    segments.freeze();
    z_->params = segments;
    // Offloaded, the segments are the host's (to NVMe, only until the fetcher has written them);
    // a GPU's are too, as its shard is (its group gathers on the host).
    if (s.args.zero.params_offloaded && s.args.device.host_memory)
      s.args.device.host_memory->charge(z_->params, s.args.zero.param_file ? memory_kind::buffers : memory_kind::parameters);
    else if (const auto& ledger = shard_ledger(s))
      ledger->charge(z_->params, memory_kind::parameters);
    param_fetcher::place_fn place;
    if (auto gpu = gpu_queue(s))  // prefetched into device memory, counted there
      place = [queue = std::move(gpu), memory = s.args.device.memory](tensor unit) {
        tensor on = queue->stage_in(unit);
        if (memory) memory->charge(on, memory_kind::parameters);
        return on;
      };
    z_->fetcher = std::make_shared<param_fetcher>(s.args.groups.member(sched::axis::dp), s.args.zero.prefetch, s.args.zero.param_file,
                                                std::move(place));
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      s.chunks[c]->stack().split_params();
      stream_params(self, c, *z_);
    }
    return segments;
  }

  void begin_step(self_ptr self) override {
    auto& s = self->state;
    // From here the gathers hold the segments; once the last is done the optimizer shard is
    // their only holder and updates them in place.
    if (z_->fetcher->has_file()) z_->fetcher->keep(z_->params);  // this step's segments, read back unit by unit
    z_->fetcher->begin_step(fetch_order(s, *z_));
    z_->params = tensor();
  }

  bool fetch(self_ptr, const sched::action&) override { return true; }  // the units stream in as the actions reach them

  bool release(self_ptr self, const sched::action& a) override {
    auto& s = self->state;
    const layer_stack& stack = s.chunks.at(static_cast<size_t>(a.chunk))->stack();
    for (size_t u = 0; u < stack.num_units(); ++u)
      if (stack.has_unit_params(u)) refuse(s, "unit " + std::to_string(u) + " of the chunk still holds its parameters");
    return true;
  }

  void updated(self_ptr self, const params_msg& m) override {  // the updated segments are all the stage keeps
    auto& s = self->state;
    if (m.step < 0) return;
    z_->params = m.params;
    s.opt = stage_state::opt_phase::done;
    advance_after_message(self);
  }

  // Only this rank's segments, where they sit in the chunk; the coordinator puts the replicas'
  // answers together.
  void copy_out(self_ptr self, size_t c, pipeline_params_msg& out) override {
    auto& s = self->state;
    if (z_->params.empty())
      throw std::logic_error("rank " + std::to_string(s.args.rank) + ": parameters asked for during a step");
    tensor p({s.chunks[c]->stack().num_params()});
    std::vector<int64_t> runs;
    for (const shard_piece& piece : z_->pieces) {
      if (piece.chunk != static_cast<int>(c) || piece.count == 0) continue;
      const int64_t at = s.args.buckets[c][piece.bucket].offset + piece.in_bucket;
      const float* from = std::as_const(z_->params).data() + piece.at_shard;
      std::copy(from, from + piece.count, p.data() + at);
      runs.push_back(at);
      runs.push_back(piece.count);
    }
    p.freeze();
    out.params.push_back(std::move(p));
    out.owned.push_back(std::move(runs));
  }

 private:
  std::shared_ptr<zero_shard> z_;
};

}  // namespace

std::unique_ptr<param_source> own_params() { return std::make_unique<own>(); }
std::unique_ptr<param_source> zero_gathered_params(std::shared_ptr<zero_shard> shard) {
  return std::make_unique<gathered>(std::move(shard));
}
std::unique_ptr<param_source> zero_fetched_params(std::shared_ptr<zero_shard> shard) {
  return std::make_unique<fetched>(std::move(shard));
}

}  // namespace troupe::stage_detail
