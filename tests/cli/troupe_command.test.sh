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
check "info names the GPUs --device can use, or why there are none" 0 "^gpus: ([0-9]+ \(cuda:0 |none \()" -- "$troupe" info
check "info names what reduces data-parallel groups on GPUs" 0 "^gpu data-parallel groups: (nccl \(|through the host \(troupe was built without CUDA\))" -- "$troupe" info
check "info names what sums tensor-parallel groups on GPUs" 0 "^gpu tensor-parallel groups: (nccl \(|none \(troupe was built without CUDA\))" -- "$troupe" info
check "info names the mesh's rank order with cp" 0 "^mesh rank order: tp innermost, then pp, cp, dp" -- "$troupe" info
check "info says what of context parallelism and of experts is built" 0 "^mixture of experts \(--experts\): CPU ranks" -- "$troupe" info
check "info names how GPU pipeline stages reach other processes" 0 "^gpu pipeline stages in other processes: (nccl send/recv|pinned host copies)" -- "$troupe" info
check "a bad --device exits 2 naming it" 2 "--device: a device is cpu, cpu:K, cuda or cuda:N .*got \"gpu\"" -- \
  "$troupe" train --device gpu
check "--device cuda with --tp over several processes without --backend nccl is refused before any device opens" 2 \
  "device cuda:0: tensor parallelism on GPUs over 2 processes .* give --backend nccl" -- \
  "$troupe" train --model gpt --device cuda --tp 2 --nodes 2 --max-steps 1
# One exit code for bad input, whoever finds it (CLI11, the table of tunables, the config reader).
check "no subcommand exits 2" 2 "subcommand" -- "$troupe"
check "unknown flag exits 2 with a pointer to --help" 2 "--bogus.*troupe train --help" -- "$troupe" train --bogus
check "bad model exits 2 naming the choices" 2 "--model: must be one of mlp, gpt" -- "$troupe" train --model cnn
check "negative lr exits 2 naming the range" 2 "--lr: must be a finite number in \(0, 100\], got -1" -- "$troupe" train --lr -1
check "bad hidden list" 2 "hidden" -- "$troupe" train --hidden 256,abc --out "$tmp/a"
check "not a number exits 2" 2 "--epochs: expected an integer, got \"five\"" -- "$troupe" train --epochs five
printf '[train]\nepochs = 2\nbogus = 1\n' > "$tmp/bad.toml"
check "unknown config key" 2 "train.bogus: unknown key" -- "$troupe" train --config "$tmp/bad.toml"
printf '[mesh]\ndp = 2\npp = 2\ntp = 2\n[pipeline]\nmicro_batches = 2\n[train]\nmax_steps = 2\neval_batches = 1\n' > "$tmp/mesh.toml"
check "the [mesh] table holds dp, pp and tp" 0 "mesh dp2\.pp2\.tp2 \(8 ranks" -- \
  "$troupe" train --config "$tmp/mesh.toml" --no-progress --out "$tmp/mesh"
printf '[mesh]\ndp = 2\n[data_parallel]\nranks = 2\n' > "$tmp/twice.toml"
check "dp in [mesh] and in [data_parallel] is refused" 2 "mesh.dp: gives data_parallel.ranks a second time|data_parallel.ranks: gives data_parallel.ranks a second time" -- \
  "$troupe" train --config "$tmp/twice.toml"
check "missing config file exits 2" 2 "File does not exist" -- "$troupe" train --config "$tmp/none.toml"
out=$("$troupe" train --threads 0 2>&1)
grep -q 1797693 <<<"$out" && { echo "FAIL a range error prints DBL_MAX: $out"; fail=1; }
mkdir -p "$tmp/keep" && echo '{"step": 0}' > "$tmp/keep/metrics.jsonl" && echo precious > "$tmp/keep/notes.txt"
# Values that used to be accepted, truncated or ignored are refused (exit 2), into a folder whose
# metrics must survive.
k=(--out "$tmp/keep" --max-steps 1 --eval-batches 1 --no-progress)
hw=$(getconf _NPROCESSORS_ONLN)
check "--threads 4294967297 is refused, not run as 1 thread" 2 "--threads: must be in 1\.\.[0-9]+, got 4294967297" -- \
  "$troupe" train --threads 4294967297 "${k[@]}"
