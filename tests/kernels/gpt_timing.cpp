// Times one GPT forward + backward on the CPU reference kernels (B=8, T=64, C=128, NH=4,
// blocks=4, V=96) and prints the median of several runs. Not a benchmark suite and not run by
// ctest: a quick number for the kernels' report. Set OPENBLAS_NUM_THREADS=1 for one thread.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/model.hpp"
#include "kernels/train_step.hpp"

int main() {
  using namespace troupe;
  model_spec spec;
  spec.kind = model_kind::gpt;
  spec.vocab = 96;
  spec.context = 64;
  spec.channels = 128;
  spec.heads = 4;
  spec.blocks = 4;
  const int64_t B = 8, T = 64;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(spec.vocab) - 1);
  batch b;
  b.inputs = tensor({B, T});
  for (int64_t i = 0; i < B * T; ++i) {
    b.inputs.data()[i] = static_cast<float>(tok(rng));
    b.targets.push_back(tok(rng));
  }
  layer_stack stack(build_layers(spec), 0, 1);
  std::vector<double> ms;
  double loss = 0.0;
  for (int i = 0; i < 12; ++i) {
    stack.zero_grads();
    const auto t0 = std::chrono::steady_clock::now();
    loss = compute_gradients(stack, b, 1.0f / static_cast<float>(B * T)).mean_loss();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());  // 2 warm-ups
  }
  std::sort(ms.begin(), ms.end());
  std::printf("gpt forward+backward B=%lld T=%lld C=%lld NH=%lld blocks=%lld V=%lld params=%lld: "
              "median %.1f ms (min %.1f, max %.1f), loss %.4f\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(spec.channels),
              static_cast<long long>(spec.heads), static_cast<long long>(spec.blocks),
              static_cast<long long>(spec.vocab), static_cast<long long>(stack.num_params()), ms[ms.size() / 2],
              ms.front(), ms.back(), loss);
  return 0;
}
