#!/usr/bin/env bash
# The `troupe` command as a user meets it: help lists every option, bad flags and bad configs are
# refused with a clear message and exit code 2, a bad dataset path exits 1 naming the file, and
# nothing already in the output folder is lost by a refused run.
set -u
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

help=$("$troupe" train --help 2>&1)
for opt in --config --model --hidden --optimizer --lr --weight-decay --momentum --epochs --batch-size --seed \
           --threads --out --max-steps --fashion-mnist --corpus --no-progress; do
  grep -q -- "$opt" <<<"$help" || { echo "FAIL train --help lacks $opt"; fail=1; }
done
check "top-level help lists train" 0 "train" -- "$troupe" --help
check "no subcommand is an error" 106 "subcommand" -- "$troupe"
check "unknown flag" 109 "--bogus" -- "$troupe" train --bogus
check "bad model" 105 "mlp|gpt" -- "$troupe" train --model cnn
check "negative lr" 105 "lr" -- "$troupe" train --lr -1
check "bad hidden list" 2 "hidden" -- "$troupe" train --hidden 256,abc --out "$tmp/a"
printf '[train]\nepochs = 2\nbogus = 1\n' > "$tmp/bad.toml"
check "unknown config key" 2 "train.bogus: unknown key" -- "$troupe" train --config "$tmp/bad.toml"
check "missing config file" 105 "File does not exist" -- "$troupe" train --config "$tmp/none.toml"
mkdir -p "$tmp/keep" && echo '{"step": 0}' > "$tmp/keep/metrics.jsonl" && echo precious > "$tmp/keep/notes.txt"
check "missing dataset names the file" 1 "/nonexistent/train-images-idx3-ubyte.gz" -- \
  "$troupe" train --fashion-mnist /nonexistent --out "$tmp/keep" --no-progress
grep -q precious "$tmp/keep/notes.txt" && grep -q '"step": 0' "$tmp/keep/metrics.jsonl" \
  || { echo "FAIL a refused run changed the output folder"; fail=1; }
# A finished run in the same folder keeps the earlier metrics beside the new ones.
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  check "short run" 0 "done: 2 steps" -- "$troupe" train --max-steps 2 --eval-batches 1 --out "$tmp/keep" --no-progress
  grep -q '"step": 0}' "$tmp/keep/metrics.jsonl.1" || { echo "FAIL the previous metrics were not kept"; fail=1; }
  [ "$(grep -c '"loss"' "$tmp/keep/metrics.jsonl")" = 2 ] || { echo "FAIL new metrics.jsonl lacks 2 step lines"; fail=1; }
fi
# Evaluation memory follows the job: a GPT at batch 16 used to evaluate 1000 sequences in one
# forward pass (2.5 GB peak; 0.1 GB now, in pieces of a training step's rows).
if [ -x /usr/bin/time ] && [ -e /usr/share/games/fortunes ]; then
  /usr/bin/time -f "peak_kb %M" -o "$tmp/rss" "$troupe" train --model gpt --batch-size 16 --max-steps 2 \
    --eval-batches 1 --no-progress --out "$tmp/gpt" >/dev/null 2>&1 || { echo "FAIL gpt run for peak RSS"; fail=1; }
  peak=$(awk '/peak_kb/ {print $2}' "$tmp/rss")
  if [ "${peak:-999999999}" -lt 500000 ]; then echo "ok   gpt evaluation peak RSS ${peak} kB < 500 MB"
  else echo "FAIL gpt evaluation peak RSS ${peak} kB, want < 500 MB"; fail=1; fi
fi
exit $fail
