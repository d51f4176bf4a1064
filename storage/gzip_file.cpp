// zlib's gz* interface inflates gzip files and passes plain files through unchanged.
#include "storage/gzip_file.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <sys/stat.h>

namespace troupe::storage {

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  if (S_ISDIR(st.st_mode)) throw std::runtime_error(path + ": is a directory, expected a file");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
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
