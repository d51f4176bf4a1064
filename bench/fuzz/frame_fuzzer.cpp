// libFuzzer target for the wire frame decoder (comm/wire_frame.hpp). Half of the inputs get
// their CRC fixed up before decoding, so mutations reach the Cap'n Proto body and the chunk
// checks instead of all stopping at the checksum; decoded chunks also go through the assembler.
// It deliberately asserts nothing beyond "no crash, no sanitizer report": every input must
// come back as a value or an error.
#include <zlib.h>

#include <cstring>
#include <vector>

#include "comm/wire_frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool fix_crc = data[0] & 1;
  std::vector<uint8_t> f(data + 1, data + size);
  if (fix_crc && f.size() >= troupe::wire::header_bytes) {
    const uint32_t crc = static_cast<uint32_t>(
        crc32_z(0, f.data() + troupe::wire::header_bytes, f.size() - troupe::wire::header_bytes));
    std::memcpy(f.data() + 12, &crc, 4);
  }
  troupe::wire::limits lim;
  lim.max_frame_bytes = 64 << 10;  // small limits keep the fuzzer fast and still exercise them
  lim.max_tensor_bytes = 1 << 20;
  auto r = troupe::wire::decode_frame(f.data(), f.size(), lim);
  if (r.ok()) {
    troupe::wire::tensor_assembler a(lim);
    if (!a.add(std::move(*r.value)) && a.complete()) a.take();
  }
  return 0;
}
