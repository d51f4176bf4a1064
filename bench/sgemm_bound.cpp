// The GEMM ceiling a CPU training step is measured against: OpenBLAS sgemm GFLOP/s on a large
// square product, and the GPT step's own GEMMs (every linear's forward and both backward
// products, at the model's shapes) timed alone, at each thread count asked for: once with
// OpenBLAS's own threads, then as the kernels run them (ops::matmul_*, fixed row blocks on the
// device's threads) on each GEMM library the kernels can use. Also prints the GPT's FLOPs per
// step counted from its shape. It trains nothing and times no other op.
//
//   sgemm_bound [--threads 1,2] [--vocab 96] [--batch 16] [--context 64] [--channels 128] [--blocks 4]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench/load_average.hpp"
#include "kernels/blas_runtime.hpp"
#include "kernels/gemm_library.hpp"
#include "kernels/ops.hpp"
#include "kernels/parallel.hpp"

namespace {

struct gemm {
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
};

struct gpt_shape {
  int64_t vocab = 96, batch = 16, context = 64, channels = 128, blocks = 4;
};

// A linear (in -> out) over N rows, as kernels/ops_dense.cpp calls sgemm: forward, the input
// gradient, and the weight gradient.
void add_linear(std::vector<gemm>& g, int N, int in, int out) {
  g.push_back({CblasNoTrans, CblasTrans, N, out, in});
  g.push_back({CblasNoTrans, CblasNoTrans, N, in, out});
  g.push_back({CblasTrans, CblasNoTrans, out, in, N});
}

std::vector<gemm> gpt_gemms(const gpt_shape& s) {
  const int N = static_cast<int>(s.batch * s.context), C = static_cast<int>(s.channels);
  std::vector<gemm> g;
  for (int64_t b = 0; b < s.blocks; ++b) {
    add_linear(g, N, C, 3 * C);
    add_linear(g, N, C, C);
    add_linear(g, N, C, 4 * C);
    add_linear(g, N, 4 * C, C);
  }
  add_linear(g, N, C, static_cast<int>(s.vocab));
  return g;
}

double flops_of(const std::vector<gemm>& g) {
  double f = 0;
  for (const gemm& x : g) f += 2.0 * x.m * x.n * x.k;
  return f;
}

// The fastest of `repeats` passes over `g` (after warm-ups), each product on its own buffers: on
// a shared machine the best pass is the closest to what the cores can do, so the bound is not
// lowered by other work.
double time_gemms(const std::vector<gemm>& g, int repeats) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> a(g.size()), b(g.size()), c(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    a[i].resize(static_cast<size_t>(g[i].m) * g[i].k);
    b[i].resize(static_cast<size_t>(g[i].k) * g[i].n);
    c[i].assign(static_cast<size_t>(g[i].m) * g[i].n, 0.0f);
    for (float& v : a[i]) v = u(rng);
    for (float& v : b[i]) v = u(rng);
  }
  std::vector<double> secs;
  for (int r = 0; r < repeats + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < g.size(); ++i) {
      const gemm& x = g[i];
      const int lda = x.ta == CblasNoTrans ? x.k : x.m, ldb = x.tb == CblasNoTrans ? x.n : x.k;
      cblas_sgemm(CblasRowMajor, x.ta, x.tb, x.m, x.n, x.k, 1.0f, a[i].data(), lda, b[i].data(), ldb, 0.0f,
                  c[i].data(), x.n);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) secs.push_back(s);
  }
  return *std::min_element(secs.begin(), secs.end());
}

struct linear_shape {
  int64_t in, out;
};

std::vector<linear_shape> gpt_linears(const gpt_shape& s) {
  std::vector<linear_shape> l;
  const int64_t C = s.channels;
  for (int64_t b = 0; b < s.blocks; ++b)
    for (linear_shape x : {linear_shape{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) l.push_back(x);
  l.push_back({C, s.vocab});
  return l;
}

// The same products as gpt_gemms, as a step runs them (the fastest pass, as above): through ops::matmul_*, each cut into
// the kernels' fixed row blocks on the device's threads, on the GEMM library in use (on one thread per block).
double time_ops(const gpt_shape& s, int repeats) {
  const int64_t N = s.batch * s.context;
  const std::vector<linear_shape> ls = gpt_linears(s);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  struct bufs {
    std::vector<float> x, w, y, dy, dx, dw;
  };
  std::vector<bufs> b(ls.size());
  for (size_t i = 0; i < ls.size(); ++i) {
    b[i].x.resize(static_cast<size_t>(N * ls[i].in));
    b[i].w.resize(static_cast<size_t>(ls[i].in * ls[i].out));
    b[i].dy.resize(static_cast<size_t>(N * ls[i].out));
    for (auto* v : {&b[i].x, &b[i].w, &b[i].dy})
      for (float& f : *v) f = u(rng);
    b[i].y.resize(static_cast<size_t>(N * ls[i].out));
    b[i].dx.resize(static_cast<size_t>(N * ls[i].in));
    b[i].dw.assign(static_cast<size_t>(ls[i].in * ls[i].out), 0.0f);
  }
  std::vector<double> secs;
  for (int r = 0; r < repeats + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < ls.size(); ++i) {
      const int64_t in = ls[i].in, out = ls[i].out;
      troupe::ops::matmul_forward(b[i].y.data(), b[i].x.data(), b[i].w.data(), nullptr, N, in, out);
      troupe::ops::matmul_backward_input(b[i].dx.data(), b[i].dy.data(), b[i].w.data(), N, in, out);
      troupe::ops::matmul_backward_weight(b[i].dw.data(), nullptr, b[i].dy.data(), b[i].x.data(), N, in, out);
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) secs.push_back(sec);
  }
  return *std::min_element(secs.begin(), secs.end());
}

}  // namespace