check "--threads above 2 x hardware threads is refused" 2 "--threads: must be in 1\.\.[0-9]+, got $((2 * hw + 1)) \(2 x this machine" -- \
  "$troupe" train --threads $((2 * hw + 1)) "${k[@]}"
check "--tp that does not split the heads is refused before the job" 2 "model.heads \(4\) must be divisible by tp \(3\)" -- \
  "$troupe" train --model gpt --tp 3 "${k[@]}"
check "--tp larger than a hidden layer is refused" 2 "model.hidden \(2\) is smaller than tp \(4\)" -- \
  "$troupe" train --hidden 2 --tp 4 "${k[@]}"
check "--sequence-parallel without --tp is refused" 2 "sequence parallelism .* needs --tp 2 or more" -- \
  "$troupe" train --model gpt --sequence-parallel "${k[@]}"
check "--sequence-parallel on the mlp is refused" 2 "the mlp has none" -- "$troupe" train --tp 2 --sequence-parallel "${k[@]}"
check "--cp on the mlp is refused" 2 "context parallelism \(cp 2\) splits sequences: model.kind \"mlp\" has none" -- \
  "$troupe" train --cp 2 "${k[@]}"
check "--cp whose 2 x cp chunks do not divide the context is refused" 2 "model.context 6 must split into 2 x cp = 4 equal chunks" -- \
  "$troupe" train --model gpt --context 6 --cp 2 "${k[@]}"
check "--cp with ZeRO-3 is refused" 2 "context parallelism \(cp 2\) with ZeRO-3" -- "$troupe" train --model gpt --cp 2 --zero 3 "${k[@]}"
check "--cp with parameter servers is refused" 2 "parameter servers \(--consistency\) take none" -- \
  "$troupe" train --model gpt --cp 2 --consistency bsp "${k[@]}"
check "--experts on the mlp is refused" 2 "model.experts replaces a GPT block's MLP; the mlp has no blocks" -- \
  "$troupe" train --experts 4 "${k[@]}"
check "--experts 1 is refused" 2 "model.experts must be 0 \(dense\) or at least 2, got 1" -- \
  "$troupe" train --model gpt --experts 1 "${k[@]}"
check "--top-k above --experts is refused" 2 "model.top_k must be between 1 and model.experts \(4\), got 5" -- \
  "$troupe" train --model gpt --experts 4 --top-k 5 "${k[@]}"
check "--experts with --tp is refused" 2 "model.experts with tp 2: an MoE block holds its experts and attention whole" -- \
  "$troupe" train --model gpt --experts 4 --tp 2 "${k[@]}"
check "--moe-every beyond the blocks is refused" 2 "model.moe_every must be between 1 and model.blocks \(4\), got 9" -- \
  "$troupe" train --model gpt --experts 4 --moe-every 9 "${k[@]}"
check "--experts on a GPU is refused before any device opens" 2 "a mixture of experts \(--experts 4\) runs on the CPU only so far" -- \
  "$troupe" train --model gpt --experts 4 --device cuda "${k[@]}"
check "--seed -1 is refused, not wrapped" 2 "--seed: must be >= 0, got -1" -- "$troupe" train --seed -1 "${k[@]}"
check "--peer-timeout 1e300 is refused" 2 "--peer-timeout: must be a finite number in \[1, 86400\], got 1e\+300" -- \
  "$troupe" train --peer-timeout 1e300 "${k[@]}"
check "--peer-timeout 0.0001 is refused (a 0 ms handshake)" 2 "--peer-timeout: must be .*got 0.0001" -- \
  "$troupe" train --peer-timeout 0.0001 "${k[@]}"
check "--bucket-mb nan is refused" 2 "--bucket-mb: must be a finite number" -- "$troupe" train --bucket-mb nan "${k[@]}"
check "--watchdog-seconds inf is refused" 2 "--watchdog-seconds: must be a finite number" -- \
  "$troupe" train --watchdog-seconds inf "${k[@]}"
