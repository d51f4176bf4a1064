// spawn_tp_ledger (tp_ledger.hpp).
#include "actors/collective/tp_ledger.hpp"

#include <chrono>

#include "actors/messages.hpp"

namespace troupe {

namespace {

collective_log snapshot(const net::logged_tp_group& member, const std::string& group) {
  collective_log log;
  log.rank = member.rank();
  log.ranks = member.size();
  log.group = group;
  for (const net::tp_call& c : member.recent()) {
    collective_log_entry e;
    e.seq = c.seq;
    e.op = c.op;
    e.total = c.n;
    e.left = e.right = -1;
    e.state = c.failed ? "failed" : c.finished_at > 0 ? "done" : "inside the group, waiting for its peers";
    e.expected = c.n;
    e.received = c.finished_at > 0 && !c.failed ? c.n : 0;
    e.started_at = c.started_at;
    e.finished_at = c.finished_at;
    log.entries.push_back(std::move(e));
  }
  log.stamp(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  return log;
}

}  // namespace

caf::actor spawn_tp_ledger(caf::actor_system& sys, std::shared_ptr<net::logged_tp_group> member, std::string group) {
  return sys.spawn([member = std::move(member), group = std::move(group)]() -> caf::behavior {
    return {[member, group](const collective_dump_request&) { return snapshot(*member, group); }};
  });
}

}  // namespace troupe
