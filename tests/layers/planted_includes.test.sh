#!/usr/bin/env bash
# Builds the planted sources of tests/layers/CMakeLists.txt in the project's build tree: each
# upward include fails with the compiler naming the header it cannot find; the downward one builds.
set -uo pipefail
cmake=$1 build=$2
refused() {  # $1: target, $2: the header above its layer
  if out=$("$cmake" --build "$build" --target "$1" 2>&1); then
    echo "FAIL: $1 built, though it includes $2 from a layer below"; exit 1
  fi
  grep -qF "$2: No such file" <<<"$out" || { echo "FAIL: $1 failed, but not on $2:"; echo "$out" | tail -20; exit 1; }
  echo "refused as it should: $1 ($2)"
}
refused layer_plant_plan_includes_run actors/run/training_job.hpp
refused layer_plant_stage_includes_compose actors/compose/mesh_links.hpp
refused layer_plant_kernels_includes_comm comm/tcp_socket.hpp
if ! out=$("$cmake" --build "$build" --target layer_plant_plan_includes_config 2>&1); then
  echo "FAIL: a downward include did not build:"; echo "$out" | tail -20; exit 1
fi
echo "built as it should: layer_plant_plan_includes_config"
