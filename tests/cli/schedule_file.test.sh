#!/usr/bin/env bash
# Schedule files as a user meets them (cli/schedule_file.hpp). One part per ctest test:
#   round_trip  `troupe schedule --save` writes the golden text form of every builder, and
#               --schedule-file on it prints, draws and saves exactly what the builder did
#   trains      the hand-edited example trains with the losses of the named 1F1B, by flag and by
#               config key (and a changed seed is told apart, so the comparison can fail)
#   deadlock    a receive moved before its send is refused, exit 2, naming file, line, instruction
#   malformed   bad lines and counts are refused, exit 2, naming the file's line
#   contradict  flags or keys that disagree with the file are refused, exit 2
#   processes   over 2 processes it trains as in one; a worker whose file differs is refused
set -u
troupe=$1 part=$2 examples=$3 golden=$4
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
example=$examples/1f1b_pp2_m4_edited.schedule  # header on line 6, stage 0 on 7, stage 1 on 8

same() {  # same NAME FILE_A FILE_B
  if cmp -s "$2" "$3"; then echo "ok   $1"; else echo "FAIL $1:"; diff "$2" "$3" | head -5; fail=1; fi
}

# The losses of a run's metrics.jsonl, one a line.
losses() { grep -o '"loss": [-0-9.e]*' "$1/metrics.jsonl" | awk '{print $2}'; }

# Exit 0 when the two runs' losses agree to float rounding, step for step, and there are $3.
losses_agree() {
  paste <(losses "$1") <(losses "$2") | awk -v want="$3" '
    { n++; d = $1 - $2; if (d < 0) d = -d; m = $1 < 0 ? -$1 : $1; if (m < 1) m = 1; if (d > 1e-5 * m) bad = 1 }
    END { exit (bad || n != want) }'
}

train() {  # train OUT ARGS...: 5 steps of the default MLP, 2 stages
  local out=$1; shift
  "$troupe" train --max-steps 5 --eval-batches 1 --batch-size 64 --hidden 32,32 --out "$tmp/$out" --no-progress "$@" \
    >"$tmp/$out.log" 2>&1 || { echo "FAIL train $out:"; tail -5 "$tmp/$out.log"; fail=1; }
}

case $part in
round_trip)
  for spec in "gpipe 1 gpipe_p4_m8" "1f1b 1 1f1b_p4_m8" "interleaved 2 interleaved_1f1b_p4_m8_v2" "zb-h1 1 zb_h1_p4_m8"; do
    read -r name v gold <<<"$spec"
    d=$tmp/$name; mkdir -p "$d"
    "$troupe" schedule --schedule "$name" --pp 4 --micro-batches 8 --virtual-stages "$v" --save "$d/saved.schedule" \
      --svg "$d/a.svg" --trace "$d/a.json" >"$d/a.txt" 2>&1 || { echo "FAIL $name: troupe schedule"; fail=1; }
    grep -v '^#' "$d/saved.schedule" >"$d/saved.txt"
    same "$name: --save writes the golden text form" "$golden/$gold.txt" "$d/saved.txt"
    "$troupe" schedule --schedule-file "$d/saved.schedule" --svg "$d/b.svg" --trace "$d/b.json" \
      --save "$d/again.schedule" >"$d/b.txt" 2>&1 || { echo "FAIL $name: --schedule-file"; fail=1; }
    same "$name: same table and simulation from the file" "$d/a.txt" "$d/b.txt"
    same "$name: same SVG from the file" "$d/a.svg" "$d/b.svg"
    same "$name: same Chrome trace from the file" "$d/a.json" "$d/b.json"
    grep -v '^#' "$d/again.schedule" >"$d/again.txt"
    same "$name: saving the file's schedule again gives the same text" "$d/saved.txt" "$d/again.txt"
  done
  check "the example draws" 0 "bubble 20.0%, peak live activations 4 1" -- \
    "$troupe" schedule --schedule-file "$example"
  ;;
