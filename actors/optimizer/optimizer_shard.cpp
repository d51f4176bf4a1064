// optimizer_shard: owns the fp32 master copy of a flat parameter range and its optimizer state.
// It adopts the initial values a stage sends, then answers every gradient message with the
// updated parameters. One shard holding everything is plain training; ZeRO cuts the range.
// Offloaded to NVMe, master copy and state live in an offload_store's file, a tile of the
// shard per slot [master | state 0 | state 1] (or [master] alone when only the parameters are
// offloaded and the state stays in memory), and a step walks the tiles: tile i is updated
// while the store reads tile i+1 and writes tile i-1 (DeepSpeed's pipeline_read/_write).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"
#include "actors/plan/checkpointing.hpp"
#include "kernels/device_ops.hpp"

namespace troupe {

namespace {

// One step over an offloaded shard, in flight.
struct tiled_step {
  caf::response_promise reply;
  int64_t step = 0;
  tensor grads, out;
  int64_t requested = 0, updated = 0, written = 0;  // tiles
  std::map<int64_t, tensor> arrived;                // read, not yet updated
  std::chrono::steady_clock::time_point began;
};

struct shard_actor_state {
  int64_t offset = 0;
  int64_t size = 0;
  tensor master;
  std::unique_ptr<optimizer> opt;
  tensor device_state;  // on a GPU: the optimizer's state arrays there, one after another
  int64_t step = -1;  // the step being updated, for a failure's report
  shard_memory memory;
  memory_charge state_bytes;  // the optimizer's own state (moments)
  // Offloaded to NVMe: tile floats per slot section, tiles, and the step in flight.
  int64_t tile = 0, tiles = 0;
  bool initialized = false;
  bool checkpointing = false;  // offloaded: its slots are being read back for a checkpoint; a step waits
  tiled_step pending;
  offload_stats stats;
  std::string kind;  // the optimizer's, for checkpoints
  optimizer_config cfg;
  caf::actor writer;  // its checkpoint writer, spawned at the first checkpoint
  ~shard_actor_state() {
    if (stats.steps == 0 || stats.io_seconds <= 0) return;
    const double hidden = std::max(0.0, stats.io_seconds + stats.update_seconds - stats.step_seconds);
    spdlog::info("offloaded optimizer shard of {} values: {} steps, NVMe I/O {:.3f} s, updates {:.3f} s, steps {:.3f} s: "
                 "{:.0f}% of the I/O hidden behind the updates",
                 size, stats.steps, stats.io_seconds, stats.update_seconds, stats.step_seconds,
                 100.0 * hidden / stats.io_seconds);
  }
  static inline const char* name = "optimizer_shard";
};

using self_ptr = caf::stateful_actor<shard_actor_state>*;

// State arrays that live in the slots: all of them, or none when only the master copy is offloaded.
int stored_state(const shard_actor_state& s) { return s.memory.state_in_store ? s.opt->state_floats() : 0; }
int64_t slot_floats(const shard_actor_state& s) { return s.tile * (1 + stored_state(s)); }
int64_t slot_offset(const shard_actor_state& s, int64_t t) {
  return t * slot_floats(s) * static_cast<int64_t>(sizeof(float));
}
int64_t tile_length(const shard_actor_state& s, int64_t t) { return std::min(s.tile, s.size - t * s.tile); }

void request_tile(self_ptr self);

// Tile t is in memory: update it in place in its slot buffer, keep its new parameters for the
// answer and send the slot back to the store.
void update_tile(self_ptr self, int64_t t, tensor slot) {
  auto& s = self->state;
  tiled_step& p = s.pending;
  if (!slot.reclaim()) slot = slot.clone();  // the store's buffer is ours alone once received
  const int64_t n = tile_length(s, t);
  float* master = slot.data();
  float* state[2] = {master + s.tile, master + 2 * s.tile};
  if (!s.memory.state_in_store)
    for (int j = 0; j < s.opt->state_floats(); ++j) state[j] = s.opt->own_state(j) + t * s.tile;
  const auto t0 = std::chrono::steady_clock::now();
  s.opt->update_tile(master, master, std::as_const(p.grads).data() + t * s.tile, state, n);
  std::copy(master, master + n, p.out.data() + t * s.tile);
  s.stats.update_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++p.updated;
  slot.freeze();
  self->request(s.memory.store, caf::infinite, store_write{slot_offset(s, t), std::move(slot)})
      .then([self](const store_done& d) {
        auto& s = self->state;
        s.stats.io_seconds += d.seconds;
        if (++s.pending.written == s.tiles) {  // every tile is back on the drive: the step is done
          tensor out = std::move(s.pending.out);
          out.freeze();
          s.stats.step_seconds +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - s.pending.began).count();
          s.pending.grads = tensor();
          s.pending.reply.deliver(params_msg{s.pending.step, s.offset, std::move(out)});
          return;
        }
        if (!s.memory.pipeline) request_tile(self);  // one tile at a time: read the next now
      });
}

void request_tile(self_ptr self) {
  auto& s = self->state;
  tiled_step& p = s.pending;
  if (p.requested >= s.tiles) return;
  const int64_t t = p.requested++;
  self->request(s.memory.store, caf::infinite, store_read{slot_offset(s, t), slot_floats(s)})
      .then([self, t](store_done& d) {
        auto& s = self->state;
        s.stats.io_seconds += d.seconds;
        tiled_step& p = s.pending;
        p.arrived.emplace(t, std::move(d.data));
        while (!p.arrived.empty() && p.arrived.begin()->first == p.updated) {
          const int64_t next = p.updated;
          tensor slot = std::move(p.arrived.begin()->second);
          p.arrived.erase(p.arrived.begin());
          if (s.memory.pipeline) request_tile(self);  // tile i+1 is read while tile i is updated
          update_tile(self, next, std::move(slot));
        }
      });
}

void begin_tiled_step(self_ptr self);

// Writes the initial master copy with zero state, one slot at a time (so only one is ever in
// memory); the store answers in order, so every later read sees it. Gradients that arrive
// before the last slot is written wait for it.
void write_initial(self_ptr self, tensor params, int64_t t) {
  auto& s = self->state;
  if (t == s.tiles) {
    s.initialized = true;
    if (s.pending.reply.pending()) begin_tiled_step(self);
    return;
  }
  tensor slot({slot_floats(s)});  // zeros: the state before the first step
  if (s.memory.host) s.memory.host->charge(slot, memory_kind::buffers);
  const int64_t n = tile_length(s, t);
  const float* from = std::as_const(params).data() + t * s.tile;
  std::copy(from, from + n, slot.data());
  slot.freeze();
  self->request(s.memory.store, caf::infinite, store_write{slot_offset(s, t), std::move(slot)})
      .then([self, params, t](const store_done&) { write_initial(self, params, t + 1); });  // not a step's I/O
}

void begin_tiled_step(self_ptr self) {
  auto& s = self->state;
  s.pending.began = std::chrono::steady_clock::now();
  s.pending.out = tensor::uninitialized({s.size});
  if (s.memory.host) s.memory.host->charge(s.pending.out, memory_kind::buffers);
  s.opt->begin_step();
  ++s.stats.steps;
  request_tile(self);
}

// Checkpoints of an offloaded shard: every slot read back in order into the two halves of a
// shard_state, or written from one.
void read_state(self_ptr self, std::shared_ptr<shard_state> out, int64_t t, std::function<void(shard_state&)> done) {
  auto& s = self->state;
  if (t == s.tiles) {
    out->master.freeze();
    out->state.freeze();
    done(*out);
    return;
  }
  self->request(s.memory.store, caf::infinite, store_read{slot_offset(s, t), slot_floats(s)})
      .then([self, out, t, done = std::move(done)](const store_done& d) mutable {
        auto& s = self->state;
        const int64_t n = tile_length(s, t);
        const float* slot = d.data.data();
        std::copy(slot, slot + n, out->master.data() + t * s.tile);
        for (int j = 0; j < stored_state(s); ++j)
          std::copy(slot + (1 + j) * s.tile, slot + (1 + j) * s.tile + n, out->state.data() + j * s.size + t * s.tile);
        read_state(self, std::move(out), t + 1, std::move(done));
      });
}

// The master copy this step's update writes: the current one, in place, when nobody else holds
// it any more (a ZeRO stage copies out its segments); otherwise a fresh one on `ops`' device,
// since the previous values are still in a stage's hands, and `previous` holds them to update
// from. Either way the result is sent without a copy.
tensor writable_master(shard_actor_state& s, const device_ops& ops, tensor& previous) {
  tensor next = std::move(s.master);
  if (next.reclaim()) return next;
  previous = std::move(next);
  next = ops.empty({s.size});
  if (s.memory.ledger) s.memory.ledger->charge(next, s.memory.master_kind);
  return next;
}

// The updated master copy, kept (frozen) and sent.
params_msg publish(shard_actor_state& s, int64_t step, tensor next) {
  next.freeze();
  s.master = next;
  return params_msg{step, s.offset, std::move(next)};
}

// A step on the shard's GPU: the update runs there, and the shard waits for it on its own
// thread before answering, so the stage that gets the parameters may launch on them from any
// stream.
params_msg device_step(self_ptr self, gradients_msg& m) {
  auto& s = self->state;
  const device_ops& ops = ops_for(s.memory.where);
  const tensor grads = ops.to_here(m.grads);
  m.grads = tensor();
  tensor previous;
  tensor next = writable_master(s, ops, previous);
  s.opt->begin_step();
  // On the stage's stream (idle now: the gradients left with its completion), waited for here.
  s.memory.queue->launch([&] {
    if (s.device_state.empty()) s.device_state = ops.zeros({s.opt->state_floats() * s.size});
    std::vector<float*> state;
    for (int j = 0; j < s.opt->state_floats(); ++j) state.push_back(f32_out(s.device_state) + j * s.size);
    const float* from = previous.empty() ? f32(std::as_const(next)) : f32(previous);
    ops.optimizer_step(f32_out(next), from, f32(grads), state.data(), s.size, s.cfg, s.opt->steps());
    ops.synchronize();
  });
  return publish(s, m.step, std::move(next));
}

// The shard's state now (a snapshot: the master copy is shared, the state copied), or, offloaded,
// once every slot is read back; a step that arrives meanwhile waits for it.
void snapshot(self_ptr self, std::function<void(shard_state&)> done) {
  auto& s = self->state;
  shard_state out{s.offset, s.opt->steps(), s.kind, s.opt->state_floats(), tensor(), tensor()};
  if (!s.memory.where.is_cpu()) {  // the device's values, copied to the host on the stage's stream
    s.memory.queue->launch([&] {
      out.master = on_host(s.master);
      out.state = s.device_state.empty() ? tensor({out.state_floats * s.size}) : on_host(s.device_state);
    });
    out.master.freeze();
    out.state.freeze();
    done(out);
    return;
  }
  if (!s.memory.store) {
    out.master = s.master;  // frozen: shared, not copied
    out.state = tensor({static_cast<int64_t>(s.opt->state().size())}, s.opt->state());
    out.state.freeze();
    done(out);
    return;
  }
  out.master = tensor::uninitialized({s.size});
  if (s.memory.state_in_store) out.state = tensor::uninitialized({out.state_floats * s.size});
  else out.state = tensor({static_cast<int64_t>(s.opt->state().size())}, s.opt->state());  // only the master is on the drive
  s.checkpointing = true;
  read_state(self, std::make_shared<shard_state>(std::move(out)), 0, [self, done = std::move(done)](shard_state& st) {
    auto& s = self->state;
    s.checkpointing = false;
    done(st);
    if (s.pending.reply.pending() && s.initialized) begin_tiled_step(self);
  });
}

// The snapshot in memory: an elastic regroup's part of the image, no file.
checkpoint_part memory_part(const checkpoint_write& w, const shard_state& st) {
  const int64_t size = st.master.numel();
  checkpoint_part p;
  p.arrays.push_back("params");
  for (auto& a : storage::optimizer_state_arrays(st.optimizer, st.state_floats)) p.arrays.push_back(a);
  p.values = tensor::uninitialized({(1 + st.state_floats) * size});
  const tensor master = on_host(st.master);
  std::copy(std::as_const(master).data(), std::as_const(master).data() + size, p.values.data());
  if (st.state_floats > 0) {
    const tensor state = on_host(st.state);
    std::copy(std::as_const(state).data(), std::as_const(state).data() + st.state_floats * size, p.values.data() + size);
  }
  p.values.freeze();
  p.runs = w.runs;
  p.optimizer_steps = st.steps;
  return p;
}

// Writes the snapshot as one shard file (storage/checkpoint.hpp).
checkpoint_part write_part(const checkpoint_write& w, const shard_state& st) {
  if (w.dir.empty()) return memory_part(w, st);
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t size = st.master.numel();
  std::vector<std::string> names{"params"};
  for (auto& a : storage::optimizer_state_arrays(st.optimizer, st.state_floats)) names.push_back(a);
  std::vector<const float*> arrays{std::as_const(st.master).data()};
  for (int j = 0; j < st.state_floats; ++j) arrays.push_back(std::as_const(st.state).data() + j * size);
  const storage::checkpoint_file f =
      storage::write_shard_file(w.dir, w.file, w.writer, names, arrays, size, unflatten(w.runs));
  checkpoint_part p;
  p.file = f.name;
  p.writer = f.writer;
  p.bytes = f.bytes;
  for (const auto& sec : f.sections) {
    p.arrays.push_back(sec.array);
    p.sections.insert(p.sections.end(), {sec.byte_offset, sec.floats, static_cast<int64_t>(sec.crc32)});
  }
  p.runs = flatten(f.runs);
  p.optimizer_steps = st.steps;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

// A shard's checkpoint writer: detached and linked to its shard, so a write (CRC, I/O, fsync)
// runs beside the shard's next update instead of before it. The snapshot it writes shares the
// master copy (the next update then goes out of place) and owns a copy of the state.
caf::behavior shard_writer(caf::event_based_actor*) {
  return {[](const checkpoint_write& w, const shard_state& st) -> caf::result<checkpoint_part> {
    try {
      return write_part(w, st);
    } catch (const std::exception& e) {  // a full disk: the job is told, the shard goes on
      return caf::make_error(caf::sec::runtime_error, std::string(e.what()));
    }
  }};
}

void write_state(self_ptr self, caf::response_promise reply, shard_state in, int64_t t) {
  auto& s = self->state;
  if (t == s.tiles) {
    s.opt->restore(in.steps, s.memory.state_in_store ? std::vector<float>{} : in.state.to_vector());
    s.initialized = true;
    reply.deliver(shard_state_restored{in.steps});
    if (s.pending.reply.pending()) begin_tiled_step(self);  // a resumed stage's first gradients came meanwhile
    return;
  }
  tensor slot({slot_floats(s)});
  if (s.memory.host) s.memory.host->charge(slot, memory_kind::buffers);
  const int64_t n = tile_length(s, t);
  const float* master = std::as_const(in.master).data() + t * s.tile;
  std::copy(master, master + n, slot.data());
  for (int j = 0; j < stored_state(s); ++j) {
    const float* state = std::as_const(in.state).data() + j * s.size + t * s.tile;
    std::copy(state, state + n, slot.data() + (1 + j) * s.tile);
  }
  slot.freeze();
  self->request(s.memory.store, caf::infinite, store_write{slot_offset(s, t), std::move(slot)})
      .then([self, reply, in = std::move(in), t](const store_done&) mutable {
        write_state(self, std::move(reply), std::move(in), t + 1);
      });
}

caf::behavior optimizer_shard(self_ptr self, optimizer_config cfg, int64_t offset, int64_t size, shard_memory memory) {
  auto& st = self->state;
  name_failures(self, [self] {
    const auto& s = self->state;
    return std::make_pair("optimizer shard [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")", s.step);
  });
  st.offset = offset;
  st.size = size;
  st.kind = to_string(cfg.kind);
  st.cfg = cfg;
  st.memory = std::move(memory);
  const bool offloaded = static_cast<bool>(st.memory.store);
  const bool on_device = !st.memory.where.is_cpu();
  if (on_device && offloaded) throw std::invalid_argument("optimizer_shard: offload from " + st.memory.where.to_string());
  st.opt = make_optimizer(cfg, size,
                          on_device || (offloaded && st.memory.state_in_store) ? state_storage::external
                                                                               : state_storage::internal);
  if (on_device && !st.memory.queue)
    throw std::invalid_argument("optimizer_shard: on " + st.memory.where.to_string() + " without its stage's queue");
  if (!st.memory.state_ledger) st.memory.state_ledger = st.memory.ledger;
  if (st.memory.state_ledger)
    st.state_bytes = memory_charge(st.memory.state_ledger, memory_kind::optimizer_state,
                                   on_device ? st.opt->state_floats() * size * static_cast<int64_t>(sizeof(float))
                                             : st.opt->state_bytes());
  if (offloaded) {
    st.tile = st.memory.tile_floats;
    st.tiles = (size + st.tile - 1) / st.tile;
  }
  return {
      [self](const params_msg& m) {
        auto& s = self->state;
        if (m.offset != s.offset || m.params.numel() != s.size)
          throw std::invalid_argument("optimizer_shard: initial parameters for [" + std::to_string(m.offset) + ", +" +
                                      std::to_string(m.params.numel()) + "), shard owns [" +
                                      std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")");
        if (s.memory.store) return write_initial(self, on_host(m.params), 0);
        // On a GPU the master copy is the stage's own buffer there, as on the host.
        s.master = s.memory.where.is_cpu() ? on_host(m.params) : ops_for(s.memory.where).to_here(m.params);
        // Frozen: written again only once nobody else holds it (reclaim).
        s.master.freeze();
        if (s.memory.ledger) s.memory.ledger->charge(s.master, s.memory.master_kind);
      },
      [self](gradients_msg& m) -> caf::result<params_msg> {
        auto& s = self->state;
        s.step = m.step;
        if (s.memory.store) {
          if (m.grads.numel() != s.size)
            throw std::invalid_argument("optimizer_shard: " + std::to_string(m.grads.numel()) +
                                        " gradients for a shard of " + std::to_string(s.size));
          s.pending = tiled_step{};
          s.pending.reply = self->make_response_promise();
          s.pending.step = m.step;
          s.pending.grads = on_host(m.grads);
          m.grads = tensor();
          // Else when the initial slots are written, or a checkpoint's read of them is done.
          if (s.initialized && !s.checkpointing) begin_tiled_step(self);
          return s.pending.reply;
        }
        if (s.master.empty()) throw std::logic_error("optimizer_shard: gradients before initial parameters");
        if (!s.memory.where.is_cpu()) return device_step(self, m);
        // The gradients are dropped before the answer leaves, so the stage never holds next
        // step's gradients while these still exist (the ledger would count both).
        const tensor grads = on_host(m.grads);
        m.grads = tensor();
        tensor previous;
        tensor next = writable_master(s, ops_for(device{}), previous);
        const tensor& from = previous.empty() ? next : previous;
        s.opt->step(next.data(), std::as_const(from).data(), grads.data(), grads.numel());
        return publish(s, m.step, std::move(next));
      },
      [self](offload_stats_request) { return self->state.stats; },
      [self](shard_state_request) -> caf::result<shard_state> {
        auto& s = self->state;
        if (s.pending.reply.pending() || s.checkpointing)
          return caf::make_error(caf::sec::invalid_argument, "optimizer_shard: its state asked for during a step");
        if (!s.memory.store && s.master.empty())
          return caf::make_error(caf::sec::invalid_argument, "optimizer_shard: its state asked for before its initial parameters");
        auto reply = self->make_response_promise<shard_state>();
        snapshot(self, [reply](shard_state& st) mutable { reply.deliver(std::move(st)); });
        return reply;
      },
      [self](checkpoint_write& w) -> caf::result<checkpoint_part> {
        auto& s = self->state;
        const std::string where = "optimizer shard [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")";
        if (s.pending.reply.pending() || s.checkpointing)
          return caf::make_error(caf::sec::invalid_argument, where + ": a checkpoint during a step is refused");
        if (!s.memory.store && s.master.empty())
          return caf::make_error(caf::sec::invalid_argument, where + ": a checkpoint before its initial parameters");
        if (!s.writer) s.writer = self->spawn<caf::detached + caf::linked>(shard_writer);
        auto reply = self->make_response_promise<checkpoint_part>();
        snapshot(self, [self, reply, w = std::move(w)](shard_state& st) mutable {
          self->request(self->state.writer, caf::infinite, std::move(w), std::move(st))
              .then([reply](checkpoint_part& p) mutable { reply.deliver(std::move(p)); },
                    [reply](caf::error& e) mutable { reply.deliver(std::move(e)); });
        });
        return reply;
      },
      [self](shard_state& in) -> caf::result<shard_state_restored> {
        auto& s = self->state;
        const std::string where = "optimizer shard [" + std::to_string(s.offset) + ", +" + std::to_string(s.size) + ")";
        if (in.offset != s.offset || in.master.numel() != s.size || in.optimizer != s.kind ||
            in.state_floats != s.opt->state_floats() || in.state.numel() != in.state_floats * s.size)
          // Refused, not thrown: the shard keeps its own state and goes on.
          return caf::make_error(caf::sec::invalid_argument, where + " (" + s.kind + ", " + std::to_string(s.opt->state_floats()) +
                                      " state arrays) cannot take the saved state of shard [" + std::to_string(in.offset) +
                                      ", +" + std::to_string(in.master.numel()) + ") (" + in.optimizer + ", " +
                                      std::to_string(in.state_floats) + " state arrays of " +
                                      std::to_string(in.state.numel()) + " floats)");
        if (s.pending.reply.pending())
          return caf::make_error(caf::sec::invalid_argument, where + ": a restore during a step is refused");
        if (!s.memory.store && !s.memory.where.is_cpu()) {
          // On the GPU: the saved values copied there on the stage's stream, and waited for (the
          // shard's own thread), so the host copies may go once this returns.
          const device_ops& ops = ops_for(s.memory.where);
          s.opt->restore(in.steps, {});  // its state is the device's (external)
          s.memory.queue->launch([&] {
            s.master = ops.to_here(in.master);
            s.device_state = tensor();
            if (in.state.numel() > 0) {
              s.device_state = ops.empty({in.state.numel()});  // written in place by every step
              ops.copy(s.device_state, in.state);
            }
            ops.synchronize();
          });
          s.master.freeze();
          if (s.memory.ledger) s.memory.ledger->charge(s.master, s.memory.master_kind);
          return shard_state_restored{in.steps};
        }
        if (!s.memory.store) {
          s.opt->restore(in.steps, in.state.to_vector());
          s.master = in.master;
          s.master.freeze();
          if (s.memory.ledger) s.memory.ledger->charge(s.master, s.memory.master_kind);
          return shard_state_restored{in.steps};
        }
        auto reply = self->make_response_promise();
        write_state(self, reply, std::move(in), 0);
        return reply;
      },
  };
}

}  // namespace

caf::actor spawn_optimizer_shard(caf::actor_system& sys, optimizer_config cfg, int64_t offset, int64_t size,
                                 shard_memory memory) {
  return sys.spawn<caf::detached>(optimizer_shard, std::move(cfg), offset, size, std::move(memory));
}

}  // namespace troupe
