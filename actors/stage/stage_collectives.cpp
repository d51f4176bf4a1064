// stage_collectives: a stage's traffic with its data-parallel group, for its reducer and its
// parameter source (stage_strategies.hpp). Gradient buckets go to the collective as backward
// produces them (reduced or, ZeRO-2 and 3, reduce-scattered); ZeRO's
// updated parameters come back as all-gathers; ZeRO-3's units stream through the param_fetcher
// in the order the schedule row uses them.
#include <algorithm>
#include <utility>

#include "actors/stage/stage_state.hpp"
#include "comm/ring_schedule.hpp"
#include "kernels/device_ops.hpp"

namespace troupe::stage_detail {

namespace {

// `count` floats of `values` into dst on `where`. A GPU takes host values through its queue's
// upload stream (stage_in) and copies them from there on its own stream, the staged block kept
// until the device has read it (the upload stream's cache would hand it out again at once); other
// values are copied on the stage's stream.
void copy_floats_in(stage_state& s, const device& where, float* dst, const tensor& values, int64_t count) {
  const device_ops& k = ops_for(where);
  const std::shared_ptr<device_queue> gpu = gpu_queue(s);
  if (!gpu || where.is_cpu() || !values.where().is_cpu()) {
    launch(s, [&] { k.copy_floats(dst, f32(values), count); });
    return;
  }
  const tensor in = gpu->stage_in(values);
  launch(s, [&] { k.copy_floats(dst, f32(in), count); });
  gpu->when_done([in] {});
}

// Bucket b of local chunk c has its reduced values back: they replace the local gradients.
// False when the answer is wrong and the stage failed.
bool bucket_done(self_ptr self, int64_t step, int chunk, size_t b, int32_t index, double sent, collective_result& r,
                 zero_shard* partitioned) {
  auto& s = self->state;
  if (step != s.step) return false;  // a late answer for a step that failed: the job is stopping
  const grad_bucket& bucket = s.args.buckets[static_cast<size_t>(chunk)][b];
  const float* sum = f32(r.data);  // on the device when its group reduces there
  if (partitioned) {  // this rank's segment goes into the shard's gradients
    const shard_piece& piece = partitioned->pieces.at(static_cast<size_t>(index));
    // A group on the devices reduces the bucket in place and hands all of it back; the host's
    // hands back the segment alone.
    const int64_t expected = s.args.groups.reduces_on_device ? bucket.count : piece.count;
    if (r.data.numel() != expected) {
      fail(self, at_cursor(s) + "the reduce-scatter of bucket " + std::to_string(index) + " returned " +
                            std::to_string(r.data.numel()) + " values, not " + std::to_string(expected));
      return false;
    }
    const float* segment = s.args.groups.reduces_on_device ? sum + piece.in_bucket : sum;
    launch(s, [&] {
      ops_for(shard_device(s)).copy_floats(f32_out(partitioned->grads) + piece.at_shard, segment, piece.count);
    });
  } else {
    // On a GPU, in on the device's stream, before anything the stage launches next.
    layer_stack& stack = s.chunks[static_cast<size_t>(chunk)]->stack();
    copy_floats_in(s, stack.where(), f32_out(stack.grads()) + bucket.offset, r.data, bucket.count);
  }
  s.record.buckets.push_back(index);
  s.record.bucket_sent.push_back(sent);
  s.record.bucket_done.push_back(r.finished_at);
  s.record.bucket_left_rate.push_back(r.left_link_rate);
  --s.buckets_pending;
  return true;
}

}  // namespace

// A bucket's values, cut out of the chunk's gradients: ZeRO-2 hands its unit's own storage
// over (the rank keeps no full gradients; with !on_device a GPU's is copied to the host here and
// freed); otherwise they are copied (to the host, or, on_device, into device memory), since the
// stack keeps its summed values. Runs where the chunk's backward runs; a GPU's copy is enqueued:
// the bucket may leave once its queue is there.
tensor cut_bucket(layer_stack& stack, const grad_bucket& bucket, size_t unit, bool partitioned, bool on_device,
                  const std::shared_ptr<device_memory>& memory) {
  const device_ops& k = ops_for(stack.where());
  tensor part;
  if (partitioned) {
    part = stack.take_unit_grads(unit);
    // The device block goes back to its stream's pool, behind the copy.
    if (!part.where().is_cpu() && !on_device) part = k.host_copy(part);
  } else {
    part = on_device ? k.empty({bucket.count}) : k.host_empty({bucket.count});
    k.copy_floats(f32_out(part), f32(std::as_const(stack).grads()) + bucket.offset, bucket.count);
  }
  if (memory) memory->recharge(part, memory_kind::buffers);  // the collective's now
  part.freeze();
  return part;
}

tensor slice_bucket(const tensor& unit, int64_t at, int64_t count, const std::shared_ptr<device_memory>& memory) {
  tensor part = ops_for(unit.where()).host_empty({count});
  std::copy(f32(unit) + at, f32(unit) + at + count, f32_out(part));
  if (memory) memory->charge(part, memory_kind::buffers);
  part.freeze();
  return part;
}

void launch_bucket(self_ptr self, int chunk, size_t b, tensor part, std::shared_ptr<zero_shard> partitioned) {
  auto& s = self->state;
  int32_t first_index = 0;  // buckets are numbered over the stage's chunks, chunk 0 first
  for (int c = 0; c < chunk; ++c) first_index += static_cast<int32_t>(s.args.buckets[static_cast<size_t>(c)].size());
  const grad_bucket& bucket = s.args.buckets[static_cast<size_t>(chunk)][b];
  const auto index = static_cast<int32_t>(first_index + static_cast<int32_t>(b));
  const double sent = now_seconds();
  const int64_t step = s.step;
  ++s.buckets_pending;
  ++s.buckets_launched;
  const auto op = partitioned ? ring::op_kind::reduce_scatter_sum : ring::op_kind::all_reduce_sum;
  // An expert bucket reduces over the replicas holding the same experts.
  self->request(s.args.groups.reducer(bucket.experts ? sched::axis::edp : sched::axis::dp), caf::infinite,
                collective_request{step * s.seqs_per_step + index, static_cast<int32_t>(op), 0, bucket.count,
                                   std::move(part)})
      .then([self, step, chunk, b, index, sent, partitioned = std::move(partitioned)](collective_result& r) {
        auto& s = self->state;
        // The sums replace gradients the device may still be adding lower layers' into: they wait
        // for its completion (the executor defers them), and the cursor's advance goes on from there.
        if (!partitioned && s.exec->defer([self, step, chunk, b, index, sent, r]() mutable {
              bucket_done(self, step, chunk, b, index, sent, r, nullptr);
            }))
          return;
        if (bucket_done(self, step, chunk, b, index, sent, r, partitioned.get())) advance_after_message(self);
      },
      [self](caf::error& e) { self->state.batches_in->reduction_failed(self, self->system().render(e)); });
}

// ZeRO: the shard's updated segments are back. Every bucket is all-gathered from the segments
// of all ranks straight into the stage's parameters; O completes with the last one.
void gather_params(self_ptr self, const params_msg& m, const std::shared_ptr<zero_shard>& z) {
  auto& s = self->state;
  if (m.params.numel() != shard_size(z->pieces))
    return fail(self, at_cursor(s) + "the optimizer shard returned " + std::to_string(m.params.numel()) + " parameters for a shard of " +
                  std::to_string(shard_size(z->pieces)));
  z->gathers_pending = static_cast<int64_t>(z->pieces.size());
  const bool on_device = s.args.groups.reduces_on_device;
  for (size_t i = 0; i < z->pieces.size(); ++i) {
    const shard_piece& p = z->pieces[i];
    // The host's group starts from the segment alone; one on the devices gathers in place, from
    // the segment at its place in the bucket.
    const int64_t n = on_device ? s.args.buckets[static_cast<size_t>(p.chunk)][p.bucket].count : p.count;
    tensor part;
    launch(s, [&] {
      const device_ops& k = ops_for(shard_device(s));
      part = k.empty({n});
      k.copy_floats(f32_out(part) + (on_device ? p.in_bucket : 0), f32(m.params) + p.at_shard, p.count);
    });
    if (s.args.device.memory) s.args.device.memory->charge(part, memory_kind::buffers);
    part.freeze();
    if (!on_device) {
      request_gather(self, m.step, i, std::move(part), z);
      continue;
    }
    // The group's own stream reads it: posted once the stage's stream has copied it.
    s.args.device.queue->when_done([stage = self->address(), step = m.step, i, part = std::move(part)]() mutable {
      if (auto to = caf::actor_cast<caf::actor>(stage))
        caf::anon_send(to, gather_ready_atom::value, step, static_cast<uint64_t>(i), std::move(part));
    });
  }
}

void request_gather(self_ptr self, int64_t step, size_t i, tensor part, std::shared_ptr<zero_shard> z) {
  auto& s = self->state;
  const shard_piece& p = z->pieces[i];
  const grad_bucket& bucket = s.args.buckets[static_cast<size_t>(p.chunk)][p.bucket];
  const int64_t seq = step * s.seqs_per_step + s.buckets_per_step + static_cast<int64_t>(i);
  self->request(s.args.groups.reducer(bucket.experts ? sched::axis::edp : sched::axis::dp), caf::infinite,
                collective_request{seq, static_cast<int32_t>(ring::op_kind::all_gather), 0, bucket.count, std::move(part)})
      .then([self, step, i, z = std::move(z)](collective_result& r) {
        auto& s = self->state;
        if (step != s.step) return;  // a late answer for a step that failed
        const shard_piece& p = z->pieces[i];
        const grad_bucket& bucket = s.args.buckets[static_cast<size_t>(p.chunk)][p.bucket];
        if (r.data.numel() != bucket.count)
          return fail(self, at_cursor(s) + "the all-gather of bucket " + std::to_string(i) + " returned " +
                                std::to_string(r.data.numel()) + " values for a bucket of " + std::to_string(bucket.count));
        layer_stack& stack = s.chunks[static_cast<size_t>(p.chunk)]->stack();
        // On a GPU, in on the stage's stream, before the next step's forward reads it.
        copy_floats_in(s, stack.where(), f32_out(stack.params()) + bucket.offset, r.data, bucket.count);
        if (--z->gathers_pending == 0) s.opt = stage_state::opt_phase::done;
        advance_after_message(self);
      },
      [self](caf::error& e) { self->state.batches_in->reduction_failed(self, self->system().render(e)); });
}

// ZeRO-3: every unit the row's F and B actions will run, in that order: a forward walks a
// chunk's units up (its buckets from the last, which holds the lowest layers), a backward (or
// a split backward's input half) down.
std::vector<param_fetcher::request> fetch_order(const stage_state& s, const zero_shard& z) {
  std::vector<param_fetcher::request> out;
  for (const sched::action& a : row(s)) {
    if (a.kind != op::forward && a.kind != op::backward && a.kind != op::backward_input) continue;
    const auto c = static_cast<size_t>(a.chunk);
    const auto& buckets = s.args.buckets[c];
    for (size_t k = 0; k < buckets.size(); ++k) {
      const size_t b = a.kind == op::forward ? buckets.size() - 1 - k : k;
      size_t index = b;
      for (size_t e = 0; e < c; ++e) index += s.args.buckets[e].size();
      const shard_piece& p = z.pieces.at(index);
      out.push_back({a.chunk, b, buckets[b].count, z.fetcher->has_file() ? tensor() : z.params, p.at_shard});
    }
  }
  return out;
}

// The stage's hooks into its chunks: a unit's parameters arrive before its first layer runs
// (in the walk's direction) and go after its last. They run where the chunk computes (on an
// asynchronous device, its thread), so they hold the chunk and the fetcher, not the stage. On a
// GPU the unit is gathered on the host (the group meets there) and the fetcher copies it in on
// the queue's upload stream as it arrives (its place function, stage.cpp), ahead of use. Its block
// belongs to that stream's cache, which would hand it to the next unit's copy at once: released,
// it is kept until the device has run the layers that read it, counted as a buffer meanwhile.
void stream_params(self_ptr self, size_t c, const zero_shard& z) {
  auto& s = self->state;
  pipeline_chunk* chunk = s.chunks[c].get();  // the hooks live in the chunk: it outlives them
  std::shared_ptr<param_fetcher> fetcher = z.fetcher;
  std::shared_ptr<device_queue> gpu = gpu_queue(s);
  std::shared_ptr<device_memory> memory = s.args.device.memory;
  auto entry = [chunk](size_t u, bool forward) {
    return forward ? chunk->stack().unit_layers(u).first : chunk->stack().unit_layers(u).second;
  };
  chunk->set_param_hooks(
      [chunk, fetcher, c, entry](size_t layer, bool forward) {
        const int u = chunk->stack().unit_of(layer);
        if (u < 0 || layer != entry(static_cast<size_t>(u), forward)) return;
        tensor values = fetcher->take(static_cast<int>(c), static_cast<size_t>(u));
        const device where = chunk->stack().where();
        if (!where.is_cpu()) {
          values = ops_for(where).to_here(values);
          values.freeze();
        }
        chunk->stack().set_unit_params(static_cast<size_t>(u), std::move(values));
      },
      [chunk, entry, gpu, memory](size_t layer, bool forward) {
        const int u = chunk->stack().unit_of(layer);
        if (u < 0 || layer != entry(static_cast<size_t>(u), !forward)) return;
        tensor used = chunk->stack().take_unit_params(static_cast<size_t>(u));
        if (!gpu || used.empty()) return;
        if (memory) memory->recharge(used, memory_kind::buffers);
        gpu->when_done([used = std::move(used)] {});  // let go from the driver's thread: no CUDA call
      });
}

}  // namespace troupe::stage_detail
