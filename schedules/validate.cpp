// validate: static operand and matching checks, then a symbolic dry run of every stage.
// The dry run tracks which tensors exist (stashed activations, received inputs and gradients,
// messages in flight, which parameters are fetched), never their values or how long anything
// takes.
#include "schedules/validate.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace troupe::sched {

namespace {

// Held fetches (ZeRO-3 residency): (chunk, microbatch or -1) -> index of its fetch_params.
using fetch_map = std::map<std::pair<int, int>, std::size_t>;

struct stage_state {
  std::size_t cursor = 0;
  std::vector<bool> forwarded, input_done, weight_done;  // indexed [chunk * M + microbatch]
  std::vector<int> inputs_received, grads_received;      // received, not yet consumed
  std::vector<bool> uses_fetch;                          // per chunk: any fetch_params of it
  fetch_map fetched;
  bool has_reduce = false, reduced = false;
  int live = 0;
};

class dry_run {
 public:
  dry_run(const schedule& s, std::optional<int> bound) : s_(s), bound_(bound) {
    const std::size_t units = static_cast<std::size_t>(s.num_microbatches * s.virtual_stages);
    const std::size_t chunks = static_cast<std::size_t>(s.virtual_stages);
    states_.resize(s.stages.size());
    for (std::size_t d = 0; d < s.stages.size(); ++d) {
      stage_state& st = states_[d];
      st.forwarded.assign(units, false);
      st.input_done.assign(units, false);
      st.weight_done.assign(units, false);
      st.inputs_received.assign(units, 0);
      st.grads_received.assign(units, 0);
      st.uses_fetch.assign(chunks, false);
      for (const action& a : s.stages[d]) {
        if (a.kind == op::fetch_params) st.uses_fetch[static_cast<std::size_t>(a.chunk)] = true;
        if (a.kind == op::reduce_grads) st.has_reduce = true;
        if (a.kind == op::backward || a.kind == op::backward_weight) has_backward_ = true;
      }
    }
    result_.peak_live_activations.assign(s.stages.size(), 0);
    result_.peak_fetched.assign(s.stages.size(), 0);
  }

  validation run() {
    bool progress = true;
    while (progress && result_.ok()) {
      progress = false;
      for (std::size_t d = 0; d < states_.size() && result_.ok(); ++d) {
        while (states_[d].cursor < s_.stages[d].size() && result_.ok() && step(d))
          progress = true;
      }
    }
    if (result_.ok()) check_finished();
    return result_;
  }

 private:
  // Runs the action at stage d's cursor; false when it blocks on a receive (or failed).
  bool step(std::size_t d) {
    stage_state& st = states_[d];
    const action& a = s_.stages[d][st.cursor];
    const std::size_t u = unit(a.microbatch, a.chunk);
    const int k = model_chunk(s_, a.stage, a.chunk);
    // Built only on failure: validate also runs inside every simulate() of a large plan.
    auto what = [&a] {
      return " of microbatch " + std::to_string(a.microbatch) + " on chunk " +
             std::to_string(a.chunk);
    };
    if (reads_weights(a.kind) && st.uses_fetch[static_cast<std::size_t>(a.chunk)] &&
        covering_fetch(st, a.chunk, a.microbatch) == st.fetched.end())
      return fail(d, to_string(a.kind) + what() + " while the chunk's parameters are not fetched");
    switch (a.kind) {
      case op::forward:
        if (st.forwarded[u]) return fail(d, "forward" + what() + " repeated");
        if (!take_input(st, a, k, /*grad=*/false))
          return fail(d, "forward" + what() + " before its input arrived");
        st.forwarded[u] = true;
        result_.peak_live_activations[d] = std::max(result_.peak_live_activations[d], ++st.live);
        if (bound_ && st.live > *bound_)
          return fail(d, std::to_string(st.live) + " live activations exceed the bound of " +
                             std::to_string(*bound_));
        break;
      case op::backward:
      case op::backward_input:
        if (!st.forwarded[u]) return fail(d, "backward" + what() + " before its forward");
        if (st.input_done[u]) return fail(d, "backward" + what() + " repeated");
        if (!take_input(st, a, k, /*grad=*/true))
          return fail(d, "backward" + what() + " before its gradient arrived");
        st.input_done[u] = true;
        if (a.kind == op::backward) free_activation(st, u);
        break;
      case op::backward_weight:
        if (!st.input_done[u]) return fail(d, "backward_weight" + what() + " before its backward_input");
        if (st.weight_done[u]) return fail(d, "backward_weight" + what() + " repeated");
        free_activation(st, u);
        break;
      case op::send_act:
        if (!st.forwarded[u]) return fail(d, "send of the activation" + what() + " before its forward");
        ++in_flight_[key_of(s_, a)];
        break;
      case op::send_grad:
        if (!st.input_done[u]) return fail(d, "send of the gradient" + what() + " before its backward");
        ++in_flight_[key_of(s_, a)];
        break;
      case op::recv_act:
      case op::recv_grad: {
        int& waiting = in_flight_[key_of(s_, a)];
        if (waiting == 0) return false;  // blocked: the matching send has not run yet
        --waiting;
        ++(a.kind == op::recv_act ? st.inputs_received : st.grads_received)[u];
        break;
      }
      case op::reduce_grads:
        if (!all_weights_done(st)) return fail(d, "reduce_grads before " + missing_weight(st));
        st.reduced = true;
        break;
      case op::optimizer_step:
        if (!all_weights_done(st)) return fail(d, "optimizer_step before " + missing_weight(st));
        if (st.has_reduce && !st.reduced) return fail(d, "optimizer_step before reduce_grads");
        break;
      case op::fetch_params: {
        const auto held = covering_fetch(st, a.chunk, a.microbatch);
        if (held != st.fetched.end())
          return fail(d, "fetch_params" + of_fetch(a) + " while action " + std::to_string(held->second) +
                             " (" + body_string(s_.stages[d][held->second]) +
                             ") holds them: fetched twice without a release");
        st.fetched.emplace(std::make_pair(a.chunk, a.microbatch), st.cursor);
        result_.peak_fetched[d] = std::max(result_.peak_fetched[d], static_cast<int>(st.fetched.size()));
        break;
      }
      case op::release_params:
        if (st.fetched.erase(std::make_pair(a.chunk, a.microbatch)) == 0)
          return fail(d, "release_params" + of_fetch(a) + " without a fetch");
        break;
    }
    ++st.cursor;
    return true;
  }

