// IDX header checks and payload extraction.
#include "storage/idx.hpp"

#include <stdexcept>

#include "storage/gzip_file.hpp"

namespace troupe::storage {

namespace {

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) | b[at + 3];
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Checks magic and length; returns the dimensions.
std::vector<uint32_t> read_header(const std::vector<uint8_t>& b, const std::string& name, uint32_t magic,
                                  size_t dims, const char* what) {
  const size_t header = 4 + 4 * dims;
  auto truncated = [&] {
    return std::runtime_error(name + ": truncated IDX header (" + std::to_string(b.size()) + " bytes, need " +
                              std::to_string(header) + ")");
  };
  if (b.size() < 4) throw truncated();
  if (be32(b, 0) != magic)
    throw std::runtime_error(name + ": wrong magic " + hex(be32(b, 0)) + ", expected " + hex(magic) + " (IDX " +
                             what + ")");
  if (b.size() < header) throw truncated();
  std::vector<uint32_t> d;
  uint64_t payload = 1;
  for (size_t i = 0; i < dims; ++i) {
    d.push_back(be32(b, 4 + 4 * i));
    payload *= d.back();
  }
  if (b.size() - header < payload)
    throw std::runtime_error(name + ": truncated: header promises " + std::to_string(payload) +
                             " data bytes, file has " + std::to_string(b.size() - header));
  if (b.size() - header > payload)
    throw std::runtime_error(name + ": " + std::to_string(b.size() - header - payload) +
                             " unexpected bytes after the data");
  return d;
}

}  // namespace

idx_images parse_idx_images(const std::vector<uint8_t>& bytes, const std::string& name) {
  const auto d = read_header(bytes, name, 0x00000803u, 3, "images");
  idx_images img;
  img.count = d[0];
  img.rows = d[1];
  img.cols = d[2];
  img.pixels.assign(bytes.begin() + 16, bytes.end());
  return img;
}

std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& bytes, const std::string& name) {
  read_header(bytes, name, 0x00000801u, 1, "labels");
  return {bytes.begin() + 8, bytes.end()};
}

idx_images read_idx_images(const std::string& path) { return parse_idx_images(read_maybe_gzip(path), path); }

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  return parse_idx_labels(read_maybe_gzip(path), path);
}

}  // namespace troupe::storage