check "--hidden '' is refused, not a linear model" 2 "--hidden: expected a comma-separated list" -- \
  "$troupe" train --hidden "" "${k[@]}"
check "--cuts without --pp is refused" 2 "--cuts needs a pipeline" -- "$troupe" train --cuts 3 "${k[@]}"
check "--micro-batches without --pp is refused" 2 "--micro-batches needs a pipeline" -- \
  "$troupe" train --micro-batches 2 "${k[@]}"
check "--schedule without --pp is refused" 2 "--schedule needs a pipeline" -- "$troupe" train --schedule gpipe "${k[@]}"
check "--virtual-stages outside interleaved is refused" 2 "--virtual-stages .* interleaved only" -- \
  "$troupe" train --pp 2 --virtual-stages 2 --hidden 64,64 "${k[@]}"
check "--zero 4 is refused" 2 "--zero: must be in 0\.\.3, got 4" -- "$troupe" train --zero 4 "${k[@]}"
check "--zero 3 trains" 0 "peak device memory of a rank .*zero 3" -- "$troupe" train --dp 2 --zero 3 --prefetch 2 \
  --bucket-mb 0.3 --max-steps 2 --eval-batches 1 --no-progress --out "$tmp/zero3"
check "--offload optimizer without ZeRO is refused" 2 "offloading the optimizer needs zero 1, 2 or 3" -- \
  "$troupe" train --dp 2 --offload optimizer "${k[@]}"
check "--offload params without --zero 3 is refused" 2 "offloading parameters \(offload params\) needs zero 3" -- \
  "$troupe" train --dp 2 --zero 2 --offload params "${k[@]}"
check "--offload-to nvme without --offload-dir is refused" 2 "needs offload_dir \(--offload-dir\)" -- \
  "$troupe" train --dp 2 --zero 2 --offload optimizer --offload-to nvme "${k[@]}"
check "--offload-dir that does not exist is refused" 2 "offload_dir \"$tmp/none\" is not an existing folder" -- \
  "$troupe" train --dp 2 --zero 2 --offload optimizer --offload-to nvme --offload-dir "$tmp/none" "${k[@]}"
check "--aio-block-size 1000 is refused" 2 "block_size must be a positive multiple of 4096" -- \
  "$troupe" train --dp 2 --zero 2 --offload optimizer --offload-to nvme --offload-dir "$tmp" --aio-block-size 1000 "${k[@]}"
check "--device-memory lots is refused" 2 "--device-memory: a size must be a number of bytes" -- \
  "$troupe" train --device-memory lots "${k[@]}"
check "a plan over --device-memory is refused before it starts, with the numbers" 2 \
  "does not fit --device-memory 1.00 MiB: rank 0 needs [0-9.]+ MiB for its model states alone at zero 0 \(parameters" -- \
  "$troupe" train --dp 2 --device-memory 1MiB "${k[@]}"
check "--zero 2 with NVMe offload trains" 0 "peak device memory of a rank .*zero 2.*optimizer_state 0 B" -- \
  "$troupe" train --dp 2 --zero 2 --offload optimizer --offload-to nvme --offload-dir "$tmp" --max-steps 2 \
  --eval-batches 1 --no-progress --out "$tmp/nvme"
check "--master-port 70000 is refused" 2 "--master-port: must be in 1\.\.65535, got 70000" -- \
  "$troupe" train --master-port 70000 "${k[@]}"
for bad in "train:threads = 4294967297:train.threads: must be in 1" \
           "data_parallel:ranks = 4294967298:data_parallel.ranks: must be in 1..256, got 4294967298" \
           "process:master_port = 70000:process.master_port: must be in 1..65535, got 70000" \
           "data_parallel:bucket_mb = nan:data_parallel.bucket_mb: must be a finite number" \
           "pipeline:watchdog_seconds = inf:pipeline.watchdog_seconds: must be a finite number" \
           "process:peer_timeout = 0.0001:process.peer_timeout: must be a finite number in \[1, 86400\]" \
           "pipeline:micro_batches = 2:pipeline.micro_batches needs a pipeline"; do
  IFS=: read -r table line want <<<"$bad"
  printf '[%s]\n%s\n' "$table" "$line" > "$tmp/range.toml"
  check "config $table: $line is refused" 2 "$want" -- "$troupe" train --config "$tmp/range.toml" "${k[@]}"
