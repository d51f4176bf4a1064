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
# Issue 57, item 8: the secret, the TLS files, the membership events and a checkpoint's `latest`
# and manifest go through the same reader.
export TROUPE_SECRET=0123456789abcdef-special-inputs
check "a FIFO as --secret-file" 2 "--secret-file $tmp/fifo: not a regular file \(a FIFO\)" -- \
  timeout 20 "$troupe" worker --rank 1 --world-size 2 --master-addr 127.0.0.1 --secret-file "$tmp/fifo" "${small[@]}"
check "/dev/zero as --secret-file" 2 "--secret-file /dev/zero: not a regular file \(a character device\)" -- \
  timeout 20 "$troupe" worker --rank 1 --world-size 2 --master-addr 127.0.0.1 --secret-file /dev/zero "${small[@]}"
check "a FIFO as --tls-cert" 2 "--tls-cert $tmp/fifo: not a regular file \(a FIFO\)" -- \
  timeout 20 "$troupe" train --nodes 2 "${small[@]}" --tls-cert "$tmp/fifo" --tls-key "$tmp/fifo" --tls-ca "$tmp/fifo"
check "an oversized --tls-cert" 2 "--tls-cert $tmp/big.toml: 17.0 MiB, over the 1.0 MiB" -- \
  timeout 20 "$troupe" train --nodes 2 "${small[@]}" --tls-cert "$tmp/big.toml" --tls-key "$tmp/fifo" --tls-ca "$tmp/fifo"
check "a FIFO as --membership-events" 2 "--membership-events $tmp/fifo: not a regular file \(a FIFO\)" -- \
  timeout 20 "$troupe" train --dp 2 --elastic --membership-events "$tmp/fifo" "${small[@]}"
check "/dev/zero as --membership-events" 2 "--membership-events /dev/zero: not a regular file \(a character device\)" -- \
  timeout 20 "$troupe" train --dp 2 --elastic --membership-events /dev/zero "${small[@]}"
mkdir -p "$tmp/ck1" "$tmp/ck2/step-2"
mkfifo "$tmp/ck1/latest"
ln -s /dev/zero "$tmp/ck2/step-2/manifest.capnp"
check "a FIFO as a checkpoint's latest" 2 "checkpoint $tmp/ck1/latest: not a regular file \(a FIFO\)" -- \
  timeout 20 "$troupe" export "$tmp/ck1" "$tmp/out.safetensors"
check "/dev/zero as a checkpoint's manifest" 2 "checkpoint manifest $tmp/ck2/step-2/manifest.capnp: not a regular file \(a character device\)" -- \
  timeout 20 "$troupe" export "$tmp/ck2/step-2" "$tmp/out.safetensors"
exit $fail
