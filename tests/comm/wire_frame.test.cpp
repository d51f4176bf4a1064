// Wire frames: round trips (empty, one chunk, a 64 MiB+ tensor over many chunks) and every kind
// of bad input the decoder must refuse with its error code, plus the fuzzer's crash corpus
// (tests/comm/wire_corpus/) replayed as regression inputs.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <utility>

#include "comm/wire_frame.hpp"

namespace w = troupe::wire;

namespace {

w::tensor_meta meta_of(std::vector<int64_t> shape, uint64_t id = 7) {
  return {id, "layer0.weight", troupe::dtype::f32, shape};
}

// Decodes and reassembles frames; returns the bytes or fails the test.
std::vector<uint8_t> reassemble(const std::vector<std::vector<uint8_t>>& frames, const w::limits& lim) {
  w::tensor_assembler a(lim);
  for (const auto& f : frames) {
    EXPECT_LE(f.size(), lim.max_frame_bytes);
    auto c = w::decode_frame(f.data(), f.size(), lim);
    EXPECT_TRUE(c.ok()) << c.err->message;
    if (!c.ok()) return {};
    auto e = a.add(std::move(*c.value));
    EXPECT_FALSE(e.has_value()) << e->message;
  }
  EXPECT_TRUE(a.complete());
  return a.take().second;
}

std::vector<uint8_t> one_frame() {
  std::vector<float> x(100);
  std::iota(x.begin(), x.end(), 1.0f);
  return w::encode_tensor(meta_of({10, 10}), x.data(), x.size() * 4).at(0);
}

w::error_code decode_error(const std::vector<uint8_t>& f) {
  auto r = w::decode_frame(f.data(), f.size());
  EXPECT_FALSE(r.ok());
  return r.ok() ? w::error_code::bad_chunk : r.err->code;
}

void set_u32(std::vector<uint8_t>& f, size_t at, uint32_t v) { std::memcpy(f.data() + at, &v, 4); }

}  // namespace

TEST(WireFrame, SmallTensorRoundTripsInOneFrame) {
  std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 6.0f};
  auto frames = w::encode_tensor(meta_of({2, 3}), x.data(), 24);
  ASSERT_EQ(frames.size(), 1u);
  auto c = w::decode_frame(frames[0].data(), frames[0].size());
  ASSERT_TRUE(c.ok()) << c.err->message;
  EXPECT_EQ(c.value->meta.name, "layer0.weight");
  EXPECT_EQ(c.value->meta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c.value->meta.tensor_id, 7u);
  EXPECT_EQ(c.value->total_bytes, 24u);
  ASSERT_EQ(c.value->data.size(), 24u);
  EXPECT_EQ(std::memcmp(c.value->data.data(), x.data(), 24), 0);
}

TEST(WireFrame, EmptyTensorIsOneEmptyChunk) {
  auto frames = w::encode_tensor(meta_of({0, 5}), nullptr, 0);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_TRUE(reassemble(frames, {}).empty());
}

TEST(WireFrame, LargeTensorIsChunkedUnderTheLimitAndReassembledBitwise) {
  const int64_t n = (int64_t{65} << 20) / 4 + 3;  // 65 MiB + 12 bytes: not a multiple of the chunk
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 1000003) * 0.5f;
  w::limits lim;  // 4 MiB frames
  auto frames = w::encode_tensor(meta_of({n}), x.data(), x.size() * 4, lim);
  const size_t payload = w::chunk_payload_bytes(lim);
  EXPECT_EQ(frames.size(), (x.size() * 4 + payload - 1) / payload);
  EXPECT_GE(frames.size(), 17u);
  auto bytes = reassemble(frames, lim);
  ASSERT_EQ(bytes.size(), x.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), x.data(), bytes.size()), 0);
}

TEST(WireFrame, SmallFrameLimitGivesManyChunks) {
  std::vector<float> x(10000, 2.5f);
  w::limits lim;
  lim.max_frame_bytes = 4096;
  auto frames = w::encode_tensor(meta_of({100, 100}), x.data(), 40000, lim);
  EXPECT_EQ(frames.size(), (40000 + 3071) / 3072);
  EXPECT_EQ(reassemble(frames, lim).size(), 40000u);
}

