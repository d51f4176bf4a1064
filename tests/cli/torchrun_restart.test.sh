#!/usr/bin/env bash
# Under a launcher's restarts: torchrun --max-restarts 1 runs a dp 2 job as 2 processes with
# --resume auto; SIGKILL of process $3 (0: the one holding the coordinator, 1: the other) makes
# torchrun start both again, they continue from the latest checkpoint, and the final checkpoint
# is byte for byte the uninterrupted run's. Skipped (77) without a torchrun that starts.
# Usage: torchrun_restart.test.sh TROUPE PYTHON RANK
set -u
troupe=$1 python=$2 victim=$3
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "skip: no Fashion-MNIST"; exit 77; }
# Debian 12's torch 1.13 has torchrun, but it fails at start-up under Python 3.11 (its Std enum):
# the test needs one that starts (the PyPI PyTorch of scripts/setup.sh bench).
"$python" -m torch.distributed.run --nproc_per_node 1 --no_python /bin/true >/dev/null 2>&1 \
  || { echo "skip: no working torchrun (torch.distributed.run) in $python"; exit 77; }
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"
job=(train --dp 2 --hidden 64,64 --batch-size 64 --max-steps 40 --epochs 1 --eval-batches 1 --no-progress
     --checkpoint-every 5 --peer-timeout 5 --straggler 0:30 --secret-file "$dir/secret")
"$troupe" "${job[@]}" --nodes 2 --checkpoint-dir "$dir/whole" --out "$dir/whole-run" >"$dir/whole.log" 2>&1 \
  || { tail "$dir/whole.log"; echo "FAIL: the uninterrupted run failed"; exit 1; }
port=$(( 20000 + RANDOM % 20000 ))
"$python" -m torch.distributed.run --nproc_per_node 2 --max_restarts 1 --master_port "$port" --no_python \
  "$troupe" "${job[@]}" --checkpoint-dir "$dir/killed" --resume auto --out "$dir/killed-run" >"$dir/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -e "$dir/killed/latest" ] && break; sleep 0.02; done
at=$(cat "$dir/killed/latest" 2>/dev/null)
# torchrun's workers, oldest first: process 0 was started first.
pid=$(pgrep -f "^$troupe train --dp 2" | sort -n | sed -n "$((victim + 1))p")
[ -n "$pid" ] || { tail -20 "$dir/killed.log"; echo "FAIL: no process $victim"; exit 1; }
kill -KILL "$pid" || { echo "FAIL: process $victim (pid $pid) was not running"; exit 1; }
wait "$launcher"; rc=$?
[ "$rc" -eq 0 ] || { tail -30 "$dir/killed.log"; echo "FAIL: torchrun exited $rc"; exit 1; }
[ "$(grep -c "rank 0 of 2: model" "$dir/killed.log")" -ge 2 ] || { tail -30 "$dir/killed.log"; echo "FAIL: no restart"; exit 1; }
fail=0
for f in "$dir"/whole/step-00000040/rank-*.bin; do
  cmp -s "$f" "$dir/killed/step-00000040/$(basename "$f")" || { echo "FAIL: $(basename "$f") differs"; fail=1; }
done
[ "$fail" -eq 0 ] && echo "ok: process $victim killed after $at under torchrun; restarted from the latest checkpoint; final state byte-identical"
exit "$fail"