int main(int argc, char** argv) {
  gpt_shape s;
  std::vector<int> threads{1, 2};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (k == "--threads") {
      threads.clear();
      for (const char* p = argv[i + 1]; *p;) {
        threads.push_back(std::atoi(p));
        p = std::strchr(p, ',') ? std::strchr(p, ',') + 1 : p + std::strlen(p);
      }
    } else if (k == "--vocab") s.vocab = v;
    else if (k == "--batch") s.batch = v;
    else if (k == "--context") s.context = v;
    else if (k == "--channels") s.channels = v;
    else if (k == "--blocks") s.blocks = v;
    else {
      std::fprintf(stderr, "usage: %s [--threads 1,2] [--vocab V] [--batch B] [--context T] [--channels C] [--blocks L]\n",
                   argv[0]);
      return 2;
    }
  }
  troupe::ensure_blas_kernels();
  const int64_t N = s.batch * s.context, C = s.channels, L = s.blocks, T = s.context;
  // Linears: 6 FLOPs per multiply-add of a weight (2 forward, 2 for the input gradient, 2 for the
  // weight gradient); causal attention: QK^T and AV over t2 <= t, forward 2 * B*T(T+1)/2*C each,
  // backward twice the forward.
  const double linear = 6.0 * N * (12.0 * L * C * C + C * s.vocab);
  const double attention = 6.0 * L * s.batch * T * (T + 1) * C;
  std::printf("GPT B=%lld T=%lld C=%lld blocks=%lld V=%lld: FLOPs per step = 6*N*(12*L*C^2 + C*V) + 6*L*B*T*(T+1)*C "
              "= %.3f + %.3f = %.3f GFLOP (N = B*T; layernorm, GELU, softmax and AdamW not counted)\n",
              static_cast<long long>(s.batch), static_cast<long long>(T), static_cast<long long>(C),
              static_cast<long long>(L), static_cast<long long>(s.vocab), linear / 1e9, attention / 1e9,
              (linear + attention) / 1e9);
  const std::vector<gemm> square{{CblasNoTrans, CblasNoTrans, 1024, 1024, 1024}};
  const std::vector<gemm> step = gpt_gemms(s);
  const troupe::gemm_library in_use = troupe::gemm_library_in_use();
  std::printf("OpenBLAS %s; the kernels' GEMM library here: %s (%s); load average %s\n",
              troupe::blas_core_name().c_str(), troupe::to_string(in_use),
              troupe::describe_gemm_library(in_use).c_str(), troupe::bench::load_average().c_str());
  std::printf("| threads | sgemm 1024^3 GFLOP/s | the GPT step's %zu GEMMs: ms | their GFLOP/s |", step.size());
  for (troupe::gemm_library l : troupe::all_gemm_libraries)
    std::printf(" as the kernels run them on %s (blocks on the device's threads): ms | GFLOP/s |", troupe::to_string(l));
  std::printf("\n|---:|---:|---:|---:|");
  for (size_t i = 0; i < std::size(troupe::all_gemm_libraries); ++i) std::printf("---:|---:|");
  std::printf("\n");
  for (int t : threads) {
    troupe::set_blas_threads(t);  // OpenBLAS's own threads, for the first three columns
    troupe::set_kernel_threads(1);
    const double sq = time_gemms(square, 15);
    const double st = time_gemms(step, 15);
    troupe::set_blas_threads(1);
    troupe::set_kernel_threads(t);
    std::printf("| %d | %.1f | %.2f | %.1f |", t, flops_of(square) / sq / 1e9, st * 1e3, flops_of(step) / st / 1e9);
    for (troupe::gemm_library l : troupe::all_gemm_libraries) {
      troupe::use_gemm_library(l);
      const double so = time_ops(s, 15);
      std::printf(" %.2f | %.1f |", so * 1e3, flops_of(step) / so / 1e9);
    }
    troupe::use_gemm_library(in_use);
    std::printf("\n");
  }
  return 0;
}