done
# A checkpoint folder that cannot be written is refused before training, not at the first save.
check "an unusable --checkpoint-dir is refused before training" 2 "checkpoint-dir /proc/troupe-ckpt: cannot create it" -- \
  timeout 60 "$troupe" train --checkpoint-dir /proc/troupe-ckpt --checkpoint-every 1000 --max-steps 2 --out "$tmp/ckptdir" --no-progress
# 9e10 parameters: no machine this runs on holds their model states; refused before any allocation.
check "a model that cannot fit this machine is refused before training" 2 "the model cannot fit this machine: rank 0 needs" -- \
  timeout 60 "$troupe" train --hidden 300000,300000 --max-steps 1 --out "$tmp/huge" --no-progress
check "--version" 0 "^troupe [0-9]+\.[0-9]+\.[0-9]+" -- "$troupe" --version
check "--zero 1 without --dp says it partitions nothing" 0 "with --dp 1 each rank holds all of it" -- \
  timeout 120 "$troupe" train --zero 1 --hidden 8 --max-steps 2 --out "$tmp/zero1" --no-progress
check "a resumed run says where it resumed and how many steps it ran" 0 \
  "resumed from .*step-00000004: steps 4 to 5.*done: 6 steps \(2 in this run, resumed at step 4\)" -- bash -c \
  "'$troupe' train --hidden 8 --max-steps 4 --checkpoint-dir '$tmp/ck' --out '$tmp/r1' --no-progress > /dev/null 2>&1 &&
   '$troupe' train --hidden 8 --max-steps 6 --checkpoint-dir '$tmp/ck' --resume latest --out '$tmp/r2' --no-progress 2>&1 | tr '\\n' ' '"
check "missing dataset names the file (bad input: exit 2)" 2 "/nonexistent/train-images-idx3-ubyte.gz" -- \
  "$troupe" train --fashion-mnist /nonexistent --out "$tmp/keep" --no-progress
grep -q precious "$tmp/keep/notes.txt" && grep -q '"step": 0' "$tmp/keep/metrics.jsonl" \
  || { echo "FAIL a refused run changed the output folder"; fail=1; }
# A finished run in the same folder keeps the earlier metrics beside the new ones.
if [ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  check "short run" 0 "done: 2 steps" -- "$troupe" train --max-steps 2 --eval-batches 1 --out "$tmp/keep" --no-progress
  grep -q '"step": 0}' "$tmp/keep/metrics.jsonl.1" || { echo "FAIL the previous metrics were not kept"; fail=1; }
  [ "$(grep -c '"loss"' "$tmp/keep/metrics.jsonl")" = 2 ] || { echo "FAIL new metrics.jsonl lacks 2 step lines"; fail=1; }
fi
# [process] master_addr and master_port in a config file are used (they were ignored: --nodes took
# any free port, and a launcher without MASTER_ADDR was refused as if no address were given).
port=$((20000 + RANDOM % 20000))
printf '[process]\nmaster_addr = "127.0.0.1"\nmaster_port = %s\npeer_timeout = 5\n[model]\nhidden = [32]\n' "$port" > "$tmp/proc.toml"
check "config master_port is the --nodes gate's port" 0 "control gate on 127.0.0.1:$port" -- \
  "$troupe" train --config "$tmp/proc.toml" --nodes 2 --batch-size 64 --max-steps 2 --eval-batches 1 --no-progress --out "$tmp/p"
check "config master_addr serves a launcher without MASTER_ADDR" 124 "control gate on 127.0.0.1:$((port + 1))" -- \
  env -u MASTER_ADDR -u MASTER_PORT RANK=0 WORLD_SIZE=2 TROUPE_SECRET=s-0123456789abcdef timeout 4 "$troupe" train --config "$tmp/proc.toml" \
  --master-port $((port + 1)) --max-steps 1 --no-progress --out "$tmp/q"
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
