// zlib's gz* interface inflates gzip files and passes plain files through unchanged.
#include "storage/gzip_file.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

#include "storage/input_file.hpp"

namespace troupe::storage {

std::vector<uint8_t> read_maybe_gzip(const std::string& path, uint64_t max_bytes) {
  const int fd = open_input_file(path, "data file", max_bytes);
  gzFile f = gzdopen(fd, "rb");  // owns fd from here
  if (!f) {
    ::close(fd);
    throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  }
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> out;
  uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(f, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      throw std::runtime_error(path + ": corrupt compressed data (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
    if (out.size() > max_bytes) {  // a small file that inflates without bound
      gzclose(f);
      throw std::runtime_error("data file " + path + ": inflates past the " + input_size(max_bytes) +
                               " a data file may have");
    }
  }
  int code = 0;
  const char* msg = gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    std::string m = msg;
    gzclose(f);
    throw std::runtime_error(path + ": corrupt or truncated compressed data (" + m + ")");
  }
  gzclose(f);
  return out;
}

}  // namespace troupe::storage