TEST(WireFrame, TruncatedFrameIsRefused) {
  auto f = one_frame();
  for (size_t cut : {size_t{0}, size_t{5}, size_t{15}, size_t{16}, f.size() - 1}) {
    std::vector<uint8_t> g(f.begin(), f.begin() + static_cast<long>(cut));
    EXPECT_EQ(decode_error(g), w::error_code::truncated) << "cut at " << cut;
  }
}

TEST(WireFrame, WrongChecksumIsRefused) {
  auto f = one_frame();
  f[f.size() - 9] ^= 0x01;  // one bit in the payload
  EXPECT_EQ(decode_error(f), w::error_code::bad_checksum);
  auto g = one_frame();
  g[12] ^= 0x80;  // the checksum field itself
  EXPECT_EQ(decode_error(g), w::error_code::bad_checksum);
}

TEST(WireFrame, OversizedLengthFieldIsRefusedBeforeAnyAllocation) {
  auto f = one_frame();
  set_u32(f, 8, 0xFFFFFFF8u);  // claims ~4 GiB of body
  EXPECT_EQ(decode_error(f), w::error_code::oversized);
  auto h = w::parse_header(f.data(), 16);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.err->message.find("body_bytes"), std::string::npos);
}

TEST(WireFrame, DtypeCodesStayTheFormatsAndAnUnknownCodeIsNamed) {
  using troupe::dtype;
  // The codes frames carried before kernels' dtype held the integer types, which numbers them
  // differently.
  const std::pair<dtype, uint8_t> codes[] = {{dtype::f32, 1}, {dtype::f16, 2}, {dtype::bf16, 3},
                                             {dtype::i32, 4}, {dtype::i64, 5}, {dtype::u8, 6}};
  for (auto [d, code] : codes) {
    EXPECT_EQ(w::wire_code(d), code) << to_string(d);
    EXPECT_EQ(w::dtype_of_wire_code(code).value, d) << to_string(d);
  }
  for (int bad : {0, 7, 255}) {
    const auto r = w::dtype_of_wire_code(static_cast<uint8_t>(bad));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.err->code, w::error_code::malformed_body);
    EXPECT_NE(r.err->message.find("dtype code " + std::to_string(bad) + " unknown"), std::string::npos) << r.err->message;
  }
}

TEST(WireFrame, UnknownTypeBadMagicAndVersionAreRefused) {
  auto f = one_frame();
  f[6] = 9;
  EXPECT_EQ(decode_error(f), w::error_code::unknown_type);
  auto g = one_frame();
  g[0] = 'X';
  EXPECT_EQ(decode_error(g), w::error_code::bad_magic);
  auto v = one_frame();
  v[4] = 2;
  EXPECT_EQ(decode_error(v), w::error_code::bad_version);
}

TEST(WireFrame, TensorOverTheLimitIsRefused) {
  std::vector<float> x(1024, 1.0f);
  auto f = w::encode_tensor(meta_of({1024}), x.data(), 4096).at(0);
  w::limits small;
  small.max_tensor_bytes = 1000;
  auto r = w::decode_frame(f.data(), f.size(), small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err->code, w::error_code::oversized);
}

TEST(WireFrame, GarbageBodyWithValidChecksumIsMalformed) {
  std::vector<uint8_t> f(16 + 64, 0xAB);
  const uint32_t magic = w::frame_magic, body = 64;
  const uint16_t version = 1, type = 1;
  std::memcpy(f.data(), &magic, 4);
  std::memcpy(f.data() + 4, &version, 2);
  std::memcpy(f.data() + 6, &type, 2);
  std::memcpy(f.data() + 8, &body, 4);
  set_u32(f, 12, 0);
  // Recompute the CRC with the decoder's own answer: the message says what it found.
  auto first = w::decode_frame(f.data(), f.size());
  ASSERT_EQ(first.err->code, w::error_code::bad_checksum);
  const auto pos = first.err->message.find("body has ");
  set_u32(f, 12, static_cast<uint32_t>(std::stoul(first.err->message.substr(pos + 9))));
  EXPECT_EQ(decode_error(f), w::error_code::malformed_body);
}

