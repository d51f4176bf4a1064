// stage_setup: a stage made from its args. Its chunks are built (their initial values, or the
// checkpoint's), its gradient buckets laid out, and its strategies chosen once: what the stage is
// (on which device, reducing how, its parameters from where, its batches from whom) is decided
// here and nowhere else; the interpreter (stage.cpp) only asks the strategies.
#include <pthread.h>
#include <sched.h>

#include <utility>

#include "actors/stage/stage_state.hpp"
#include "kernels/device_ops.hpp"
#include "storage/checkpoint.hpp"

namespace troupe::stage_detail {

namespace {

// ZeRO needs a data-parallel group and a bucket to shard: else the stage keeps everything (null).
std::shared_ptr<zero_shard> zero_shard_of(const stage_args& a) {
  if (a.zero.stage < 1 || !a.groups.reducer(sched::axis::dp) || a.zero.shard.empty()) return nullptr;
  auto z = std::make_shared<zero_shard>();
  z->pieces = a.zero.shard;
  return z;
}

// `zero`: the ZeRO shard its strategies share (null: none).
void choose_strategies(stage_state& st, const std::shared_ptr<zero_shard>& zero) {
  const stage_args& a = st.args;
  st.exec = is_asynchronous(a.device.queue) ? queued_executor(on_accelerator(st)) : inline_executor();
  st.reducer = zero                                ? zero_reduce(zero, a.zero.stage >= 2)
                : a.groups.reducer(sched::axis::dp) ? bucket_all_reduce()
                                                    : no_reduction();
  st.params = zero && a.zero.stage >= 3 ? zero_fetched_params(zero) : zero ? zero_gathered_params(zero) : own_params();
  st.batches_in = a.updates.dispenser ? dispensed_batches() : a.updates.commit ? committed_share() : fixed_share();
  const std::shared_ptr<tp_group>& tp = a.groups.member(sched::axis::tp);
  if (splits_logits(a.model.spec, tp_size(tp.get()))) {  // tensor parallelism: the vocabulary-parallel loss
    st.loss = [tp, features = output_features(a.model.spec)](const tensor& logits, const std::vector<int32_t>& targets,
                                                        float scale) {
      return vocab_parallel_cross_entropy(logits, targets, scale, features, *tp);
    };
  } else {
    st.loss = [](const tensor& logits, const std::vector<int32_t>& targets, float scale) {
      return cross_entropy(logits, targets, scale);
    };
  }
  st.reports_loss = tp_rank(tp.get()) == 0;
  // An accelerator's stage that runs model chunk 0 takes its inputs onto the device ahead.
  if (on_accelerator(st) && sched::stage_of(a.plan, 0) == a.stage) st.batches_in->inputs_onto(a.device.queue);
}

}  // namespace

bool needs_own_thread(const stage_args& args) {
  // A stage on an accelerator runs only what training_job.cpp's with_checked_devices allows.
  // Its tensor-parallel collectives wait inside its launches for the group's other members (the
  // first NCCL call for them all to join; the local engine's meeting every time), and ZeRO-3's
  // for each unit's gather, so with either it keeps a thread of its own: a scheduler thread held
  // there could be the one a partner needs to arrive.
  return !is_asynchronous(args.device.queue) || args.groups.member(sched::axis::tp) || args.groups.member(sched::axis::cp) ||
         args.zero.stage >= 3;
}

void set_up(self_ptr self, stage_args args) {
  auto& st = self->state;
  st.args = std::move(args);
  if (st.args.device.pin_cpu >= 0 && !is_asynchronous(st.args.device.queue)) {  // a scheduler thread is not the stage's to pin
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(st.args.device.pin_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: a hint, not a contract
  }
  rank_groups& g = st.args.groups;
  if (g.member(sched::axis::tp)) {  // the job's links hand out logged members (the watchdog reads them); a test's may be bare
    st.tp_clock = std::dynamic_pointer_cast<net::logged_tp_group>(g.member(sched::axis::tp));
    if (!st.tp_clock) st.tp_clock = std::make_shared<net::logged_tp_group>(g.member(sched::axis::tp));
    g.set(sched::axis::tp, st.tp_clock);
  }
  layer_list all = build_layers(st.args.model.spec, g.member(sched::axis::tp).get(), st.args.model.sequence_parallel,
                                {g.member(sched::axis::cp).get(), st.args.model.context_mode}, g.member(sched::axis::ep).get());
  // Runs first: taking a chunk's layers out of `all` leaves holes a later chunk's runs would read.
  std::vector<storage::value_run> stage_runs;  // the stage's chunks end to end
  std::vector<int64_t> chunk_at;
  int64_t at = 0;
  for (int c = 0; c < st.args.plan.virtual_stages; ++c) {
    const layer_range r = st.args.model.chunks.at(static_cast<size_t>(model_chunk_of(st, c)));
    st.chunk_runs.push_back(chunk_runs(all, r, 0));
    chunk_at.push_back(at);
    for (storage::value_run run : st.chunk_runs.back()) {  // the same runs, where the chunk sits in the stage
      run.local += at;
      stage_runs.push_back(run);
    }
    for (int64_t l = r.begin; l < r.end; ++l) at += all.at(static_cast<size_t>(l))->num_params();
  }
  launch(st, [&] {  // on a GPU, the initial values are copied in on the stage's own stream
    for (int c = 0; c < st.args.plan.virtual_stages; ++c) {
      const layer_range r = st.args.model.chunks.at(static_cast<size_t>(model_chunk_of(st, c)));
      st.chunks.push_back(std::make_shared<pipeline_chunk>(take_layers(all, r), r.begin, st.args.run.seed,
                                                           st.args.model.recompute, compute_device(st.args)));
      st.chunks.back()->stack().set_matmul_precision(st.args.model.matmul);
    }
  });
  st.args.buckets.resize(st.chunks.size());
  for (const auto& b : st.args.buckets) st.buckets_per_step += static_cast<int64_t>(b.size());
  const std::shared_ptr<zero_shard> zero = zero_shard_of(st.args);
  choose_strategies(st, zero);
  st.seqs_per_step = st.buckets_per_step * (zero ? 2 : 1);
  if (zero && st.args.zero.stage >= 2)  // a gradient unit per bucket (an expert bucket shares its layer's)
    for (size_t c = 0; c < st.chunks.size(); ++c) {
      zero->units.push_back(std::make_shared<const grad_units>(plan_grad_units(st.args.buckets[c])));
      st.chunks[c]->stack().split_grads(zero->units.back()->layers);
    }
  st.ready = sched::plan_ready_row(row(st), st.args.dispatch.policy == sched::dispatch_policy::ready ? st.args.dispatch.ready_stash : 0);
  st.last_weight_action.assign(st.chunks.size(), row(st).size());
  for (size_t i = 0; i < row(st).size(); ++i) {
    const sched::action& a = row(st)[i];
    if (a.kind == sched::op::backward || a.kind == sched::op::backward_weight)
      st.last_weight_action.at(static_cast<size_t>(a.chunk)) = i;
  }
  int64_t n = 0;
  for (auto& c : st.chunks) n += c->stack().num_params();
  if (st.args.checkpoints.resume) {  // the checkpoint's (or image's) values replace the initial ones before anyone sees them
    const resume_point& from = *st.args.checkpoints.resume;
    for (size_t c = 0; c < st.chunks.size(); ++c) {
      tensor& params = st.chunks[c]->stack().params();
      if (params.where().is_cpu()) {
        from.read("params", st.chunk_runs[c], params.data());
        continue;
      }
      // On a GPU, read on the host and copied in on the stage's stream (from pageable memory the
      // copy has taken the bytes when it returns).
      tensor saved = tensor::uninitialized({params.numel()});
      from.read("params", st.chunk_runs[c], saved.data());
      launch(st, [&] { ops_for(params.where()).copy_floats(f32_out(params), saved.data(), params.numel()); });
    }
    st.next_request = from.manifest.step;
  }
  st.shard_runs = zero ? shard_runs(zero->pieces, st.args.buckets, chunk_at, stage_runs) : stage_runs;
  st.stage_runs = stage_runs;
  tensor initial = st.params->initial(self, n);
  for (auto& c : st.chunks) c->account_to(st.args.device.memory);
  initial.freeze();
  if (n > 0 && st.args.checkpoints.resume) restore_shard(self, std::move(initial));
  else if (n > 0 && st.args.updates.host_gradients && !initial.where().is_cpu())
    // A parameter server keeps its copy on the host: the first values go there (waited for once, at the start).
    launch(st, [&] { self->send(st.args.partners.optimizer, params_msg{-1, 0, on_host(initial)}); });
  else if (n > 0) self->send(st.args.partners.optimizer, params_msg{-1, 0, std::move(initial)});
  st.waiting_for = "no step ordered";
  st.batches_in->request(self, 1);
}

}  // namespace troupe::stage_detail
