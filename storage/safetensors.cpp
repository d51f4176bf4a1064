// safetensors writer and reader. The header parser reads exactly the JSON the format allows
// (objects, strings, arrays of non-negative integers), not JSON in general: every other shape is
// a malformed file here, so there is no JSON library to depend on.
#include "storage/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string_view>

#include "kernels/half.hpp"
#include "storage/output_file.hpp"

namespace troupe::storage {

// The header length and the tensor bytes are little-endian; they are copied as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors.cpp assumes a little-endian host");

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Elements of a shape, or -1 for a negative dimension or one whose product overflows.
int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

struct entry {
  std::string name, dtype;
  std::vector<int64_t> shape, offsets;
};

class header_parser {
 public:
  header_parser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  std::vector<entry> parse(safetensors_metadata& metadata) {
    std::vector<entry> entries;
    std::set<std::string> seen;
    object([&](std::string key) {
      if (!seen.insert(key).second) fail("key \"" + key + "\" appears twice");
      if (key == "__metadata__") return object([&](std::string k) { metadata[std::move(k)] = string(); });
      entry e{std::move(key), {}, {}, {}};
      object([&](const std::string& field) {
        if (field == "dtype") e.dtype = string();
        else if (field == "shape") e.shape = integers();
        else if (field == "data_offsets") e.offsets = integers();
        else fail("tensor \"" + e.name + "\" has an unknown field \"" + field + "\"");
      });
      if (e.dtype.empty() || e.offsets.size() != 2)
        fail("tensor \"" + e.name + "\" needs a dtype and data_offsets [begin, end]");
      entries.push_back(std::move(e));
    });
    skip_space();
    if (at_ != s_.size()) fail("bytes after the closing brace");
    return entries;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(path_ + ": bad safetensors header at byte " + std::to_string(at_) + ": " + what);
  }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t')) ++at_;
  }
  bool consume(char c) {
    skip_space();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  // {"key": value, ...}, calling member(key) to read each value.
  template <class F>
  void object(F&& member) {
    expect('{');
    if (consume('}')) return;
    do {
      std::string key = string();
      expect(':');
      member(std::move(key));
    } while (consume(','));
    expect('}');
  }
  std::string string() {
    expect('"');
    std::string out;
    while (at_ < s_.size() && s_[at_] != '"') {
      const unsigned char c = static_cast<unsigned char>(s_[at_++]);
      if (c < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (at_ >= s_.size()) break;
      const char e = s_[at_++];
      const char* plain = std::strchr("\"\\/bfnrt", e);
      if (e != 'u') {
        if (!plain || e == 0) fail(std::string("unknown escape \\") + e);
        out += "\"\\/\b\f\n\r\t"[plain - "\"\\/bfnrt"];
        continue;
      }
      // \uXXXX within the Basic Multilingual Plane, as UTF-8 (names and metadata are text).
      unsigned code = 0;
      for (int i = 0; i < 4; ++i, ++at_) {
        const char h = at_ < s_.size() ? s_[at_] : 0;
        if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad \\u escape");
        const int digit = std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10;
        code = code * 16 + static_cast<unsigned>(digit);
      }
      if (code >= 0xd800 && code < 0xe000) fail("a surrogate \\u escape");
      if (code < 0x80) out += static_cast<char>(code);
      else if (code < 0x800) out += static_cast<char>(0xc0 | code >> 6), out += static_cast<char>(0x80 | (code & 0x3f));
      else
        out += static_cast<char>(0xe0 | code >> 12), out += static_cast<char>(0x80 | ((code >> 6) & 0x3f)),
            out += static_cast<char>(0x80 | (code & 0x3f));
    }
    if (at_ >= s_.size()) fail("an unterminated string");
    ++at_;
    return out;
  }
  // [n, ...] of non-negative integers below 2^53 (what a JSON reader anywhere reads exactly).
  std::vector<int64_t> integers() {
    std::vector<int64_t> out;
    expect('[');
    if (consume(']')) return out;
    do {
      skip_space();
      const size_t begin = at_;
      int64_t v = 0;
      while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) {
        v = v * 10 + (s_[at_++] - '0');
        if (v >= (int64_t{1} << 53)) fail("an integer too large");
      }
      if (at_ == begin) fail("expected a non-negative integer");
      out.push_back(v);
    } while (consume(','));
    expect(']');
    return out;
  }

  std::string_view s_;
  const std::string& path_;
  size_t at_ = 0;
};

void write_all(int fd, const char* p, size_t n, const std::string& tmp) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw std::runtime_error(tmp + ": write failed: " + std::strerror(errno));
    p += w, n -= static_cast<size_t>(w);
  }
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<named_tensor>& tensors,
                       const safetensors_metadata& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) header += (header.back() == '{' ? "" : ",") + quoted(k) + ":" + quoted(v);
    header += "}";
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      throw std::invalid_argument("write_safetensors " + path + ": tensor name \"" + t.name +
                                  "\" is empty, reserved or repeated");
    if (elements(t.shape) != static_cast<int64_t>(t.values.size()))
      throw std::invalid_argument("write_safetensors " + path + ": tensor \"" + t.name + "\" has shape " +
                                  shape_text(t.shape) + " and " + std::to_string(t.values.size()) + " values");
    const uint64_t end = offset + t.values.size() * sizeof(float);
    header += (header.size() > 1 ? "," : "") + quoted(t.name) + ":{\"dtype\":\"F32\",\"shape\":" + shape_text(t.shape) +
              ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  // Synced before the rename, so a crash leaves the old export or the whole new one.
  storage::write_output_file_with(
      path,
      [&](int fd, const std::string& name) {
        const uint64_t length = header.size();
        write_all(fd, reinterpret_cast<const char*>(&length), sizeof length, name);
        write_all(fd, header.data(), header.size(), name);
        for (const auto& t : tensors)
          write_all(fd, reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float), name);
      },
      /*sync=*/true);
}

