#!/usr/bin/env bash
# Every file troupe is given to read goes through storage/input_file.hpp: a FIFO, a device or an
# oversized file is refused at once, by name, with exit 2 (bad input); none blocks (each command
# runs under a 20 s timeout: 124 would be a hang), none reads without bound, and none trains on
# the defaults with exit 0 (as --config /dev/zero used to).
set -uo pipefail
troupe=$1
source "$(dirname "$0")/check_lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkfifo "$tmp/fifo"
truncate -s 17M "$tmp/big.toml"  # sparse: 17 MiB of zeros, over the 16 MiB a settings file may have
small=(--hidden 8 --max-steps 1 --out "$tmp/out")

check "a FIFO as --config" 2 "config $tmp/fifo: not a regular file \(a FIFO\)" -- timeout 20 "$troupe" train --config "$tmp/fifo" "${small[@]}"
check "/dev/zero as --config" 2 "config /dev/zero: not a regular file \(a character device\)" -- timeout 20 "$troupe" train --config /dev/zero "${small[@]}"
check "/dev/urandom as --config" 2 "config /dev/urandom: not a regular file \(a character device\)" -- timeout 20 "$troupe" train --config /dev/urandom "${small[@]}"
check "an oversized --config" 2 "config $tmp/big.toml: 17.0 MiB, over the 16.0 MiB a config may have" -- timeout 20 "$troupe" train --config "$tmp/big.toml" "${small[@]}"
check "a folder as --config" 2 "(config $tmp: not a regular file \(a folder\)|is actually a directory: $tmp)" -- timeout 20 "$troupe" train --config "$tmp" "${small[@]}"
check "a FIFO as --schedule-file" 2 "schedule file $tmp/fifo: not a regular file \(a FIFO\)" -- timeout 20 "$troupe" train --schedule-file "$tmp/fifo" "${small[@]}"
check "a FIFO as --corpus" 2 "data file $tmp/fifo: not a regular file \(a FIFO\)" -- timeout 20 "$troupe" train --model gpt --corpus "$tmp/fifo" --max-steps 1 --out "$tmp/out"
check "/dev/zero as --corpus" 2 "data file /dev/zero: not a regular file \(a character device\)" -- timeout 20 "$troupe" train --model gpt --corpus /dev/zero --max-steps 1 --out "$tmp/out"
check "a FIFO as a stress file" 2 "config $tmp/fifo: not a regular file \(a FIFO\)" -- timeout 20 "$troupe" stress "$tmp/fifo"
exit $fail