trains)
  [ -d /usr/share/datasets/fashion-mnist ] || { echo "skip: no Fashion-MNIST"; exit 77; }
  train named --pp 2 --schedule 1f1b --micro-batches 4
  train file --schedule-file "$example" --pp 2
  printf '[pipeline]\nschedule_file = "%s"\n' "$example" >"$tmp/job.toml"
  train key --config "$tmp/job.toml"
  train seed --schedule-file "$example" --seed 43
  grep -q "schedule 1f1b_edited P=2 M=4 v=1" "$tmp/file.log" || { echo "FAIL the log names the file's schedule"; fail=1; }
  for run in file key; do
    if losses_agree "$tmp/named" "$tmp/$run" 5; then echo "ok   $run: the losses of the named 1f1b"
    else echo "FAIL $run: losses differ from the named 1f1b:"; paste <(losses "$tmp/named") <(losses "$tmp/$run"); fail=1; fi
  done
  if losses_agree "$tmp/named" "$tmp/seed" 5; then echo "FAIL another seed gives the same losses: the check cannot fail"; fail=1
  else echo "ok   another seed is told apart"; fi
  ;;
deadlock)
  # Stage 0 waits for microbatch 0's gradient before sending its activation: neither stage can move.
  sed 's/^stage 0: F0 SA0>1 \(.*\) RG0<1 B0 /stage 0: F0 RG0<1 SA0>1 \1 B0 /' "$example" >"$tmp/dead.schedule"
  grep -q "^stage 0: F0 RG0<1 SA0>1 F1 SA1>1 F2 SA2>1 F3 SA3>1 B0 " "$tmp/dead.schedule" || { echo "FAIL sed"; exit 1; }
  want="dead.schedule:7: schedule refused: deadlock: stage 0 waits at action 1 \(RG0<1\), stage 1 waits at action 0 \(RA0<0\)"
  check "troupe schedule refuses it" 2 "$want" -- "$troupe" schedule --schedule-file "$tmp/dead.schedule"
  check "troupe train refuses it" 2 "--schedule-file: .*$want" -- \
    "$troupe" train --schedule-file "$tmp/dead.schedule" --out "$tmp/run"
  [ ! -e "$tmp/run" ] || { echo "FAIL train made an output folder before refusing"; fail=1; }
  # A receive with no send at all is named too.
  sed 's/ RA1<0 F1 / RA1<0 RA1<0 F1 /' "$example" >"$tmp/extra.schedule"
  check "an unmatched receive" 2 "extra.schedule:8: schedule refused: stage 1, action 5 \(RA1<0\): receive has no matching send" \
    -- "$troupe" schedule --schedule-file "$tmp/extra.schedule"
  ;;
malformed)
  sed 's/ B1 SG1>0 / Bx SG1>0 /' "$example" >"$tmp/bad_op.schedule"
  check "a bad action names its line" 2 "bad_op.schedule:8: .*\"Bx\"" -- "$troupe" schedule --schedule-file "$tmp/bad_op.schedule"
  check "and so does train" 2 "bad_op.schedule:8: .*\"Bx\"" -- \
    "$troupe" train --schedule-file "$tmp/bad_op.schedule" --out "$tmp/run"
  sed 's/stages=2/stages=two/' "$example" >"$tmp/bad_header.schedule"
  check "a bad header names its line" 2 "bad_header.schedule:6: bad number in \"stages=two\"" -- \
    "$troupe" schedule --schedule-file "$tmp/bad_header.schedule"
  sed 's/stages=2/stages=3/' "$example" >"$tmp/rows.schedule"
  check "a missing stage row" 2 "rows.schedule:8: expected 3 stage lines, got 2" -- \
    "$troupe" schedule --schedule-file "$tmp/rows.schedule"
  sed 's/microbatches=4/microbatches=80000000/' "$example" >"$tmp/huge.schedule"
  check "a count out of range" 2 "huge.schedule:6: microbatches: must be in 1..65536, got 80000000 \(as --micro-batches\)" -- \
    "$troupe" schedule --schedule-file "$tmp/huge.schedule"
  printf '# nothing but a comment\n\n' >"$tmp/empty.schedule"
  check "an empty file" 2 "empty.schedule:2: no schedule in the file" -- "$troupe" schedule --schedule-file "$tmp/empty.schedule"
  check "a missing file" 2 "schedule file $tmp/none.schedule: cannot open \\(No such file" -- \
    "$troupe" schedule --schedule-file "$tmp/none.schedule"
  ;;
