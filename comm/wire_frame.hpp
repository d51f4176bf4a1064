// Wire frames: how a tensor crosses a process boundary as a sequence of bounded, checksummed
// Cap'n Proto messages, and the decoder that refuses anything malformed with an error instead of
// crashing or allocating what a length field claims. Pure C++ (no CAF, no sockets) so that a
// fuzzer can drive decode_frame directly. It deliberately does not do I/O: callers read the
// 16-byte header, check it with parse_header, then read body_bytes more and call decode_frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/dtype.hpp"

namespace troupe::wire {

// Frame layout, little-endian: magic u32 | version u16 | type u16 | body_bytes u32 | crc32 u32,
// then body_bytes of a flat Cap'n Proto message (a multiple of 8). crc32 is zlib's CRC-32 of the
// body: TCP's 16-bit checksum misses corruptions a 32-bit CRC catches. libdeflate computes the
// same value with carry-less multiplication, ~4x zlib 1.2.13's speed (which is about loopback's).
constexpr uint32_t frame_magic = 0x46505254;  // "TRPF"
constexpr uint16_t frame_version = 1;
constexpr size_t header_bytes = 16;
constexpr size_t default_max_frame_bytes = size_t{4} << 20;
constexpr size_t max_name_bytes = 256;
constexpr size_t max_rank = 16;
// Room reserved in each frame for the header and the Cap'n Proto fields around the chunk data
// (name and shape are bounded above, so this is a bound, not a guess).
constexpr size_t frame_overhead_bytes = 1024;

enum class frame_type : uint16_t { tensor_chunk = 1 };

enum class error_code {
  truncated,        // fewer bytes than the header or its body_bytes say
  bad_magic,
  bad_version,
  oversized,        // body_bytes or a tensor size over the configured limit
  bad_checksum,
  unknown_type,     // frame type not in frame_type
  malformed_body,   // Cap'n Proto refused the body, or a field is out of range
  bad_chunk,        // chunk index/count/offset inconsistent with the tensor so far
};
const char* to_string(error_code c);

struct error {
  error_code code;
  std::string message;  // names the field and the values, for the log
};

struct limits {
  size_t max_frame_bytes = default_max_frame_bytes;  // header + body; chunks are cut to fit
  uint64_t max_tensor_bytes = uint64_t{1} << 34;     // 16 GiB: an assembler never allocates more
};

struct header {
  frame_type type;
  uint32_t body_bytes;
  uint32_t crc32;
};

struct tensor_meta {
  uint64_t tensor_id = 0;
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
};

// Which tensor a chunk belongs to and where in it it goes.
struct chunk_info {
  tensor_meta meta;
  uint64_t total_bytes = 0;
  uint32_t index = 0;
  uint32_t count = 0;
  uint64_t offset = 0;
};

struct tensor_chunk : chunk_info {
  std::vector<uint8_t> data;
};

// Either a value or an error; the decoder never throws.
template <class T>
struct result {
  std::optional<T> value;
  std::optional<wire::error> err;
  bool ok() const { return value.has_value(); }
};

// A dtype's code in a frame (frame.capnp's dtype): f32 1, f16 2, bf16 3, i32 4, i64 5, u8 6.
// The codes are the format, older than kernels' numbering, and frames outlive a build (files,
// processes of another version): these two functions are the only map, never a cast.
uint8_t wire_code(dtype d);
// The dtype of a code; for any other code a malformed_body error naming it.
result<dtype> dtype_of_wire_code(uint8_t code);

// Checks magic, version, type and body_bytes against the limits (before the body is read or
// allocated). `bytes` must hold at least header_bytes.
result<header> parse_header(const uint8_t* bytes, size_t n, const limits& lim = {});

// Validates one complete frame (header + body, exactly n bytes) and decodes its chunk.
result<tensor_chunk> decode_frame(const uint8_t* bytes, size_t n, const limits& lim = {});

// A decoded chunk whose data points into the frame it came from (valid while that buffer is):
// a transport reading frames into word-aligned storage hands the payload on without a copy.
struct tensor_chunk_view : chunk_info {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
// decode_frame without the copies. `bytes` must be 8-byte aligned (Cap'n Proto reads the body in
// place); an unaligned buffer is a caller bug and throws std::invalid_argument. Input bytes,
// whatever they hold, come back as a value or an error, as from decode_frame.
result<tensor_chunk_view> decode_frame_view(const uint8_t* bytes, size_t n, const limits& lim = {});

// One frame in three pieces, so that a sender writes the caller's tensor bytes straight from
// where they are (writev) instead of copying them into a frame first: `head` holds the 16-byte
// header and the Cap'n Proto message up to the chunk's data, then come payload_bytes from
// `payload`, then pad_bytes zeros to the message's word boundary. The CRC covers all three.
struct frame_parts {
  std::vector<uint8_t> head;
  const uint8_t* payload = nullptr;
  size_t payload_bytes = 0;
  size_t pad_bytes = 0;  // 0..7
  size_t size() const { return head.size() + payload_bytes + pad_bytes; }
};

// Encodes a tensor's frames one at a time (a transport keeps one frame of a tensor in flight,
// not the whole tensor re-framed in memory). Keeps a scratch of max_frame_bytes for the message
// builder, reused for every frame, so it is meant to live as long as its sender.
class frame_encoder {
 public:
  explicit frame_encoder(limits lim = {});
  ~frame_encoder();
  frame_encoder(const frame_encoder&) = delete;
  frame_encoder& operator=(const frame_encoder&) = delete;
  // Frames a tensor of nbytes is cut into (1 for an empty tensor).
  uint32_t chunk_count(size_t nbytes) const;
  // Frame `index` of the tensor; `data` must stay valid while the parts are written. Throws
  // std::invalid_argument for a name, shape, size or index the decoder would refuse.
  frame_parts encode(const tensor_meta& meta, const void* data, size_t nbytes, uint32_t index);

