// Wire frame encoder, decoder and in-order tensor reassembly. Every check happens before the
// corresponding allocation; Cap'n Proto exceptions are caught at this boundary and become
// malformed_body errors, so no input reaches the caller as an exception or a crash.
#include "comm/wire_frame.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>
#include <libdeflate.h>

#include <cstring>
#include <stdexcept>

#include "comm/wire/frame.capnp.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire frames are written in host order");

namespace troupe::wire {
namespace {

uint32_t crc_of(const uint8_t* p, size_t n) { return libdeflate_crc32(0, p, n); }

template <class T>
result<T> fail(error_code c, std::string msg) {
  result<T> r;
  r.err = error{c, std::move(msg)};
  return r;
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// total bytes of a tensor, or nullopt if a dimension is negative or the product overflows.
std::optional<uint64_t> tensor_bytes(const std::vector<int64_t>& shape, dtype d) {
  uint64_t n = size_of(d);
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    const auto u = static_cast<uint64_t>(dim);
    if (u != 0 && n > UINT64_MAX / u) return std::nullopt;
    n *= u;
  }
  return n;
}

bool same_meta(const tensor_meta& a, const tensor_meta& b) {
  return a.tensor_id == b.tensor_id && a.name == b.name && a.type == b.type && a.shape == b.shape;
}

}  // namespace

uint8_t wire_code(dtype d) {
  switch (d) {
    case dtype::f32: return 1;
    case dtype::f16: return 2;
    case dtype::bf16: return 3;
    case dtype::i32: return 4;
    case dtype::i64: return 5;
    case dtype::u8: return 6;
  }
  return 0;  // no dtype has it: decoders refuse it
}

result<dtype> dtype_of_wire_code(uint8_t code) {
  for (dtype d : all_dtypes)
    if (wire_code(d) == code) return {d, std::nullopt};
  return fail<dtype>(error_code::malformed_body, "dtype code " + std::to_string(code) +
                                                     " unknown (f32 1, f16 2, bf16 3, i32 4, i64 5, u8 6)");
}

const char* to_string(error_code c) {
  switch (c) {
    case error_code::truncated: return "truncated";
    case error_code::bad_magic: return "bad_magic";
    case error_code::bad_version: return "bad_version";
    case error_code::oversized: return "oversized";
    case error_code::bad_checksum: return "bad_checksum";
    case error_code::unknown_type: return "unknown_type";
    case error_code::malformed_body: return "malformed_body";
    case error_code::bad_chunk: return "bad_chunk";
  }
  return "unknown";
}

size_t chunk_payload_bytes(const limits& lim) {
  if (lim.max_frame_bytes < 2 * frame_overhead_bytes || lim.max_frame_bytes > (size_t{1} << 30))
    throw std::invalid_argument("wire: max_frame_bytes must be in [2 KiB, 1 GiB], got " +
                                std::to_string(lim.max_frame_bytes));
  return (lim.max_frame_bytes - frame_overhead_bytes) & ~size_t{7};
}

result<header> parse_header(const uint8_t* b, size_t n, const limits& lim) {
  if (n < header_bytes)
    return fail<header>(error_code::truncated, "frame header needs 16 bytes, got " + std::to_string(n));
  const auto magic = load<uint32_t>(b);
  if (magic != frame_magic) return fail<header>(error_code::bad_magic, "frame magic " + std::to_string(magic));
  const auto version = load<uint16_t>(b + 4);
  if (version != frame_version)
    return fail<header>(error_code::bad_version, "frame version " + std::to_string(version) + ", expected 1");
  const auto type = load<uint16_t>(b + 6);
  if (type != static_cast<uint16_t>(frame_type::tensor_chunk))
    return fail<header>(error_code::unknown_type, "frame type " + std::to_string(type) + " is unknown");
  const auto body = load<uint32_t>(b + 8);
  if (body > lim.max_frame_bytes - header_bytes)
    return fail<header>(error_code::oversized, "frame body_bytes " + std::to_string(body) + " over the limit " +
                                                   std::to_string(lim.max_frame_bytes - header_bytes));
  if (body % 8 != 0 || body == 0)
    return fail<header>(error_code::malformed_body, "frame body_bytes " + std::to_string(body) +
                                                        " is not a positive multiple of 8");
  result<header> r;
  r.value = header{frame_type::tensor_chunk, body, load<uint32_t>(b + 12)};
  return r;
}

namespace {

// Header, length and checksum of one complete frame; the body is not parsed yet.
result<header> check_frame(const uint8_t* b, size_t n, const limits& lim) {
  auto h = parse_header(b, n, lim);
  if (!h.ok()) return h;
  const size_t want = header_bytes + h.value->body_bytes;
  if (n < want)
    return fail<header>(error_code::truncated, "frame of " + std::to_string(want) + " bytes cut at " +
                                                   std::to_string(n));
  if (n > want) return fail<header>(error_code::malformed_body, std::to_string(n - want) + " bytes after the frame body");
  const uint32_t crc = crc_of(b + header_bytes, h.value->body_bytes);
  if (crc != h.value->crc32)
    return fail<header>(error_code::bad_checksum, "frame crc32 " + std::to_string(h.value->crc32) + ", body has " +
                                                      std::to_string(crc));
  return h;
}

// Parses a checked body that lies in word-aligned memory; the view's data points into it.
result<tensor_chunk_view> parse_body(const capnp::word* body, size_t words, const limits& lim) {
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords = 4 * words + 1024;  // each field is read once, data included
  opts.nestingLimit = 8;
  tensor_chunk_view c;
  try {
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(body, words), opts);
    if (reader.getEnd() != body + words)
      return fail<tensor_chunk_view>(error_code::malformed_body, "Cap'n Proto message shorter than body_bytes");
    auto root = reader.getRoot<schema::TensorChunk>();
    auto name = root.getName();
    if (name.size() > max_name_bytes)
      return fail<tensor_chunk_view>(error_code::malformed_body, "tensor name of " + std::to_string(name.size()) +
                                                                     " bytes, at most 256");
    auto shape = root.getShape();
    if (shape.size() > max_rank)
      return fail<tensor_chunk_view>(error_code::malformed_body, "tensor rank " + std::to_string(shape.size()) +
                                                                     ", at most 16");
    c.meta.tensor_id = root.getTensorId();
    c.meta.name.assign(name.cStr(), name.size());
    const result<dtype> type = dtype_of_wire_code(root.getDtype());
    if (!type.ok()) return fail<tensor_chunk_view>(type.err->code, type.err->message);
    c.meta.type = *type.value;
    for (int64_t d : shape) c.meta.shape.push_back(d);
    c.total_bytes = root.getTotalBytes();
    c.index = root.getChunkIndex();
    c.count = root.getChunkCount();
    c.offset = root.getOffset();
    auto data = root.getData();
    const auto expect = tensor_bytes(c.meta.shape, c.meta.type);
    if (!expect || *expect != c.total_bytes)
      return fail<tensor_chunk_view>(error_code::malformed_body, "totalBytes " + std::to_string(c.total_bytes) +
                                                                     " does not match shape and dtype");
    if (c.total_bytes > lim.max_tensor_bytes)
      return fail<tensor_chunk_view>(error_code::oversized, "tensor of " + std::to_string(c.total_bytes) +
                                                                " bytes over the limit " +
                                                                std::to_string(lim.max_tensor_bytes));
    if (c.count == 0 || c.index >= c.count)
      return fail<tensor_chunk_view>(error_code::bad_chunk, "chunk index " + std::to_string(c.index) + " of count " +
                                                                std::to_string(c.count));
    if (c.offset > c.total_bytes || data.size() > c.total_bytes - c.offset)
      return fail<tensor_chunk_view>(error_code::bad_chunk, "chunk [" + std::to_string(c.offset) + ", +" +
                                                                std::to_string(data.size()) + ") outside tensor of " +
                                                                std::to_string(c.total_bytes) + " bytes");
    c.data = data.begin();
    c.size = data.size();
  } catch (const kj::Exception& e) {
    return fail<tensor_chunk_view>(error_code::malformed_body,
                                   std::string("Cap'n Proto: ") + e.getDescription().cStr());
  }
  result<tensor_chunk_view> r;
  r.value = std::move(c);
  return r;
}

bool word_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(capnp::word) == 0; }

