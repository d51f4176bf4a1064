// serve_over and remote_actor_over: a socket becomes a BASP scribe of this process's middleman.
#include "actors/process/middleman_link.hpp"

#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/network/multiplexer.hpp>
#include <caf/scoped_actor.hpp>

#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace troupe {

namespace {

// BASP keys published actors by port. No doorman exists, so this number names no real port; it
// only has to be the same on both ends of a connection.
constexpr uint16_t hub_port = 1;

caf::actor basp_broker(caf::actor_system& sys) {
  return sys.middleman().named_broker<caf::io::basp_broker>(caf::atom("BASP"));
}

}  // namespace

void serve_over(caf::actor_system& sys, net::socket_fd admitted, const caf::actor& whom) {
  auto scribe = sys.middleman().backend().new_scribe(admitted.release());
  caf::anon_send(basp_broker(sys), caf::publish_atom::value, std::move(scribe), hub_port,
                 caf::actor_cast<caf::strong_actor_ptr>(whom), std::set<std::string>{});
}

caf::actor remote_actor_over(caf::actor_system& sys, net::socket_fd upstream, std::chrono::milliseconds timeout) {
  auto scribe = sys.middleman().backend().new_scribe(upstream.release());
  caf::scoped_actor self{sys};
  caf::actor result;
  std::string error;
  self->request(basp_broker(sys), timeout, caf::connect_atom::value, std::move(scribe), hub_port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            result = caf::actor_cast<caf::actor>(std::move(ptr));
          },
          [&](caf::error& e) { error = sys.render(e); });
  if (!error.empty()) throw std::runtime_error("the middleman handshake with rank 0 failed: " + error);
  if (!result) throw std::runtime_error("rank 0 serves no job hub on this connection");
  return result;
}

struct middleman_drain::state {
  std::mutex mu;
  std::condition_variable cv;
  int watched = 0, ended = 0;
};

middleman_drain::middleman_drain() : state_(std::make_shared<state>()) {}

void middleman_drain::watch(const caf::actor& a) {
  if (!a) return;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    ++state_->watched;
  }
  caf::actor_cast<caf::abstract_actor*>(a)->attach_functor([st = state_] {
    std::lock_guard<std::mutex> lock(st->mu);
    ++st->ended;
    st->cv.notify_all();
  });
}

void middleman_drain::drain(caf::actor_system& sys) {
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [this] { return state_->ended == state_->watched; });
  }
  caf::scoped_actor self{sys};
  // Any request the broker answers in order will do; get_atom for no node answers (none, "", 0).
  self->request(basp_broker(sys), caf::infinite, caf::get_atom::value, caf::node_id{})
      .receive([](caf::node_id&, std::string&, uint16_t) {}, [](caf::error&) {});
}

}  // namespace troupe
