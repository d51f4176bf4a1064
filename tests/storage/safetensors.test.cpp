// safetensors: what write_safetensors writes reads back bit for bit (with its metadata), a header
// as other writers lay it out reads too, and every kind of malformed file is refused with an error
// that names the file and the problem.
#include "storage/safetensors.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace troupe::storage;

namespace {

struct temp_file {
  fs::path path = fs::temp_directory_path() / ("troupe-safetensors-" + std::to_string(::getpid()) + "-" +
                                               std::to_string(reinterpret_cast<uintptr_t>(this)));
  ~temp_file() {
    fs::remove(path);
    fs::remove(path.string() + ".tmp");
  }
};

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The bytes of a file with the given header text and data; length overrides the header length.
std::string file_of(const std::string& header, const std::string& data, int64_t length = -1) {
  const uint64_t n = length < 0 ? header.size() : static_cast<uint64_t>(length);
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string floats(std::initializer_list<float> v) {
  return {reinterpret_cast<const char*>(v.begin()), v.size() * sizeof(float)};
}

void expect_refused(const std::string& bytes, const std::string& problem) {
  temp_file f;
  std::ofstream(f.path, std::ios::binary) << bytes;
  try {
    read_safetensors(f.path);
    ADD_FAILURE() << "read a malformed file: " << bytes;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(f.path.string()), std::string::npos) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << what;
  }
}
void expect_refused(const std::string& header, const std::string& data, const std::string& problem) {
  expect_refused(file_of(header, data), problem);
}

TEST(Safetensors, RoundTripKeepsValuesShapesOrderAndMetadata) {
  temp_file f;
  const std::vector<named_tensor> tensors{
      {"blocks.0.attn.qkv.weight", {3, 2}, {1.5f, -0.0f, 3e-38f, 1e30f, -7.25f, 0.1f}},
      {"loss", {}, {2.302585f}},
      {"empty", {0, 4}, {}},
      {"a", {4}, {1, 2, 3, 4}},
  };
  const safetensors_metadata meta{{"model", "gpt vocab=11"}, {"quote\"back\\slash", "line\nnext\tcaf\xc3\xa9"}};
  write_safetensors(f.path, tensors, meta);
  EXPECT_FALSE(fs::exists(f.path.string() + ".tmp"));

  const std::string bytes = file_bytes(f.path);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u);  // the data starts aligned
  EXPECT_EQ(bytes.size(), 8 + length + (6 + 1 + 4) * sizeof(float));

  safetensors_metadata back_meta;
  const auto back = read_safetensors(f.path, &back_meta);
  ASSERT_EQ(back.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back[i].name, tensors[i].name);
    EXPECT_EQ(back[i].shape, tensors[i].shape);
    ASSERT_EQ(back[i].values.size(), tensors[i].values.size());
    EXPECT_EQ(std::memcmp(back[i].values.data(), tensors[i].values.data(), tensors[i].values.size() * 4), 0);
  }
  EXPECT_EQ(back_meta, meta);
}

TEST(Safetensors, ReadsAHeaderLaidOutByAnotherWriter) {
  // Spaces, metadata last, tensors listed out of byte order, \u and \/ escapes.
  temp_file f;
  std::ofstream(f.path, std::ios::binary) << file_of(
            "{ \"b\" : {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [4, 12]},\n"
            "  \"a\\/\\u00e9\": {\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
            "  \"__metadata__\": {\"format\": \"pt\"} }   ",
            floats({1, 2, 3}));
  safetensors_metadata meta;
  const auto t = read_safetensors(f.path, &meta);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "a/\xc3\xa9");
  EXPECT_EQ(t[0].values, std::vector<float>{1});
  EXPECT_EQ(t[1].values, (std::vector<float>{2, 3}));
  EXPECT_EQ(meta.at("format"), "pt");
}

TEST(Safetensors, ReadsBf16AndF16WidenedToFloat) {
  temp_file f;
  const uint16_t halves[] = {0x3F80, 0xC020, 0x3C00, 0x7BFF};  // bf16 1, -2.5; f16 1, 65504
  std::ofstream(f.path, std::ios::binary) << file_of(
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"h":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})",
      std::string(reinterpret_cast<const char*>(halves), sizeof halves));
  const auto t = read_safetensors(f.path);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].values, (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(t[1].values, (std::vector<float>{1.0f, 65504.0f}));
}

TEST(Safetensors, RefusesAHalfTensorWithTheBytesOfFloats) {
  expect_refused(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,8]}})", floats({1, 2}), "[2] but 8 bytes of BF16");
}

TEST(Safetensors, WriteReplacesAnOldFileWhole) {
  temp_file f;
  write_safetensors(f.path, {{"x", {3}, {1, 2, 3}}});
  write_safetensors(f.path, {{"y", {1}, {4}}});
  const auto t = read_safetensors(f.path);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "y");
}

TEST(Safetensors, WriterRefusesRepeatedNamesAndShapesThatDoNotMatchTheValues) {
  temp_file f;
  EXPECT_THROW(write_safetensors(f.path, {{"x", {1}, {1}}, {"x", {1}, {2}}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors(f.path, {{"__metadata__", {1}, {1}}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors(f.path, {{"x", {2, 2}, {1, 2, 3}}}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(f.path));
}

const std::string one = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST(Safetensors, RefusesATruncatedFile) {
  expect_refused(std::string("\x10\0\0", 3), "truncated: 3 bytes");
  // Data cut short: the offsets now run past it.
  expect_refused(one, floats({1}), "outside the data");
}

TEST(Safetensors, RefusesAHeaderLengthPastTheEnd) {
  expect_refused(file_of(one, floats({1, 2}), 1 << 20), "runs past the end of the file");
}

TEST(Safetensors, RefusesBadJson) {
  expect_refused(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", floats({1, 2}), "bad safetensors header");
  expect_refused(one + "x", floats({1, 2}), "bytes after the closing brace");
  expect_refused(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", floats({1, 2}), "non-negative integer");
  expect_refused(R"({"x":{"dtype":"F32","shape":[2],"offsets":[0,8]}})", floats({1, 2}), "unknown field");
  expect_refused(R"({"x":{"dtype":"F32","shape":[2]}})", floats({1, 2}), "needs a dtype and data_offsets");
  expect_refused(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 floats({1, 2}), "appears twice");
  expect_refused(R"({"x\q":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", floats({1, 2}), "unknown escape");
}

TEST(Safetensors, RefusesOffsetsOutOfRangeOverlappingOrWithGaps) {
  expect_refused(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", floats({1, 2}), "outside the data");
  expect_refused(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 floats({1, 2}), "overlaps \"x\"");
  expect_refused(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", floats({1, 2}), "belong to no tensor");
  expect_refused(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1, 2}), "belong to no tensor");
}

TEST(Safetensors, RefusesAnUnknownDtypeAndAShapeThatDoesNotMatchItsBytes) {
  expect_refused(R"({"x":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", floats({1, 2}), "dtype I8");
  expect_refused(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", floats({1, 2}), "shape [3] but 8 bytes");
}

}  // namespace
