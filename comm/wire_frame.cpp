// Wire frame encoder, decoder and in-order tensor reassembly. Every check happens before the
// corresponding allocation; Cap'n Proto exceptions are caught at this boundary and become
// malformed_body errors, so no input reaches the caller as an exception or a crash.
#include "comm/wire_frame.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/io.h>
#include <zlib.h>

#include <cstring>
#include <stdexcept>

#include "comm/wire/frame.capnp.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire frames are written in host order");

namespace troupe::wire {
namespace {

uint32_t crc_of(const uint8_t* p, size_t n) { return static_cast<uint32_t>(crc32_z(0, p, n)); }

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
  uint64_t n = dtype_size(d);
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

size_t dtype_size(dtype d) {
  switch (d) {
    case dtype::f32: return 4;
    case dtype::f16: return 2;
    case dtype::bf16: return 2;
    case dtype::i32: return 4;
    case dtype::i64: return 8;
    case dtype::u8: return 1;
  }
  return 0;
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

result<tensor_chunk> decode_frame(const uint8_t* b, size_t n, const limits& lim) {
  auto h = parse_header(b, n, lim);
  if (!h.ok()) return fail<tensor_chunk>(h.err->code, h.err->message);
  const size_t want = header_bytes + h.value->body_bytes;
  if (n < want)
    return fail<tensor_chunk>(error_code::truncated, "frame of " + std::to_string(want) + " bytes cut at " +
                                                         std::to_string(n));
  if (n > want)
    return fail<tensor_chunk>(error_code::malformed_body, std::to_string(n - want) + " bytes after the frame body");
  const uint8_t* body = b + header_bytes;
  const uint32_t crc = crc_of(body, h.value->body_bytes);
  if (crc != h.value->crc32)
    return fail<tensor_chunk>(error_code::bad_checksum, "frame crc32 " + std::to_string(h.value->crc32) +
                                                            ", body has " + std::to_string(crc));
  // Cap'n Proto needs word-aligned input; the body is copied once into aligned storage.
  const size_t words = h.value->body_bytes / sizeof(capnp::word);
  auto aligned = kj::heapArray<capnp::word>(words);
  std::memcpy(aligned.begin(), body, h.value->body_bytes);
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords = 4 * words + 1024;  // each field is read once, data included
  opts.nestingLimit = 8;
  tensor_chunk c;
  try {
    capnp::FlatArrayMessageReader reader(aligned.asPtr(), opts);
    if (reader.getEnd() != aligned.end())
      return fail<tensor_chunk>(error_code::malformed_body, "Cap'n Proto message shorter than body_bytes");
    auto root = reader.getRoot<schema::TensorChunk>();
    auto name = root.getName();
    if (name.size() > max_name_bytes)
      return fail<tensor_chunk>(error_code::malformed_body, "tensor name of " + std::to_string(name.size()) +
                                                                " bytes, at most 256");
    auto shape = root.getShape();
    if (shape.size() > max_rank)
      return fail<tensor_chunk>(error_code::malformed_body, "tensor rank " + std::to_string(shape.size()) +
                                                                ", at most 16");
    c.meta.tensor_id = root.getTensorId();
    c.meta.name.assign(name.cStr(), name.size());
    c.meta.type = static_cast<dtype>(root.getDtype());
    for (int64_t d : shape) c.meta.shape.push_back(d);
    c.total_bytes = root.getTotalBytes();
    c.index = root.getChunkIndex();
    c.count = root.getChunkCount();
    c.offset = root.getOffset();
    auto data = root.getData();
    if (dtype_size(c.meta.type) == 0)
      return fail<tensor_chunk>(error_code::malformed_body, "dtype " + std::to_string(root.getDtype()) + " unknown");
    const auto expect = tensor_bytes(c.meta.shape, c.meta.type);
    if (!expect || *expect != c.total_bytes)
      return fail<tensor_chunk>(error_code::malformed_body,
                                "totalBytes " + std::to_string(c.total_bytes) + " does not match shape and dtype");
    if (c.total_bytes > lim.max_tensor_bytes)
      return fail<tensor_chunk>(error_code::oversized, "tensor of " + std::to_string(c.total_bytes) +
                                                           " bytes over the limit " +
                                                           std::to_string(lim.max_tensor_bytes));
    if (c.count == 0 || c.index >= c.count)
      return fail<tensor_chunk>(error_code::bad_chunk, "chunk index " + std::to_string(c.index) + " of count " +
                                                           std::to_string(c.count));
    if (c.offset > c.total_bytes || data.size() > c.total_bytes - c.offset)
      return fail<tensor_chunk>(error_code::bad_chunk, "chunk [" + std::to_string(c.offset) + ", +" +
                                                           std::to_string(data.size()) + ") outside tensor of " +
                                                           std::to_string(c.total_bytes) + " bytes");
    c.data.assign(data.begin(), data.end());
  } catch (const kj::Exception& e) {
    return fail<tensor_chunk>(error_code::malformed_body, std::string("Cap'n Proto: ") + e.getDescription().cStr());
  }
  result<tensor_chunk> r;
  r.value = std::move(c);
  return r;
}

std::vector<std::vector<uint8_t>> encode_tensor(const tensor_meta& meta, const void* data, size_t nbytes,
                                                const limits& lim) {
  const size_t payload = chunk_payload_bytes(lim);
  if (meta.name.size() > max_name_bytes) throw std::invalid_argument("wire: tensor name over 256 bytes");
  if (meta.shape.size() > max_rank) throw std::invalid_argument("wire: tensor rank over 16");
  const auto expect = tensor_bytes(meta.shape, meta.type);
  if (!expect || *expect != nbytes || nbytes > lim.max_tensor_bytes)
    throw std::invalid_argument("wire: " + std::to_string(nbytes) + " bytes do not match the shape or the limit");
  const uint64_t count = nbytes == 0 ? 1 : (nbytes + payload - 1) / payload;
  if (count > UINT32_MAX) throw std::invalid_argument("wire: too many chunks");
  std::vector<std::vector<uint8_t>> frames;
  frames.reserve(count);
  const auto* src = static_cast<const uint8_t*>(data);
  for (uint64_t i = 0; i < count; ++i) {
    const size_t off = i * payload, len = std::min(payload, nbytes - off);
    capnp::MallocMessageBuilder mb(static_cast<unsigned>(len / 8 + 256));
    auto root = mb.initRoot<schema::TensorChunk>();
    root.setTensorId(meta.tensor_id);
    root.setName(meta.name);
    root.setDtype(static_cast<uint8_t>(meta.type));
    auto shape = root.initShape(static_cast<unsigned>(meta.shape.size()));
    for (size_t d = 0; d < meta.shape.size(); ++d) shape.set(static_cast<unsigned>(d), meta.shape[d]);
    root.setTotalBytes(nbytes);
    root.setChunkIndex(static_cast<uint32_t>(i));
    root.setChunkCount(static_cast<uint32_t>(count));
    root.setOffset(off);
    auto d = root.initData(static_cast<unsigned>(len));
    if (len > 0) std::memcpy(d.begin(), src + off, len);
    // Serialize straight behind the header: one copy of the payload, not two.
    const size_t body = capnp::computeSerializedSizeInWords(mb) * sizeof(capnp::word);
    if (header_bytes + body > lim.max_frame_bytes) throw std::logic_error("wire: frame overhead over its reserve");
    std::vector<uint8_t> f(header_bytes + body);
    kj::ArrayOutputStream out(kj::arrayPtr(reinterpret_cast<kj::byte*>(f.data() + header_bytes), body));
    capnp::writeMessage(out, mb);
    const uint32_t magic = frame_magic, body32 = static_cast<uint32_t>(body);
    const uint16_t version = frame_version, type = static_cast<uint16_t>(frame_type::tensor_chunk);
    const uint32_t crc = crc_of(f.data() + header_bytes, body);
    std::memcpy(f.data(), &magic, 4);
    std::memcpy(f.data() + 4, &version, 2);
    std::memcpy(f.data() + 6, &type, 2);
    std::memcpy(f.data() + 8, &body32, 4);
    std::memcpy(f.data() + 12, &crc, 4);
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

std::optional<error> tensor_assembler::add(tensor_chunk&& c) {
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
  const uint64_t end = c.offset + c.data.size();
  if ((last && end != total_bytes_) || (!last && (c.data.empty() || end >= total_bytes_)))
    return refuse("chunk " + std::to_string(c.index) + " of " + std::to_string(count_) + " ends at " +
                  std::to_string(end) + " of " + std::to_string(total_bytes_) + " bytes");
  bytes_.insert(bytes_.end(), c.data.begin(), c.data.end());
  ++next_index_;
  return std::nullopt;
}

std::pair<tensor_meta, std::vector<uint8_t>> tensor_assembler::take() {
  if (!complete()) throw std::logic_error("tensor_assembler::take before the last chunk");
  auto out = std::make_pair(std::move(meta_), std::move(bytes_));
  reset();
  return out;
}

}  // namespace troupe::wire
