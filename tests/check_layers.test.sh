#!/usr/bin/env bash
# The include-direction check (scripts/check_layers.py) passes on the tree, and fails, naming the
# file, on a copy of the tree with one upward include added: one between the top layers
# (kernels including actors) and one inside actors/ (a stage including the runner).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check="$root/scripts/check_layers.py"
python3 "$check" "$root"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
expect_refused() {  # $1: file to edit (relative), $2: the include it gets
  rm -rf "$tmp/tree" && mkdir -p "$tmp/tree"
  for d in kernels storage schedules comm actors stress cli examples bench; do cp -r "$root/$d" "$tmp/tree/"; done
  printf '#include "%s"\n' "$2" >> "$tmp/tree/$1"
  if out=$(python3 "$check" "$tmp/tree"); then
    echo "FAIL: the check passed with $1 including $2"; exit 1
  fi
  grep -qF "$1: includes $2, a layer above its own" <<<"$out" || { echo "FAIL: not named: $out"; exit 1; }
  echo "refused as it should: $1 -> $2"
}
expect_refused kernels/tensor.hpp actors/messages.hpp
expect_refused actors/stage/stage.cpp actors/job/training_job.hpp
echo "check_layers: passes on the tree, refuses both upward includes"
