// The kinds of device memory troupe counts, shared by the runtime's allocator ledger
// (device_memory.hpp) and the planner's predictions (schedules/plan/memory_model.hpp), so a
// prediction is checked against a run by name. Header only, standard library only.
#pragma once

#include <cstddef>

namespace troupe {

enum class memory_kind { parameters, gradients, optimizer_state, activations, buffers };
inline constexpr size_t kMemoryKinds = 5;
inline constexpr memory_kind all_memory_kinds[kMemoryKinds] = {memory_kind::parameters, memory_kind::gradients,
                                                               memory_kind::optimizer_state,
                                                               memory_kind::activations, memory_kind::buffers};

inline const char* to_string(memory_kind k) {
  switch (k) {
    case memory_kind::parameters: return "parameters";
    case memory_kind::gradients: return "gradients";
    case memory_kind::optimizer_state: return "optimizer_state";
    case memory_kind::activations: return "activations";
    case memory_kind::buffers: return "buffers";
  }
  return "?";
}

}  // namespace troupe
