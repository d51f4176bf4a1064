# Sourced by slow_link.test.sh and slow_link_named.test.sh (after $troupe and $tmp are set):
# `run NAME FLAGS...` trains 20 steps of a dp 2 job over 2 processes into $tmp/NAME (its log
# $tmp/NAME.log) and prints its training seconds; the test ends if the run fails.
run() {
  local name=$1; shift
  "$troupe" train --nodes 2 --dp 2 --max-steps 20 --epochs 1 --no-progress --out "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { echo "FAIL $name exited $?:"; tail -5 "$tmp/$name.log"; exit 1; }
  sed -n 's/.*done: 20 steps, .* samples\/s, \([0-9.]*\) s training.*/\1/p' "$tmp/$name.log"
}
