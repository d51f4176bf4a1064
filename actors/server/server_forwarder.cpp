// server_forwarder: process 0's stand-in for one slot's parameter server when the servers live in
// processes of their own (--servers). Process 0's stages are spawned before its job hub exists,
// so before any server process has joined; they get this actor as their slot's server. It does
// no work of its own: pushes are delegated (the server's answer goes straight to the stage), and
// what arrives before the server is known waits here, in arrival order.
#include <variant>

#include "actors/actors.hpp"

namespace troupe {

namespace {

struct forwarder_state {
  caf::actor target;
  // Before the target is known: initial parameters (no answer) and pushes (their promises).
  std::vector<std::variant<params_msg, std::pair<caf::response_promise, gradients_msg>>> waiting;
  static inline const char* name = "server_forwarder";
};

using self_ptr = caf::stateful_actor<forwarder_state>*;

caf::behavior server_forwarder(self_ptr self) {
  return {
      [self](server_target_atom, const caf::actor& target) {
        auto& s = self->state;
        s.target = target;
        for (auto& w : s.waiting) {
          if (auto* p = std::get_if<params_msg>(&w)) self->send(s.target, std::move(*p));
          else {
            auto& [promise, m] = std::get<1>(w);
            promise.delegate(s.target, std::move(m));
          }
        }
        s.waiting.clear();
      },
      [self](params_msg& m) {
        auto& s = self->state;
        if (s.target) self->send(s.target, std::move(m));
        else s.waiting.emplace_back(std::move(m));
      },
      [self](gradients_msg& m) -> caf::result<params_msg> {
        auto& s = self->state;
        if (s.target) {
          self->delegate(s.target, std::move(m));
          return caf::delegated<params_msg>{};
        }
        auto promise = self->make_response_promise();
        s.waiting.emplace_back(std::make_pair(promise, std::move(m)));
        return promise;
      },
  };
}

}  // namespace

caf::actor spawn_server_forwarder(caf::actor_system& sys) { return sys.spawn(server_forwarder); }

}  // namespace troupe
