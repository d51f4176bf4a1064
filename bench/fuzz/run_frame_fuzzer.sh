#!/usr/bin/env bash
# Builds the wire frame fuzzer with clang (-fsanitize=fuzzer,address) outside CMake, seeds it
# from tests/comm/wire_corpus/ and runs it for a bounded time. A crash is copied into
# tests/comm/wire_corpus/ as crash-<sha1>, where WireFrame.FuzzCorpusDecodesToValueOrError
# replays it in ctest; fix the decoder, then commit the input. Not part of ctest.
#   bench/fuzz/run_frame_fuzzer.sh [SECONDS=60]      (needs clang and libclang-rt-14-dev)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
out=${TROUPE_FUZZ_DIR:-/tmp/troupe-fuzz}
mkdir -p "$out/gen/comm/wire" "$out/corpus" "$out/crashes"
capnp compile --src-prefix=. -oc++:"$out/gen" comm/wire/frame.capnp
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. -I"$out/gen" bench/fuzz/frame_fuzzer.cpp comm/wire_frame.cpp "$out/gen/comm/wire/frame.capnp.c++" \
  $(pkg-config --cflags --libs capnp libdeflate) -lz -o "$out/frame_fuzzer"
# The committed corpus holds frames, the fuzzer's inputs a flag byte first: 0x01 = fix the CRC.
for f in tests/comm/wire_corpus/*.bin; do
  [ -f "$f" ] || continue
  { printf '\x00'; cat "$f"; } > "$out/corpus/$(basename "$f").raw"
  { printf '\x01'; cat "$f"; } > "$out/corpus/$(basename "$f").fixed"
done
status=0
"$out/frame_fuzzer" "$out/corpus" -max_total_time="$seconds" -max_len=70000 -rss_limit_mb=1024 \
  -artifact_prefix="$out/crashes/" -print_final_stats=1 || status=$?
for c in "$out"/crashes/*; do
  [ -f "$c" ] || continue
  # Store the frame exactly as the decoder saw it: flag byte dropped, CRC fixed up if it asked.
  name=crash-$(sha1sum "$c" | cut -c1-12)
  python3 - "$c" "tests/comm/wire_corpus/$name.bin" <<'PY'
import struct, sys, zlib
raw = open(sys.argv[1], 'rb').read()
frame = bytearray(raw[1:])
if raw and raw[0] & 1 and len(frame) >= 16:
    frame[12:16] = struct.pack('<I', zlib.crc32(bytes(frame[16:])))
open(sys.argv[2], 'wb').write(bytes(frame))
PY
  echo "fuzz: crash input saved as tests/comm/wire_corpus/$name.bin"
done
exit $status
