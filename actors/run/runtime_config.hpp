// How every troupe actor system is configured: message types registered, and CAF's scheduler
// set up for a runtime whose compute lives on detached actors. One place, so the single-device,
// data-parallel, pipeline and multi-process jobs all run on the same settings.
#pragma once

#include <caf/actor_system_config.hpp>

namespace troupe {

void configure_runtime(caf::actor_system_config& cfg);

}  // namespace troupe
