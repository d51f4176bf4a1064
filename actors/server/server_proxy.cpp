// server_proxy: one slot's parameters over several param_servers, each holding a key range.
// The stages see one server: the proxy cuts each push into the ranges, sends each piece to its
// server, and answers once every server answered, with the pieces joined. Each server keeps its
// own consistency (an SSP server holds its piece back, and with it the whole answer), and its
// own records.
#include <map>

#include "actors/actor_failure.hpp"
#include "actors/actors.hpp"

namespace troupe {

namespace {

struct joining {
  caf::response_promise reply;
  tensor params;
  int left = 0;
};

struct proxy_state {
  std::vector<caf::actor> servers;
  std::vector<int64_t> starts;  // range k: [starts[k], starts[k + 1])
  bool initialized = false;
  std::map<std::pair<int32_t, int64_t>, joining> pending;  // by (replica, step)
  static inline const char* name = "server_proxy";
};

using self_ptr = caf::stateful_actor<proxy_state>*;

tensor piece(const tensor& whole, int64_t begin, int64_t end) {
  tensor out = tensor::uninitialized({end - begin});
  std::copy(std::as_const(whole).data() + begin, std::as_const(whole).data() + end, out.data());
  out.freeze();
  return out;
}

caf::behavior server_proxy(self_ptr self, std::vector<caf::actor> servers, std::vector<int64_t> starts) {
  self->state.servers = std::move(servers);
  self->state.starts = std::move(starts);
  name_failures(self, [] { return std::make_pair(std::string("a parameter server proxy"), int64_t{-1}); });
  return {
      [self](const params_msg& m) {  // every replica's initial values are the same: the first is handed on
        auto& s = self->state;
        if (s.initialized) return;
        s.initialized = true;
        for (size_t k = 0; k < s.servers.size(); ++k)
          self->send(s.servers[k], params_msg{m.step, 0, piece(m.params, s.starts[k], s.starts[k + 1])});
      },
      [self](gradients_msg& m) -> caf::result<params_msg> {
        auto& s = self->state;
        const auto key = std::make_pair(m.replica, m.step);
        joining& j = s.pending[key];
        j.reply = self->make_response_promise();
        j.params = tensor::uninitialized({s.starts.back()});
        j.left = static_cast<int>(s.servers.size());
        for (size_t k = 0; k < s.servers.size(); ++k) {
          const int64_t at = s.starts[k];
          self->request(s.servers[k], caf::infinite,
                        gradients_msg{m.step, 0, piece(m.grads, at, s.starts[k + 1]), m.replica, m.unit, m.next_round, m.fresh})
              .then(
                  [self, key, at](const params_msg& p) {
                    auto& s = self->state;
                    auto it = s.pending.find(key);
                    if (it == s.pending.end()) return;  // another range's server failed: the push was answered with that
                    joining& j = it->second;
                    std::copy(std::as_const(p.params).data(), std::as_const(p.params).data() + p.params.numel(),
                              j.params.data() + at);
                    if (--j.left > 0) return;
                    j.params.freeze();
                    j.reply.deliver(params_msg{key.second, 0, std::move(j.params)});
                    s.pending.erase(key);
                  },
                  [self, key](caf::error& e) {
                    auto& s = self->state;
                    auto it = s.pending.find(key);
                    if (it == s.pending.end()) return;
                    it->second.reply.deliver(std::move(e));
                    s.pending.erase(it);
                  });
        }
        return j.reply;
      },
  };
}

}  // namespace

caf::actor spawn_server_proxy(caf::actor_system& sys, std::vector<caf::actor> servers, std::vector<int64_t> starts) {
  return sys.spawn(server_proxy, std::move(servers), std::move(starts));
}

}  // namespace troupe
