// Schedules by name, as users write them ("gpipe", "1f1b", "interleaved", "zb-h1"): a closed enum
// of the built-in builders with a text form that round-trips, and the one function that turns a
// name into a complete, validated schedule. The CLI, the runtime and the tests all resolve
// names here; a user's own builder needs no name, it returns a schedule directly.
#pragma once

#include <optional>
#include <string>

#include "schedules/schedule.hpp"

namespace troupe::sched {

enum class builder { gpipe, one_f_one_b, interleaved, zb_h1 };

const char* to_string(builder b);             // "gpipe", "1f1b", "interleaved", "zb-h1"
std::optional<builder> parse_builder(const std::string& name);
std::string known_builders();                 // "gpipe, 1f1b, interleaved, zb-h1"

// The named builder, completed with communication and the optimizer step (passes.hpp), and
// validated. Throws std::invalid_argument with a message meant for users (unknown name, M not
// a multiple of P for interleaved, an invalid result).
schedule make_named_schedule(const std::string& name, int stages, int microbatches, int virtual_stages);

// The same step for ZeRO-3: add_param_fetches(make_named_schedule(...)), every forward,
// backward and backward_input bracketed by its parameter fetch and release, validated. Throws
// as make_named_schedule does.
schedule make_named_schedule_with_fetches(const std::string& name, int stages, int microbatches,
                                          int virtual_stages);

}  // namespace troupe::sched
