// The IDX format of (Fashion-)MNIST: a big-endian header (magic 0x0801 for labels, 0x0803 for
// images, then the dimensions) followed by unsigned bytes. Only the unsigned-byte type is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::storage {

struct idx_images {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // (count, rows, cols)
};

// Each throws std::runtime_error naming the file: missing, wrong magic, truncated, or extra data.
idx_images read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

// Parsers over bytes already in memory; `name` is used in error messages.
idx_images parse_idx_images(const std::vector<uint8_t>& bytes, const std::string& name);
std::vector<uint8_t> parse_idx_labels(const std::vector<uint8_t>& bytes, const std::string& name);

}  // namespace troupe::storage
