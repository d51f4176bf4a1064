// Configure-time check (CMakeLists.txt): exits 1 where the compiler, at the project's Release
// flags, stores the constant {3, 3, 0, 0} as four 3s. GCC 12.2 (Debian 12's) does so on AVX-512
// CPUs with -march=native: its SLP vectorizer emits one vpbroadcastq for a constant with two
// different halves. The function is out of line so the comparison reads what was stored.
#include <cstdint>
#include <vector>
__attribute__((noinline)) int wrong(const std::vector<int64_t>& v) { return !(v[0] == 3 && v[1] == 3 && v[2] == 0 && v[3] == 0); }
int main() { const auto v = std::vector<int64_t>{3, 3, 0, 0}; return wrong(v); }
