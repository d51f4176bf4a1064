// stage_pipeline: a stage's traffic with the other stages of its pipeline. What a chunk sends
// waits in an outbox for its send action; what arrives waits in the inbox for its receive.
#include <fmt/format.h>

#include <utility>

#include "actors/stage/stage_state.hpp"

namespace troupe::stage_detail {

std::vector<std::string> pipeline_ledger::lines(double now) const {
  std::vector<std::string> out;
  for (const entry& e : entries) {
    std::string l = fmt::format("{} the {} of microbatch {} across boundary {} {} stage {} ({} elements), {:.1f} ms ago",
                                e.sent ? "sent" : "received", e.is_grad ? "gradient" : "activation", e.microbatch,
                                e.boundary, e.sent ? "to" : "from", e.peer, e.elements, 1e3 * (now - e.at));
    if (e.waited > 0) l += fmt::format(", after the stage waited {:.1f} ms for it", 1e3 * e.waited);
    out.push_back(std::move(l));
  }
  return out;
}

void note_arrival(stage_state& s, const pipeline_tensor_msg& m) {
  // Boundary b lies between model chunks b and b + 1: activations come from b's stage, gradients from b + 1's.
  const int32_t from_stage = sched::stage_of(s.args.plan, m.is_grad ? m.boundary + 1 : m.boundary);
  pipeline_ledger& log = s.pipe_log;
  const double now = now_seconds();
  const bool awaited = log.waiting_key_step == m.step && log.waiting_is_grad == m.is_grad &&
                       log.waiting_microbatch == m.microbatch && log.waiting_boundary == m.boundary;
  log.add({false, m.is_grad, m.microbatch, m.boundary, from_stage, m.value.numel(), now,
           awaited ? now - log.waiting_since : 0});
  if (awaited) log.waiting_key_step = -1;
}

tensor take(stage_state& s, std::map<slot, tensor>& from, slot key, const std::string& what) {
  auto it = from.find(key);
  if (it == from.end()) refuse(s, "no " + what + " for microbatch " + std::to_string(key.first) + " on chunk " +
                                      std::to_string(key.second) + " (the schedule never delivered it here)");
  tensor t = std::move(it->second);
  from.erase(it);
  return t;
}

bool receive(stage_state& s, const sched::action& a, bool is_grad) {
  const sched::message_key key = sched::key_of(s.args.plan, a);
  auto it = s.inbox.find({s.step, is_grad, a.microbatch, key.boundary});
  if (it == s.inbox.end()) {
    pipeline_ledger& log = s.pipe_log;
    if (log.waiting_key_step != s.step || log.waiting_is_grad != is_grad || log.waiting_microbatch != a.microbatch ||
        log.waiting_boundary != key.boundary) {
      log.waiting_key_step = s.step;
      log.waiting_is_grad = is_grad;
      log.waiting_microbatch = a.microbatch;
      log.waiting_boundary = key.boundary;
      log.waiting_since = now_seconds();
    }
    s.waiting_for = std::string(is_grad ? "the gradient" : "the activation") + " of microbatch " +
                    std::to_string(a.microbatch) + " across boundary " + std::to_string(key.boundary) +
                    " from stage " + std::to_string(a.peer);
    return false;
  }
  (is_grad ? s.backward_in : s.forward_in)[{a.microbatch, a.chunk}] = std::move(it->second);
  s.inbox.erase(it);
  return true;
}

bool send(self_ptr self, const sched::action& a, bool is_grad) {
  auto& s = self->state;
  tensor t = take(s, is_grad ? s.grad_out : s.act_out, {a.microbatch, a.chunk},
                  is_grad ? "input gradient to send" : "output activation to send");
  if (!s.args.faults.drop_send.empty() && sched::to_string(a) == s.args.faults.drop_send) return true;  // the injected loss
  t.freeze();
  const int32_t boundary = sched::key_of(s.args.plan, a).boundary;
  const auto to = caf::actor_cast<caf::actor>(s.peers.at(static_cast<size_t>(a.peer)));
  pipeline_tensor_msg m{s.step, is_grad, a.microbatch, boundary, t};
  s.pipe_log.add({true, is_grad, a.microbatch, boundary, a.peer, t.numel(), now_seconds(), 0});
  const bool over_host = static_cast<size_t>(a.peer) < s.args.peer_over_host.size() &&
                         s.args.peer_over_host[static_cast<size_t>(a.peer)];
  // In the process, or to a device link's sending end, the tensor goes as it is: the action that
  // made it has completed (the cursor waited for that), so any stream may read it.
  if (t.where().is_cpu() || !over_host) {
    self->send(to, std::move(m));
    return true;
  }
  // The link between processes reads host memory: the value leaves the GPU as a pinned copy,
  // on the queue's copy stream, while the compute enqueued after it runs.
  s.args.device.queue->stage_out(t, [to, m = std::move(m)](tensor host) mutable {
    m.value = std::move(host);
    m.value.freeze();
    caf::anon_send(to, std::move(m));
  });
  return true;
}

}  // namespace troupe::stage_detail
