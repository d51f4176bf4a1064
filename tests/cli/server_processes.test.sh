#!/usr/bin/env bash
# Parameter servers in processes of their own (--servers K, issue 13): the flag is refused by name
# without --consistency, or with more server processes than servers; a server process stopped
# (SIGSTOP) or killed (SIGKILL; its pid from the launcher's log) ends the job with exit 1 naming
# it (silent past the peer timeout, or lost), and no process of the job is left; --kill-server still kills a server that lives in a server process,
# and the report names the server and its process (server 1 is dealt to process 3 of 2 + 2).
# Usage: server_processes.test.sh TROUPE
set -u
troupe=$1
here=$(dirname "$0")
# shellcheck source=check_lib.sh
. "$here/check_lib.sh"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
small=(--hidden 32 --batch-size 64 --eval-batches 1 --no-progress --peer-timeout 3)

check "servers need a consistency model" 2 "--servers 2 starts processes of parameter servers: give --consistency" -- \
  "$troupe" train --nodes 2 --servers 2 "${small[@]}" --max-steps 2 --out "$dir/refused1"
check "more server processes than servers" 2 "--servers 2: the job has 1 parameter servers" -- \
  "$troupe" train --nodes 2 --dp 2 --servers 2 --consistency bsp "${small[@]}" --max-steps 2 --out "$dir/refused2"

# The first server process stopped (SIGSTOP: silent, named once the peer timeout of 3 s passed)
# or killed (SIGKILL: its connection closes) while the job trains (ASP, twenty epochs: it is still
# training when the signal comes).
for how in STOP KILL; do
  "$troupe" train --nodes 2 --dp 2 --servers 2 --server-shards 2 --consistency asp "${small[@]}" --max-steps 100000 \
    --epochs 20 --out "$dir/$how" >"$dir/$how.log" 2>&1 &
  job=$!
  for _ in $(seq 500); do grep -q "parameter server processes" "$dir/$how.log" 2>/dev/null && [ -s "$dir/$how/metrics.jsonl" ] && break; sleep 0.02; done
  line=$(grep -o "started parameter server processes 2..3 on this machine (pids [0-9, ]*)" "$dir/$how.log")
  servers=$(sed 's/.*pids //; s/)//; s/,//g' <<<"$line")
  workers=$(grep -o "started ranks 1..1 on this machine (pids [0-9]*)" "$dir/$how.log" | sed 's/.*pids //; s/)//')
  if [ -z "$servers" ] || [ -z "$workers" ]; then
    tail "$dir/$how.log"; echo "FAIL $how: no pids in the launcher's log"; fail=1; kill -KILL "$job"; continue
  fi
  victim=${servers%% *}
  sleep 0.5
  kill -"$how" "$victim"
  wait "$job"; rc=$?
  left=""
  for p in $servers $workers; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
  want="parameter server process 2 lost: its connection closed"
  [ "$how" = STOP ] && want="parameter server process 2 stopped answering \(silent for [0-9.]* s, peer timeout 3\.0 s\)"
  if [ "$rc" -ne 1 ]; then echo "FAIL $how: exit $rc, want 1"; tail "$dir/$how.log"; fail=1
  elif ! grep -qE "troupe train: job stopped during step [0-9]+: $want" "$dir/$how.log"; then
    echo "FAIL $how: the report does not say \"$want\""; tail "$dir/$how.log"; fail=1
  elif [ -n "$left" ]; then echo "FAIL $how: processes left:$left"; fail=1
  else echo "ok   SIG$how of server process 2 (pid $victim): exit 1, named, no process left"; fi
  for p in $left; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
done

# --kill-server: server 1 (stage 0's second key range), in server process 3, dies after 5 updates.
check "--kill-server in a server process" 1 \
  "parameter server process 3's server stopped: .*parameter server 1 killed \(fault injection\) after 5 updates" -- \
  "$troupe" train --nodes 2 --dp 2 --servers 2 --server-shards 2 --consistency bsp --kill-server 1:5 "${small[@]}" \
  --max-steps 20 --out "$dir/inject"

# A parameter-server job says what its servers do (issue 37): the model and where they run at the
# start; the staleness reached, within SSP's bound, and the held answers at the end; and no
# all-reduce figure, nor a device busier than 100% of the time.
"$troupe" train --nodes 2 --dp 2 --servers 1 --consistency ssp --staleness 1 "${small[@]}" --max-steps 10 \
  --out "$dir/logs" >"$dir/logs.log" 2>&1 || { tail "$dir/logs.log"; echo "FAIL the ssp job with a server process"; fail=1; }
if ! grep -q "parameter servers: ssp: a replica's parameters may miss at most the last 1 rounds' updates.*1 server .* in a process of their own, no all-reduce" "$dir/logs.log" ||
   ! grep -qE "parameter servers: 20 pushes applied by 1 server; .* up to [01] rounds? ahead of the rounds complete \(bound 1\); [0-9]+ answers? held back" "$dir/logs.log" ||
   grep -q "all-reduce time hidden" "$dir/logs.log" ||
   ! grep -qE "busy ([0-9]|[1-9][0-9]|100)% of the training time" "$dir/logs.log"; then
  grep -E "parameter servers|busy|hidden" "$dir/logs.log"; echo "FAIL the servers' log lines"; fail=1
else echo "ok   an ssp job logs its servers, a staleness within the bound and its held answers, no all-reduce"; fi
exit "$fail"
