// recompute_mode: what a pipeline chunk keeps between a microbatch's forward and backward
// (pipeline_chunk.hpp runs it), and what the planner prices (schedules/plan/memory_model.hpp):
// one enum, so a plan's choice is the runtime's. Header only, standard library only.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe {

// none: every activation; selective: all but the attention scores, recomputed in backward;
// full: each layer's input only, the layer's forward run again right before its backward.
enum class recompute_mode { none, selective, full };

// "none", "selective", "full"
inline const char* to_string(recompute_mode m) {
  switch (m) {
    case recompute_mode::none: return "none";
    case recompute_mode::selective: return "selective";
    case recompute_mode::full: return "full";
  }
  return "?";
}

// Throws std::invalid_argument naming the text and the choices.
inline recompute_mode parse_recompute_mode(const std::string& text) {
  for (recompute_mode m : {recompute_mode::none, recompute_mode::selective, recompute_mode::full})
    if (text == to_string(m)) return m;
  throw std::invalid_argument("recompute \"" + text + "\": expected none, selective or full");
}

}  // namespace troupe
