#!/usr/bin/env bash
# troupe as an installed package (cmake/install.cmake): installs this build into a fresh prefix,
# builds examples/out_of_tree (its own project: find_package(troupe), troupe::actors) against it
# alone, runs it, and checks that it trains and prints the losses the same program built inside
# the tree prints. The work folder sits at a fixed place in the build so ccache hits on a rerun.
# usage: install_package.test.sh CMAKE BUILD_DIR SOURCE_DIR GENERATOR CXX IN_TREE_PROGRAM
set -u
cmake=$1 build=$2 source=$3 generator=$4 cxx=$5 in_tree=$6
source "$source/tests/cli/check_lib.sh"
work=$build/install_package_test
rm -rf "$work"; mkdir -p "$work"
prefix=$work/prefix

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { echo "FAIL install:"; tail "$work/install.log"; exit 1; }
for f in include/actors/run/training_job.hpp include/kernels/tensor.hpp include/schedules/schedule.hpp \
         include/comm/collective_backend.hpp include/storage/dataset.hpp bin/troupe \
         lib/cmake/troupe/troupeConfig.cmake lib/cmake/troupe/troupeConfigVersion.cmake \
         lib/cmake/troupe/troupeTargets.cmake lib/cmake/troupe/troupeDependencies.cmake; do
  [ -f "$prefix/$f" ] || { echo "FAIL not installed: $f"; fail=1; }
done
# troupe::actors is an interface over the actors/ layers, each its own library.
for layer in kernels storage schedules comm actors_config actors_plan actors_observe actor_roles actors_compose actors_run; do
  [ -f "$prefix/lib/libtroupe_$layer.a" ] || { echo "FAIL not installed: lib/libtroupe_$layer.a"; fail=1; }
done
# An installed package that points back into the tree it came from works only on this machine.
# (The prefix itself lies inside the build, so its own path is taken out first.)
if cat "$prefix"/lib/cmake/troupe/*.cmake | sed "s#$prefix##g" | grep -F -e "$source" -e "$build"; then echo "FAIL the package names the source or build tree"; fail=1
else echo "ok   the package names neither the source nor the build tree"; fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
app=$work/app
if ! "$cmake" -S "$source/examples/out_of_tree" -B "$app" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "${launcher[@]}" \
     >"$work/configure.log" 2>&1; then
  echo "FAIL configure the out-of-tree project:"; grep -v '^--' "$work/configure.log" | head -20; exit 1
fi
# Its headers must come from the prefix: -I into the source tree would hide a missing header.
includes=$(grep -oE -- '(-I|-isystem )[^ "]+' "$app/compile_commands.json")
if ! grep -qF "$prefix/include" <<<"$includes" || sed "s#$prefix##g" <<<"$includes" | grep -qF "$source"; then
  echo "FAIL the out-of-tree program should include troupe from $prefix/include alone:"; echo "$includes"; fail=1
else echo "ok   the out-of-tree program includes troupe from the prefix"; fi
"$cmake" --build "$app" >"$work/build.log" 2>&1 || { echo "FAIL build the out-of-tree project:"; tail -20 "$work/build.log"; exit 1; }

check "the installed build trains (its last loss below its first)" 0 "^step 4 loss [0-9.]+$" -- \
  "$app/troupe_app" "$work/run-installed"
"$app/troupe_app" "$work/run-installed" 2>&1 | grep '^step ' >"$work/installed.txt"
"$in_tree" "$work/run-in-tree" 2>&1 | grep '^step ' >"$work/in_tree.txt"
if [ "$(wc -l <"$work/installed.txt")" -eq 5 ] && cmp -s "$work/installed.txt" "$work/in_tree.txt"; then
  echo "ok   the same 5 losses as the program built in the tree"
else
  echo "FAIL installed vs in-tree losses:"; paste "$work/installed.txt" "$work/in_tree.txt"; fail=1
fi
[ "$fail" -eq 0 ] && rm -rf "$work"
exit $fail