// Cap'n Proto's builder over the encoder's scratch, as one segment and never a second: the data
// field, allocated last, is then the message's tail, which frame_parts leaves in the caller's
// buffer. The scratch's data region is never written, so only the prefix needs re-zeroing.
class scratch_builder final : public capnp::MessageBuilder {
 public:
  explicit scratch_builder(kj::ArrayPtr<capnp::word> space) : space_(space) {}
  kj::ArrayPtr<capnp::word> allocateSegment(unsigned int minimum) override {
    if (given_ || minimum > space_.size()) throw std::logic_error("wire: frame overhead over its reserve");
    given_ = true;
    return space_;
  }

 private:
  kj::ArrayPtr<capnp::word> space_;
  bool given_ = false;
};

}  // namespace

result<tensor_chunk> decode_frame(const uint8_t* b, size_t n, const limits& lim) {
  auto h = check_frame(b, n, lim);
  if (!h.ok()) return fail<tensor_chunk>(h.err->code, h.err->message);
  const uint8_t* body = b + header_bytes;
  const size_t words = h.value->body_bytes / sizeof(capnp::word);
  // Cap'n Proto needs word-aligned input: an unaligned body is copied once into aligned storage.
  kj::Array<capnp::word> aligned;
  const capnp::word* in = reinterpret_cast<const capnp::word*>(body);
  if (!word_aligned(body)) {
    aligned = kj::heapArray<capnp::word>(words);
    std::memcpy(aligned.begin(), body, h.value->body_bytes);
    in = aligned.begin();
  }
  auto v = parse_body(in, words, lim);
  if (!v.ok()) return fail<tensor_chunk>(v.err->code, v.err->message);
  tensor_chunk c;
  static_cast<chunk_info&>(c) = std::move(static_cast<chunk_info&>(*v.value));
  c.data.assign(v.value->data, v.value->data + v.value->size);
  result<tensor_chunk> r;
  r.value = std::move(c);
  return r;
}

