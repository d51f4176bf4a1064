// Reads a whole file into memory, inflating it if it is gzip-compressed (zlib reads plain
// files transparently). Errors name the file and what went wrong; nothing is parsed here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::storage {

// Throws std::runtime_error("<path>: <reason>") for a missing, unreadable or corrupt file.
std::vector<uint8_t> read_maybe_gzip(const std::string& path);

}  // namespace troupe::storage
