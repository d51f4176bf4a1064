# One include folder per layer target, so that an include pointing up fails the build.
#
# The sources name headers from the project's root ("actors/plan/job_plan.hpp"), so a target
# given the root could reach every header. Instead each layer target gets a folder of its own,
# under the build tree, holding links to just its own paths; linking a lower target adds that
# target's folder (PUBLIC), so a source sees its own layer and the layers it links, and a header
# of a layer above is "No such file". tests/ see the whole root; the layer order is DESIGN's.
#
#   troupe_layer_includes(<target> <path>...)   paths as the sources name them: "kernels",
#                                               "actors/plan", "actors/messages.hpp"
function(troupe_layer_includes target)
  set(view "${PROJECT_BINARY_DIR}/layers/${target}")
  # Made anew at each configure, so a path dropped from a layer leaves no stale link behind.
  file(REMOVE_RECURSE "${view}")
  foreach(path ${ARGN})
    if(NOT EXISTS "${PROJECT_SOURCE_DIR}/${path}")
      message(FATAL_ERROR "troupe_layer_includes(${target}): no ${path} in the source tree")
    endif()
    get_filename_component(parent "${view}/${path}" DIRECTORY)
    file(MAKE_DIRECTORY "${parent}")
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${path}" "${view}/${path}" SYMBOLIC)
  endforeach()
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_include_directories(${target} INTERFACE "${view}")
  else()
    target_include_directories(${target} PUBLIC "${view}")
  endif()
endfunction()