result<tensor_chunk_view> decode_frame_view(const uint8_t* b, size_t n, const limits& lim) {
  if (!word_aligned(b)) throw std::invalid_argument("wire: decode_frame_view needs an 8-byte aligned frame");
  auto h = check_frame(b, n, lim);
  if (!h.ok()) return fail<tensor_chunk_view>(h.err->code, h.err->message);
  return parse_body(reinterpret_cast<const capnp::word*>(b + header_bytes), h.value->body_bytes / sizeof(capnp::word),
                    lim);
}

void check_tensor(const tensor_meta& meta, size_t nbytes, const limits& lim) {
  if (meta.name.size() > max_name_bytes) throw std::invalid_argument("wire: tensor name over 256 bytes");
  if (meta.shape.size() > max_rank) throw std::invalid_argument("wire: tensor rank over 16");
  const auto expect = tensor_bytes(meta.shape, meta.type);
  if (!expect || *expect != nbytes || nbytes > lim.max_tensor_bytes)
    throw std::invalid_argument("wire: " + std::to_string(nbytes) + " bytes do not match the shape or the limit");
}

frame_encoder::frame_encoder(limits lim) : lim_(lim), payload_(chunk_payload_bytes(lim)) {}
frame_encoder::~frame_encoder() = default;

uint32_t frame_encoder::chunk_count(size_t nbytes) const {
  const uint64_t count = nbytes == 0 ? 1 : (nbytes + payload_ - 1) / payload_;
  if (count > UINT32_MAX) throw std::invalid_argument("wire: too many chunks");
  return static_cast<uint32_t>(count);
}

frame_parts frame_encoder::encode(const tensor_meta& meta, const void* data, size_t nbytes, uint32_t index) {
  check_tensor(meta, nbytes, lim_);
  const uint32_t count = chunk_count(nbytes);
  if (index >= count)
    throw std::invalid_argument("wire: chunk " + std::to_string(index) + " of a tensor of " + std::to_string(count));
  const size_t off = size_t{index} * payload_, len = std::min(payload_, nbytes - off);
  if (scratch_.empty()) scratch_.resize(lim_.max_frame_bytes / sizeof(capnp::word));
  kj::ArrayPtr<capnp::word> space(reinterpret_cast<capnp::word*>(scratch_.data()), scratch_.size());
  frame_parts f;
  f.payload = static_cast<const uint8_t*>(data) + off;
  f.payload_bytes = len;
  f.pad_bytes = (8 - len % 8) % 8;
  size_t prefix = 0, segment = 0;
  {
    scratch_builder mb(space);
    auto root = mb.initRoot<schema::TensorChunk>();
    root.setTensorId(meta.tensor_id);
    root.setName(meta.name);
    root.setDtype(wire_code(meta.type));
    auto shape = root.initShape(static_cast<unsigned>(meta.shape.size()));
    for (size_t d = 0; d < meta.shape.size(); ++d) shape.set(static_cast<unsigned>(d), meta.shape[d]);
    root.setTotalBytes(nbytes);
    root.setChunkIndex(index);
    root.setChunkCount(count);
    root.setOffset(off);
    auto d = root.initData(static_cast<unsigned>(len));
    auto segs = mb.getSegmentsForOutput();
    const auto* seg = reinterpret_cast<const uint8_t*>(segs[0].begin());
    segment = segs[0].size() * sizeof(capnp::word);
    prefix = len == 0 ? segment : static_cast<size_t>(d.begin() - seg);
    if (segs.size() != 1 || prefix + len + f.pad_bytes != segment)
      throw std::logic_error("wire: chunk data is not the tail of its message");
    // Flat form of a one-segment message: segment count - 1 (0) and its size in words.
    const uint32_t table[2] = {0, static_cast<uint32_t>(segs[0].size())};
    f.head.resize(header_bytes + sizeof table + prefix);
    std::memcpy(f.head.data() + header_bytes, table, sizeof table);
    std::memcpy(f.head.data() + header_bytes + sizeof table, seg, prefix);
  }
  std::memset(scratch_.data(), 0, prefix);  // what the builder wrote; the next frame needs it zero
  const size_t body = sizeof(uint32_t) * 2 + segment;
  if (header_bytes + body > lim_.max_frame_bytes) throw std::logic_error("wire: frame overhead over its reserve");
  static const uint8_t zeros[8] = {};
  uint32_t crc = crc_of(f.head.data() + header_bytes, f.head.size() - header_bytes);
  // Only non-empty pieces: a CRC update with a null buffer returns the initial value, not the CRC so far.
  if (len > 0) crc = libdeflate_crc32(crc, f.payload, len);
  if (f.pad_bytes > 0) crc = libdeflate_crc32(crc, zeros, f.pad_bytes);
  const uint32_t magic = frame_magic, body32 = static_cast<uint32_t>(body);
  const uint16_t version = frame_version, type = static_cast<uint16_t>(frame_type::tensor_chunk);
  std::memcpy(f.head.data(), &magic, 4);
  std::memcpy(f.head.data() + 4, &version, 2);
  std::memcpy(f.head.data() + 6, &type, 2);
  std::memcpy(f.head.data() + 8, &body32, 4);
  std::memcpy(f.head.data() + 12, &crc, 4);
  return f;
}

