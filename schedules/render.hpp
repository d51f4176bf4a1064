// render: turns schedules and timelines into text for people and tools: a text table, an SVG
// timeline and Chrome trace JSON (chrome://tracing, Perfetto). They return strings and write
// no files; a timeline from the simulator and one measured from a real run draw the same way.
#pragma once

#include <string>

#include "schedules/schedule.hpp"
#include "schedules/timeline.hpp"

namespace troupe::sched {

// One row per stage, one column per position in the lists, cells padded so columns line up:
//   step     0      1      2   ...
//   stage 0  F0     SA0>1  F1  ...
// When mark_stage/mark_action name an action, that cell is shown as "[F3]" (for a runtime
// failure or a validate() error, print the grid with the failing action marked).
std::string render_text(const schedule& s, int mark_stage = -1, int mark_action = -1);

// An SVG document: one lane per stage, one <rect class="action"> per non-communication action
// (forward blue, backward orange, backward_input red, backward_weight green, reduce purple,
// optimizer brown, fetch/release grey), labelled when wide enough, and a time axis in seconds.
// Sends and receive waits are not drawn: the gaps in a lane are the bubble.
std::string render_svg(const timeline& t);

// Chrome trace JSON: {"traceEvents":[...]} with one "M" process_name event per stage and one
// complete ("X") event per action (receives show their wait, sends are zero-length), with
// pid = tid = stage, ts and dur in microseconds, cat = the op name, and args holding the
// microbatch, chunk and peer.
std::string render_chrome_trace(const timeline& t);

// Text safe inside XML/HTML element content and double-quoted attributes (& < > ").
std::string xml_escape(const std::string& text);

}  // namespace troupe::sched