TEST(WireFrame, AssemblerRefusesOutOfOrderForeignAndBadChunks) {
  std::vector<float> x(3000, 1.0f);
  w::limits lim;
  lim.max_frame_bytes = 4096;
  auto frames = w::encode_tensor(meta_of({3000}), x.data(), 12000, lim);
  ASSERT_EQ(frames.size(), 4u);
  auto chunk = [&](size_t i) { return std::move(*w::decode_frame(frames[i].data(), frames[i].size(), lim).value); };
  w::tensor_assembler a(lim);
  auto e = a.add(chunk(1));  // does not start at 0
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->code, w::error_code::bad_chunk);
  ASSERT_FALSE(a.add(chunk(0)).has_value());
  EXPECT_TRUE(a.add(chunk(2)).has_value());  // skips chunk 1
  ASSERT_FALSE(a.add(chunk(0)).has_value());  // the error reset it: a new tensor may start
  auto foreign = chunk(1);
  foreign.meta.tensor_id = 8;
  EXPECT_TRUE(a.add(std::move(foreign)).has_value());
  ASSERT_FALSE(a.add(chunk(0)).has_value());
  auto bad_count = chunk(1);
  bad_count.count = 99;
  EXPECT_TRUE(a.add(std::move(bad_count)).has_value());
}

TEST(WireFrame, EncoderRefusesWhatTheDecoderWould) {
  std::vector<float> x(4);
  EXPECT_THROW(w::encode_tensor(meta_of({5}), x.data(), 16), std::invalid_argument);
  auto m = meta_of({4});
  m.name.assign(300, 'a');
  EXPECT_THROW(w::encode_tensor(m, x.data(), 16), std::invalid_argument);
  w::limits tiny;
  tiny.max_frame_bytes = 100;
  EXPECT_THROW(w::encode_tensor(meta_of({4}), x.data(), 16, tiny), std::invalid_argument);
}

// The header's checksum is zlib's CRC-32 of the body (the format's definition), whichever library
// computes it: frames from an older build, and the fuzz corpus, stay valid.
TEST(WireFrame, ChecksumIsZlibsCrc32OfTheBody) {
  std::vector<uint8_t> x(100003);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  for (const auto& f : w::encode_tensor({9, "crc", troupe::dtype::u8, {100003}}, x.data(), x.size())) {
    uint32_t in_header = 0;
    std::memcpy(&in_header, f.data() + 12, 4);
    EXPECT_EQ(in_header, static_cast<uint32_t>(crc32_z(0, f.data() + w::header_bytes, f.size() - w::header_bytes)));
  }
}

// The encoder leaves the payload where the caller has it: the parts point into the tensor, the
// head holds only the header and the fields, and the joined parts are the frame encode_tensor gives.
TEST(WireFrame, EncoderPartsPointIntoTheCallersBytes) {
  std::vector<uint8_t> x(10001);  // odd: the last chunk needs padding to the word
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 31 + 7);
  w::limits lim;
  lim.max_frame_bytes = 4096;
  w::tensor_meta m{3, "act", troupe::dtype::u8, {10001}};
  w::frame_encoder enc(lim);
  const auto frames = w::encode_tensor(m, x.data(), x.size(), lim);
  ASSERT_EQ(enc.chunk_count(x.size()), frames.size());
  const size_t payload = w::chunk_payload_bytes(lim);
  for (uint32_t i = 0; i < frames.size(); ++i) {
    const auto p = enc.encode(m, x.data(), x.size(), i);
    EXPECT_EQ(p.payload, x.data() + i * payload);
    EXPECT_LT(p.head.size(), w::frame_overhead_bytes);
    EXPECT_EQ((p.head.size() + p.payload_bytes + p.pad_bytes) % 8, 0u);
    std::vector<uint8_t> joined(p.head);
    joined.insert(joined.end(), p.payload, p.payload + p.payload_bytes);
    joined.resize(p.size(), 0);
    EXPECT_EQ(joined, frames[i]) << "frame " << i;
  }
  EXPECT_GT(enc.encode(m, x.data(), x.size(), static_cast<uint32_t>(frames.size() - 1)).pad_bytes, 0u);
  EXPECT_THROW(enc.encode(m, x.data(), x.size(), static_cast<uint32_t>(frames.size())), std::invalid_argument);
}

