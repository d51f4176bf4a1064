# Sourced by the tests/cli/*.test.sh scripts: `check NAME EXPECTED_RC PATTERN -- command...` runs
# the command and records a failure in $fail unless it exits EXPECTED_RC and prints PATTERN.
fail=0
check() {
  local name=$1 want_rc=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want_rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $want_rc), output:"; echo "$out" | tail -5; fail=1
  else
    echo "ok   $name"
  fi
}
