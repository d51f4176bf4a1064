#!/bin/sh
# export_loads.test.sh TROUPE PYTHON DIR: a GPT trained 2 steps over pp 2 x tp 2 with a
# checkpoint, exported by `troupe export`, loads into PyTorch's module of the same model by name
# and shape (the tp shards and pipeline stages merged back into the unsplit tensors).
set -e
troupe=$1 python=$2 dir=$3
here=$(dirname "$0")
rm -rf "$dir" && mkdir -p "$dir"
"$troupe" train --model gpt --blocks 2 --channels 16 --heads 2 --context 16 --batch-size 8 --max-steps 2 --epochs 1 \
  --pp 2 --tp 2 --micro-batches 2 --eval-batches 1 --no-progress \
  --checkpoint-dir "$dir/ckpt" --out "$dir/run"
"$troupe" export "$dir/ckpt" "$dir/model.safetensors"
# A missing checkpoint is refused by name, and nothing is written.
if "$troupe" export "$dir/nothing" "$dir/none.safetensors" >"$dir/err" 2>&1; then echo "export of a missing checkpoint succeeded"; exit 1; fi
grep -q "nothing" "$dir/err" || { cat "$dir/err"; exit 1; }
[ ! -e "$dir/none.safetensors" ] || { echo "a refused export wrote a file"; exit 1; }
exec "$python" "$here/load_export.py" "$dir/model.safetensors"