std::vector<named_tensor> read_safetensors(const std::string& path, safetensors_metadata* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const std::string& what) { return std::runtime_error(path + ": " + what); };
  auto gap = [&](uint64_t from, uint64_t to) {
    return fail("bytes [" + std::to_string(from) + ", " + std::to_string(to) + ") of the data belong to no tensor");
  };
  if (bytes.size() < 8)
    throw fail("truncated: " + std::to_string(bytes.size()) + " bytes, less than the 8-byte header length");
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), sizeof length);
  if (length > bytes.size() - 8)
    throw fail("header length " + std::to_string(length) + " runs past the end of the file (" +
               std::to_string(bytes.size()) + " bytes)");
  safetensors_metadata meta;
  std::vector<entry> entries = header_parser(std::string_view(bytes).substr(8, length), path).parse(meta);
  const uint64_t data_at = 8 + length, data_size = bytes.size() - data_at;

  std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.offsets < b.offsets; });
  std::vector<named_tensor> out;
  uint64_t covered = 0;  // the tensors so far hold bytes [0, covered) of the data, without holes
  for (const entry& e : entries) {
    const uint64_t begin = static_cast<uint64_t>(e.offsets[0]), end = static_cast<uint64_t>(e.offsets[1]);
    const std::string who = "tensor \"" + e.name + "\"";
    // BF16 and F16 (Hugging Face models are stored so) widen to float exactly.
    const uint64_t element = e.dtype == "F32" ? 4 : e.dtype == "BF16" || e.dtype == "F16" ? 2 : 0;
    if (element == 0) throw fail(who + " has dtype " + e.dtype + "; F32, BF16 and F16 are read");
    if (begin > end || end > data_size)
      throw fail(who + " has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] outside the data (" + std::to_string(data_size) + " bytes)");
    if (begin < covered) throw fail(who + " overlaps \"" + out.back().name + "\"");
    if (begin > covered) throw gap(covered, begin);
    const int64_t n = elements(e.shape);
    if (n < 0 || static_cast<uint64_t>(n) * element != end - begin)
      throw fail(who + " has shape " + shape_text(e.shape) + " but " + std::to_string(end - begin) + " bytes of " +
                 e.dtype);
    named_tensor t{e.name, e.shape, std::vector<float>(static_cast<size_t>(n))};
    const char* from = bytes.data() + data_at + begin;
    if (e.dtype == "F32") {
      std::memcpy(t.values.data(), from, end - begin);
    } else {
      for (size_t i = 0; i < t.values.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, from + 2 * i, 2);
        t.values[i] = e.dtype == "BF16" ? to_float(bf16{h}) : to_float(f16{h});
      }
    }
    out.push_back(std::move(t));
    covered = end;
  }
  if (covered != data_size) throw gap(covered, data_size);
  if (metadata) *metadata = std::move(meta);
  return out;
}

}  // namespace troupe::storage
