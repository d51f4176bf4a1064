// Reads a whole file into memory, inflating it if it is gzip-compressed (zlib reads plain
// files transparently). Errors name the file and what went wrong; nothing is parsed here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::storage {

// Throws input_error (input_file.hpp: bad input, as a configuration's) for a missing file, one
// that is not a regular file or one larger than max_bytes; std::runtime_error("<path>: <reason>")
// for one that cannot be read or inflates past max_bytes or is corrupt.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, uint64_t max_bytes = uint64_t{8} << 30);

}  // namespace troupe::storage
