// /proc/loadavg as "1.80 1.71 1.79", for a benchmark to print beside its figures. Nothing else:
// it neither waits for an idle machine nor corrects a figure for the load.
#pragma once

#include <cstdio>
#include <string>

namespace troupe::bench {

// Other work on a shared machine moves every figure, so the figure carries the load it was taken
// under; "-1.00 ..." where /proc is not there to ask.
inline std::string load_average() {
  double a = -1, b = -1, c = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3) a = b = c = -1;
    std::fclose(f);
  }
  char out[64];
  std::snprintf(out, sizeof out, "%.2f %.2f %.2f", a, b, c);
  return out;
}

}  // namespace troupe::bench