// The encoder's scratch is reused: a frame after a longer name and a higher rank must come out
// exactly as from a fresh encoder (no field of the previous message may leak into it).
TEST(WireFrame, ReusedEncoderGivesTheSameFrameAsAFreshOne) {
  std::vector<float> big(64, 1.0f), small = {2.0f, 3.0f};
  w::frame_encoder reused;
  w::tensor_meta first{1, std::string(200, 'n'), troupe::dtype::f32, {2, 2, 2, 8}};
  w::tensor_meta second{2, "b", troupe::dtype::f32, {2}};
  reused.encode(first, big.data(), 256, 0);
  const auto again = reused.encode(second, small.data(), 8, 0);
  w::frame_encoder fresh;
  const auto want = fresh.encode(second, small.data(), 8, 0);
  EXPECT_EQ(again.head, want.head);
  auto frames = w::encode_tensor(second, small.data(), 8);
  auto c = w::decode_frame(frames[0].data(), frames[0].size());
  ASSERT_TRUE(c.ok()) << c.err->message;
  EXPECT_EQ(c.value->meta.name, "b");
}

// decode_frame_view reads an aligned frame in place: its data points into the frame, and the
// assembler takes views to the same tensor bitwise. An unaligned buffer is refused loudly.
TEST(WireFrame, ViewDecodesInPlaceAndAssemblesBitwise) {
  std::vector<float> x(5000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 7.0f;
  w::limits lim;
  lim.max_frame_bytes = 4096;
  const auto frames = w::encode_tensor(meta_of({5000}), x.data(), x.size() * 4, lim);
  ASSERT_GT(frames.size(), 4u);
  w::tensor_assembler a(lim);
  std::vector<uint64_t> buf(lim.max_frame_bytes / 8 + 1);
  auto* b = reinterpret_cast<uint8_t*>(buf.data());
  for (const auto& f : frames) {
    std::memcpy(b, f.data(), f.size());
    auto v = w::decode_frame_view(b, f.size(), lim);
    ASSERT_TRUE(v.ok()) << v.err->message;
    EXPECT_GE(v.value->data, b);
    EXPECT_LE(v.value->data + v.value->size, b + f.size());
    auto e = a.add(*v.value);
    ASSERT_FALSE(e.has_value()) << e->message;
  }
  ASSERT_TRUE(a.complete());
  auto [meta, bytes] = a.take();
  ASSERT_EQ(bytes.size(), x.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), x.data(), bytes.size()), 0);
  std::memcpy(b, frames[0].data(), frames[0].size());
  b[frames[0].size() - 9] ^= 0x10;
  auto bad = w::decode_frame_view(b, frames[0].size(), lim);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err->code, w::error_code::bad_checksum);
  EXPECT_THROW(w::decode_frame_view(b + 1, frames[0].size(), lim), std::invalid_argument);
}

// Every input the fuzzer ever crashed on or found interesting is kept and must decode cleanly:
// either a chunk or an error, never a crash (ASan builds make an overflow fail here).
TEST(WireFrame, FuzzCorpusDecodesToValueOrError) {
  const std::filesystem::path dir = TROUPE_WIRE_CORPUS_DIR;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == "README.md") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    auto r = w::decode_frame(bytes.data(), bytes.size());
    EXPECT_TRUE(r.ok() || !r.err->message.empty()) << entry.path();
    ++files;
  }
  EXPECT_GT(files, 0u);
}
