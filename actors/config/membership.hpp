// An elastic job's membership (issue 42): which data-parallel replicas take part, changed only at
// step boundaries. A change is an event: a replica lost (its process killed, its actors down) or
// one admitted. `--membership-events FILE` gives them in advance, so a run can be told the
// changes a real failure made and give the same losses bit for bit. No CAF.
//
// The text form, one event per line, '#' comments and blank lines ignored; it round-trips:
//   after step 4: lose replica 2
//   after step 9: admit a replica
// "after step S" is the boundary once S steps are done. A lost replica's place goes (the
// replicas after it move down one); an admitted one takes the next place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

enum class membership_change { lose, admit };

struct membership_event {
  int64_t step = 0;  // steps done when it takes effect
  membership_change change = membership_change::lose;
  int replica = -1;  // lose: the replica's place in the membership before the event; admit: -1
  bool operator==(const membership_event& o) const {
    return step == o.step && change == o.change && replica == o.replica;
  }
};

std::string to_string(const membership_event& e);  // "after step 4: lose replica 2"
std::string to_text(const std::vector<membership_event>& events);  // a line each
// Throws std::invalid_argument "<origin>:<line>: <problem>" for a malformed line or events out of
// step order.
std::vector<membership_event> parse_membership_events(const std::string& text, const std::string& origin);
std::vector<membership_event> read_membership_events(const std::string& path);  // the file's, parsed

// The replicas after each event, from `dp` at the start; throws std::invalid_argument naming the
// event when one loses a replica that is not there or leaves fewer than `min_replicas`.
std::vector<int> replicas_after(const std::vector<membership_event>& events, int dp, int min_replicas);

// The first step boundary after `from` steps at which the membership changes (-1: none left).
int64_t next_change(const std::vector<membership_event>& events, int64_t from);
// The events at boundary `step`, and the replicas after them from `dp`.
std::vector<membership_event> events_at(const std::vector<membership_event>& events, int64_t step);
int replicas_after(const std::vector<membership_event>& at, int dp);

}  // namespace troupe
