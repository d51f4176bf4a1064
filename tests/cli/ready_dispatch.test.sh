#!/usr/bin/env bash
# Ready dispatch across processes (issue 40): a GPT over pp 4 as four processes with jitter on
# every rank, --dispatch ready, logs the same losses, digit for digit, as --dispatch fixed in one
# process without jitter; the log says how many actions ran out of their row's order, and
# timeline.svg outlines them and trace.json flags them.
# Usage: ready_dispatch.test.sh TROUPE
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf 'the quick brown fox jumps over the lazy dog.\n%.0s' {1..200} >"$dir/corpus.txt"
job=(train --model gpt --corpus "$dir/corpus.txt" --context 16 --channels 32 --heads 2 --blocks 4 --batch-size 16
     --pp 4 --micro-batches 8 --max-steps 6 --eval-batches 1 --no-progress --peer-timeout 20)
"$troupe" "${job[@]}" --out "$dir/fixed" >"$dir/fixed.log" 2>&1 || { cat "$dir/fixed.log"; echo "FAIL fixed"; exit 1; }
"$troupe" "${job[@]}" --nodes 4 --dispatch ready --ready-stash 1 --jitter 0:2 --jitter 1:2 --jitter 2:2 --jitter 3:2 \
  --out "$dir/ready" >"$dir/ready.log" 2>&1 || { tail -20 "$dir/ready.log"; echo "FAIL ready over 4 processes"; exit 1; }
a=$(grep -o '"loss": [0-9.e+-]*' "$dir/fixed/metrics.jsonl"); b=$(grep -o '"loss": [0-9.e+-]*' "$dir/ready/metrics.jsonl")
if [ "$(wc -l <<<"$a")" = 6 ] && [ "$a" = "$b" ]; then echo "ok   the same 6 losses, digit for digit"
else echo "FAIL losses differ:"; paste <(echo "$a") <(echo "$b"); fail=1; fi
grep -qE "ready dispatch: [1-9][0-9]* of [0-9]+ actions ran out of their row's order" "$dir/ready.log" \
  && echo "ok   $(grep -oE "ready dispatch: [0-9]+ of [0-9]+ actions[^;]*" "$dir/ready.log" | head -1)" \
  || { grep -i dispatch "$dir/ready.log"; echo "FAIL no count of the actions run out of order"; fail=1; }
grep -q 'class="action moved"' "$dir/ready/timeline.svg" && grep -q '"out_of_order":true' "$dir/ready/trace.json" \
  && echo "ok   the timeline outlines and the trace flags the actions run out of order" \
  || { echo "FAIL no moved action marked in timeline.svg or trace.json"; fail=1; }
grep -q 'class="action moved"' "$dir/fixed/timeline.svg" && { echo "FAIL fixed dispatch marked an action moved"; fail=1; }
exit $fail