 private:
  limits lim_;
  size_t payload_;
  std::vector<uint64_t> scratch_;  // Cap'n Proto words; only the part before the data is ever written
};

// Cuts a tensor into frames of at most lim.max_frame_bytes each, each frame contiguous (the
// frame_encoder's parts joined). Throws std::invalid_argument for a name, shape or size the
// decoder would refuse (a sender bug, not bad input).
std::vector<std::vector<uint8_t>> encode_tensor(const tensor_meta& meta, const void* data, size_t nbytes,
                                                const limits& lim = {});

// Throws std::invalid_argument, naming the problem, for a name, shape or byte count the decoder
// would refuse; what the encoders check before they write, for a sender that checks earlier.
void check_tensor(const tensor_meta& meta, size_t nbytes, const limits& lim = {});

// Payload bytes per chunk at this frame size (what encode_tensor uses).
size_t chunk_payload_bytes(const limits& lim);

// Reassembles the chunks of one tensor, which arrive in order. Refuses a chunk that does not
// continue the tensor (other id, meta, index, count or offset) and allocates total_bytes only
// after checking it against the shape and the limit.
class tensor_assembler {
 public:
  explicit tensor_assembler(limits lim = {}) : lim_(lim) {}
  // An error leaves the assembler empty, ready for the first chunk of a new tensor.
  std::optional<error> add(tensor_chunk&& c);
  // The same for a chunk still in its frame: its data is copied once, into the tensor.
  std::optional<error> add(const tensor_chunk_view& c);
  bool complete() const { return started_ && next_index_ == count_; }
  // The finished tensor's meta and bytes; valid once complete(). Resets the assembler.
  std::pair<tensor_meta, std::vector<uint8_t>> take();

 private:
  void reset();
  limits lim_;
  bool started_ = false;
  tensor_meta meta_;
  uint64_t total_bytes_ = 0;
  uint32_t count_ = 0;
  uint32_t next_index_ = 0;
  std::vector<uint8_t> bytes_;
};

}  // namespace troupe::wire