  // The input of a forward (grad=false) or the output gradient of a backward (grad=true):
  // nothing to wait for at the model's ends, a local result when the neighbouring chunk is on
  // this device, otherwise a received tensor (consumed here).
  bool take_input(stage_state& st, const action& a, int k, bool grad) {
    const int neighbour = grad ? k + 1 : k - 1;
    if (neighbour < 0 || neighbour >= num_model_chunks(s_)) return true;
    if (stage_of(s_, neighbour) == a.stage) {
      const std::size_t n = unit(a.microbatch, chunk_of(s_, neighbour));
      return grad ? st.input_done[n] : st.forwarded[n];
    }
    int& received = (grad ? st.grads_received : st.inputs_received)[unit(a.microbatch, a.chunk)];
    if (received == 0) return false;
    --received;
    return true;
  }

  // The held fetch of chunk c that covers microbatch m: one without a microbatch, or m's own;
  // for m == -1 any of the chunk's. fetched.end() when none.
  static fetch_map::const_iterator covering_fetch(const stage_state& st, int c, int m) {
    const auto end = st.fetched.end();
    if (m != -1) {
      const auto whole = st.fetched.find(std::make_pair(c, -1));
      return whole != end ? whole : st.fetched.find(std::make_pair(c, m));
    }
    const auto any = st.fetched.lower_bound(std::make_pair(c, -1));  // (c, -1) sorts first of c's
    return any != end && any->first.first == c ? any : end;
  }

  // " of microbatch 3 on chunk 1", or " of chunk 1" for a fetch/release without a microbatch.
  static std::string of_fetch(const action& a) {
    const std::string chunk = "chunk " + std::to_string(a.chunk);
    if (a.microbatch == -1) return " of " + chunk;
    return " of microbatch " + std::to_string(a.microbatch) + " on " + chunk;
  }

  void free_activation(stage_state& st, std::size_t u) {
    st.weight_done[u] = true;
    --st.live;
  }

  bool all_weights_done(const stage_state& st) const {
    for (bool done : st.weight_done) if (!done) return false;
    return true;
  }

  std::string missing_weight(const stage_state& st) const {
    for (std::size_t u = 0; u < st.weight_done.size(); ++u)
      if (!st.weight_done[u]) return "the weight gradient of " + describe_unit(u);
    return "?";
  }

  std::string describe_unit(std::size_t u) const {
    const int M = s_.num_microbatches;
    return "microbatch " + std::to_string(static_cast<int>(u) % M) + " on chunk " +
           std::to_string(static_cast<int>(u) / M);
  }

  std::size_t unit(int microbatch, int chunk) const {
    return static_cast<std::size_t>(chunk * s_.num_microbatches + microbatch);
  }

  bool fail(std::size_t d, const std::string& why) { return fail_at_action(d, states_[d].cursor, why); }

  bool fail_at_action(std::size_t d, std::size_t i, const std::string& why) {
    result_.stage = static_cast<int>(d);
    result_.action_index = static_cast<int>(i);
    result_.error = "stage " + std::to_string(d) + ", action " + std::to_string(i) + " (" +
                    body_string(s_.stages[d][i]) + "): " + why;
    return false;
  }

