// The watchdog's view of a tensor-parallel (or ZeRO-3 parameter) group member: such a group is
// called inside a stage's computation, so a stage wedged in one cannot answer for itself. This
// actor answers collective_dump_request from the member's logged_tp_group (comm/tp_groups.hpp),
// which the stage's thread writes as it enters and leaves each call, so the stall report shows
// which call of which group waits, and for how long, like the data-parallel members' entries.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>

#include "comm/tp_groups.hpp"

namespace troupe {

// `group` names the group in reports ("tp group 0 (ranks 0,1)").
caf::actor spawn_tp_ledger(caf::actor_system& sys, std::shared_ptr<net::logged_tp_group> member, std::string group);

}  // namespace troupe