std::vector<std::vector<uint8_t>> encode_tensor(const tensor_meta& meta, const void* data, size_t nbytes,
                                                const limits& lim) {
  frame_encoder enc(lim);
  check_tensor(meta, nbytes, lim);
  const uint32_t count = enc.chunk_count(nbytes);
  std::vector<std::vector<uint8_t>> frames;
  frames.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const frame_parts p = enc.encode(meta, data, nbytes, i);
    std::vector<uint8_t> f(p.size());  // zero-filled: the pad bytes
    std::memcpy(f.data(), p.head.data(), p.head.size());
    if (p.payload_bytes > 0) std::memcpy(f.data() + p.head.size(), p.payload, p.payload_bytes);
    frames.push_back(std::move(f));
  }
  return frames;
}

void tensor_assembler::reset() {
  started_ = false;
  meta_ = {};
  total_bytes_ = 0;
  count_ = next_index_ = 0;
  bytes_ = {};
}

std::optional<error> tensor_assembler::add(const tensor_chunk_view& c) {
  auto refuse = [&](std::string msg) {
    reset();
    return std::optional<error>(error{error_code::bad_chunk, std::move(msg)});
  };
  if (!started_ || complete()) {
    if (c.index != 0 || c.offset != 0)
      return refuse("first chunk of tensor " + std::to_string(c.meta.tensor_id) + " has index " +
                    std::to_string(c.index) + " offset " + std::to_string(c.offset));
    if (c.total_bytes > lim_.max_tensor_bytes || (c.total_bytes > 0 && c.count > c.total_bytes) ||
        (c.total_bytes == 0 && c.count != 1))
      return refuse("tensor of " + std::to_string(c.total_bytes) + " bytes in " + std::to_string(c.count) +
                    " chunks");
    reset();
    started_ = true;
    meta_ = c.meta;
    total_bytes_ = c.total_bytes;
    count_ = c.count;
    bytes_.reserve(total_bytes_);  // checked against the shape and the limit by decode_frame
  } else if (!same_meta(c.meta, meta_) || c.total_bytes != total_bytes_ || c.count != count_) {
    return refuse("chunk " + std::to_string(c.index) + " belongs to another tensor than " + meta_.name);
  } else if (c.index != next_index_ || c.offset != bytes_.size()) {
    return refuse("chunk " + std::to_string(c.index) + " at offset " + std::to_string(c.offset) + ", expected " +
                  std::to_string(next_index_) + " at " + std::to_string(bytes_.size()));
  }
  const bool last = c.index + 1 == count_;
  const uint64_t end = c.offset + c.size;
  if ((last && end != total_bytes_) || (!last && (c.size == 0 || end >= total_bytes_)))
    return refuse("chunk " + std::to_string(c.index) + " of " + std::to_string(count_) + " ends at " +
                  std::to_string(end) + " of " + std::to_string(total_bytes_) + " bytes");
  bytes_.insert(bytes_.end(), c.data, c.data + c.size);
  ++next_index_;
  return std::nullopt;
}

std::optional<error> tensor_assembler::add(tensor_chunk&& c) {
  tensor_chunk_view v;
  static_cast<chunk_info&>(v) = std::move(static_cast<chunk_info&>(c));
  v.data = c.data.data();
  v.size = c.data.size();
  return add(v);
}

std::pair<tensor_meta, std::vector<uint8_t>> tensor_assembler::take() {
  if (!complete()) throw std::logic_error("tensor_assembler::take before the last chunk");
  auto out = std::make_pair(std::move(meta_), std::move(bytes_));
  reset();
  return out;
}

}  // namespace troupe::wire