  void check_finished() {
    std::string waits;
    for (std::size_t d = 0; d < states_.size(); ++d) {
      const std::size_t i = states_[d].cursor;
      if (i == s_.stages[d].size()) continue;
      if (waits.empty()) {
        result_.stage = static_cast<int>(d);
        result_.action_index = static_cast<int>(i);
      }
      waits += std::string(waits.empty() ? "" : ", ") + "stage " + std::to_string(d) +
               " waits at action " + std::to_string(i) + " (" + body_string(s_.stages[d][i]) + ")";
    }
    if (!waits.empty()) {
      result_.error = "deadlock: " + waits;
      return;
    }
    for (std::size_t d = 0; d < states_.size(); ++d) {
      const stage_state& st = states_[d];
      for (std::size_t u = 0; u < st.forwarded.size(); ++u) {
        std::string why;
        if (!st.forwarded[u]) why = " is never forwarded";
        else if (has_backward_ && !st.weight_done[u]) why = " is never freed (no backward)";
        if (why.empty()) continue;
        result_.stage = static_cast<int>(d);
        result_.error = "stage " + std::to_string(d) + ": " + describe_unit(u) + why;
        return;
      }
    }
    for (std::size_t d = 0; d < states_.size(); ++d) {
      const auto& held = states_[d].fetched;
      if (held.empty()) continue;
      const auto first = std::min_element(held.begin(), held.end(), [](const auto& x, const auto& y) {
        return x.second < y.second;
      });
      const action& a = s_.stages[d][first->second];
      fail_at_action(d, first->second,
                     "parameters" + of_fetch(a) + " still fetched when the step ends (no release_params)");
      return;
    }
  }

  const schedule& s_;
  std::optional<int> bound_;
  std::vector<stage_state> states_;
  std::map<message_key, int> in_flight_;
  bool has_backward_ = false;
  validation result_;
};

validation fail_at(const schedule& s, std::size_t d, std::size_t i, const std::string& why) {
  validation v;
  v.stage = static_cast<int>(d);
  v.action_index = static_cast<int>(i);
  v.error = "stage " + std::to_string(d) + ", action " + std::to_string(i) + " (" +
            body_string(s.stages[d][i]) + "): " + why;
  return v;
}

std::string range(int lo, int hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

// Operand checks and send/recv matching, before anything is run.
validation check_static(const schedule& s) {
  std::map<message_key, int> sends, recvs, sends_seen, recvs_seen;
  for (const auto& list : s.stages)
    for (const action& a : list)
      if (is_communication(a.kind)) ++(is_send(a.kind) ? sends : recvs)[key_of(s, a)];
  for (std::size_t d = 0; d < s.stages.size(); ++d) {
    for (std::size_t i = 0; i < s.stages[d].size(); ++i) {
      const action& a = s.stages[d][i];
      if (a.stage != static_cast<int>(d))
        return fail_at(s, d, i, "action names stage " + std::to_string(a.stage));
      const bool mb_ok = needs_microbatch(a.kind) ? a.microbatch >= 0 : a.microbatch >= -1;
      if (!mb_ok || a.microbatch >= s.num_microbatches)
        return fail_at(s, d, i, "microbatch out of range " + range(0, s.num_microbatches));
      if (a.chunk < 0 || a.chunk >= s.virtual_stages)
        return fail_at(s, d, i, "chunk out of range " + range(0, s.virtual_stages));
      if (!is_communication(a.kind)) {
        if (a.peer != -1) return fail_at(s, d, i, "only sends and receives have a peer");
        continue;
      }
      const int expected = expected_peer(s, a);
      if (expected < 0) return fail_at(s, d, i, "no neighbouring chunk to exchange with");
      if (a.peer != expected)
        return fail_at(s, d, i, "peer must be stage " + std::to_string(expected) +
                                    ", which holds the neighbouring chunk");
      const message_key key = key_of(s, a);
      if (is_send(a.kind) && ++sends_seen[key] > recvs[key])
        return fail_at(s, d, i, "send has no matching receive");
      if (is_recv(a.kind) && ++recvs_seen[key] > sends[key])
        return fail_at(s, d, i, "receive has no matching send");
    }
  }
  return validation{};
}

}  // namespace

validation validate(const schedule& s, std::optional<int> max_live_activations) {
  validation v;
  if (s.num_stages < 1 || s.num_microbatches < 1 || s.virtual_stages < 1)
    v.error = "num_stages, num_microbatches and virtual_stages must be >= 1";
  else if (static_cast<int>(s.stages.size()) != s.num_stages)
    v.error = "schedule has " + std::to_string(s.stages.size()) + " stage lists for num_stages " +
              std::to_string(s.num_stages);
  if (!v.ok()) return v;
  v = check_static(s);
  if (!v.ok()) return v;
  return dry_run(s, max_live_activations).run();
}

}  // namespace troupe::sched