contradict)
  check "--pp disagrees" 2 "--pp 4 contradicts the schedule in .*, which has 2 stages" -- \
    "$troupe" train --schedule-file "$example" --pp 4 --out "$tmp/run"
  check "--micro-batches disagrees" 2 "--micro-batches 8 contradicts the schedule in .*, which has 4 microbatches" -- \
    "$troupe" train --schedule-file "$example" --micro-batches 8 --out "$tmp/run"
  check "a name and a file" 2 "--schedule and --schedule-file both choose the schedule" -- \
    "$troupe" train --schedule-file "$example" --schedule gpipe --pp 2 --out "$tmp/run"
  check "the batch does not split into the file's microbatches" 2 \
    "--batch-size 130 is not divisible by the schedule file's 4 microbatches" -- \
    "$troupe" train --schedule-file "$example" --batch-size 130 --out "$tmp/run"
  printf '[pipeline]\nschedule_file = "%s"\nstages = 3\n' "$example" >"$tmp/stages.toml"
  check "a config key disagrees" 2 "stages.toml: pipeline.stages = 3 contradicts the schedule in pipeline.schedule_file of" -- \
    "$troupe" train --config "$tmp/stages.toml" --out "$tmp/run"
  printf '[pipeline]\nschedule_file = "%s"\nschedule = "gpipe"\n' "$example" >"$tmp/both.toml"
  check "a config names both" 2 "both.toml: pipeline.schedule and pipeline.schedule_file both choose" -- \
    "$troupe" train --config "$tmp/both.toml" --out "$tmp/run"
  sed 's/ R O$/ R/' "$example" >"$tmp/no_step.schedule"
  check "a stage without an optimizer step" 2 "has no optimizer step \(O\) on stage 0" -- \
    "$troupe" train --schedule-file "$tmp/no_step.schedule" --out "$tmp/run"
  check "troupe schedule: a builder flag with a file" 2 "--micro-batches cannot be given with --schedule-file" -- \
    "$troupe" schedule --schedule-file "$example" --micro-batches 4
  help=$("$troupe" train --help 2>&1)
  grep -q -- "--schedule-file" <<<"$help" || { echo "FAIL train --help lacks --schedule-file"; fail=1; }
  ;;
processes)
  [ -d /usr/share/datasets/fashion-mnist ] || { echo "skip: no Fashion-MNIST"; exit 77; }
  train one --schedule-file "$example"
  train two --schedule-file "$example" --nodes 2
  if losses_agree "$tmp/one" "$tmp/two" 5; then echo "ok   2 processes: the losses of one"
  else echo "FAIL 2 processes differ from one:"; paste <(losses "$tmp/one") <(losses "$tmp/two"); fail=1; fi
  # The same name over other instructions (stage 0 back to plain 1F1B): rank 0 must notice.
  sed 's/^stage 0: .*/stage 0: F0 SA0>1 F1 SA1>1 RG0<1 B0 F2 SA2>1 RG1<1 B1 F3 SA3>1 RG2<1 B2 RG3<1 B3 R O/' \
    "$example" >"$tmp/other.schedule"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  job=(--world-size 2 --master-addr 127.0.0.1 --master-port "$port" --max-steps 2 --eval-batches 1 --no-progress
       --peer-timeout 5)
  TROUPE_SECRET=s-0123456789abcdef timeout 60 "$troupe" train --rank 0 "${job[@]}" --schedule-file "$example" --out "$tmp/r0" \
    >"$tmp/r0.log" 2>&1 &
  rank0=$!
  for _ in $(seq 50); do grep -q "control gate on" "$tmp/r0.log" && break; sleep 0.2; done
  TROUPE_SECRET=s-0123456789abcdef timeout 60 "$troupe" worker --rank 1 "${job[@]}" --schedule-file "$tmp/other.schedule" \
    --out "$tmp/r1" >"$tmp/r1.log" 2>&1
  wait $rank0
  if grep -q "runs another configuration.*1f1b_edited#" "$tmp/r0.log" "$tmp/r1.log"; then
    echo "ok   a worker with another schedule file is refused at join"
  else echo "FAIL a worker with another schedule file was not refused:"; tail -3 "$tmp/r0.log" "$tmp/r1.log"; fail=1; fi
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
exit $fail
