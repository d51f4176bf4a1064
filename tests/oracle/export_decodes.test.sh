#!/bin/sh
# export_decodes.test.sh TROUPE PYTHON DIR: a GPT trained over pp 2 x tp 2 on a small corpus,
# exported by `troupe export`, is used by PyTorch with nothing but the export and the corpus:
# its test loss equals the one troupe logged, and its greedy continuation, decoded with the
# exported characters, is the corpus's own text (decode_export.py).
set -e
troupe=$1 python=$2 dir=$3
here=$(dirname "$0")
"$python" -c "import torch" 2>/dev/null || { echo "skip: no PyTorch in $python"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir"
i=0
while [ $i -lt 120 ]; do printf 'the quick brown fox jumps over the lazy dog.\tpack my box with five dozen jugs!\n'; i=$((i + 1)); done >"$dir/corpus.txt"
"$troupe" train --model gpt --corpus "$dir/corpus.txt" --blocks 2 --channels 32 --heads 2 --context 16 --batch-size 16 \
  --max-steps 120 --lr 0.01 --pp 2 --tp 2 --micro-batches 2 --eval-batches 1 --no-progress \
  --checkpoint-dir "$dir/ckpt" --out "$dir/run"
"$troupe" export "$dir/ckpt" "$dir/model.safetensors"
exec "$python" "$here/decode_export.py" "$dir/model.safetensors" "$dir/corpus.txt" "$dir/run/metrics.jsonl" 1000
