// The value of a benchmark's command-line flag, given as `--flag=value` or `--flag value`: `a`
// becomes the flag's name. Throws std::invalid_argument when the value is missing.
#pragma once

#include <stdexcept>
#include <string>

namespace troupe::bench {

inline std::string flag_value(std::string& a, int& i, int argc, char** argv) {
  if (const auto eq = a.find('='); eq != std::string::npos) {
    std::string v = a.substr(eq + 1);
    a = a.substr(0, eq);
    return v;
  }
  if (i + 1 < argc) return argv[++i];
  throw std::invalid_argument(a + " needs a value");
}

}  // namespace troupe::bench
