// A mixture of experts' routing and token movement (see moe_routing.hpp). Plain loops in a fixed
// order.
#include "kernels/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace troupe::moe {

int64_t capacity_for(double factor, int64_t N, int64_t E, int64_t k) {
  if (!(factor >= 0)) throw std::invalid_argument("moe: capacity factor must be >= 0");
  if (factor == 0) return 0;
  return static_cast<int64_t>(std::ceil(factor * static_cast<double>(N * k) / static_cast<double>(E)));
}

routing route(const float* logits, int64_t N, int64_t E, int64_t k, int64_t capacity, bool normalize_top_k,
              float aux_coefficient) {
  if (E < 1 || k < 1 || k > E || capacity < 0 || N < 0)
    throw std::invalid_argument("moe: top-" + std::to_string(k) + " of " + std::to_string(E) +
                                " experts with capacity " + std::to_string(capacity) +
                                ": k must be between 1 and the experts, capacity >= 0");
  routing r;
  r.N = N, r.E = E, r.k = k, r.capacity = capacity;
  r.probs.resize(static_cast<size_t>(N * E));
  r.expert.resize(static_cast<size_t>(N * k));
  r.gate.resize(static_cast<size_t>(N * k));
  r.slot.assign(static_cast<size_t>(N * k), -1);
  r.load.assign(static_cast<size_t>(E), 0);
  r.routed.assign(static_cast<size_t>(E), 0);
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * E;
    float* p = r.probs.data() + n * E;
    const float top = *std::max_element(z, z + E);
    float total = 0;
    for (int64_t e = 0; e < E; ++e) total += p[e] = std::exp(z[e] - top);
    for (int64_t e = 0; e < E; ++e) p[e] /= total;
    for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::stable_sort(order.begin(), order.end(), [p](int32_t a, int32_t b) { return p[a] > p[b]; });
    float chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[order[static_cast<size_t>(j)]];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      const size_t at = static_cast<size_t>(n * k + j);
      r.expert[at] = e;
      r.gate[at] = normalize_top_k ? p[e] / chosen : p[e];
      ++r.routed[static_cast<size_t>(e)];
      if (capacity == 0 || r.load[static_cast<size_t>(e)] < capacity) {
        r.slot[at] = r.load[static_cast<size_t>(e)]++;
      } else {
        ++r.dropped;
      }
    }
  }
  // Load balancing: coefficient * E * sum_e f_e * P_e.
  if (N > 0) {
    double loss = 0;
    for (int64_t e = 0; e < E; ++e) {
      double mean = 0;
      for (int64_t n = 0; n < N; ++n) mean += r.probs[static_cast<size_t>(n * E + e)];
      loss += double(r.routed[static_cast<size_t>(e)]) / double(N * k) * (mean / double(N));
    }
    r.aux_loss = static_cast<float>(aux_coefficient * double(E) * loss);
  }
  return r;
}

std::vector<std::vector<float>> dispatch(const routing& r, const float* x, int64_t H) {
  std::vector<std::vector<float>> out(static_cast<size_t>(r.E));
  for (int64_t e = 0; e < r.E; ++e) out[static_cast<size_t>(e)].assign(static_cast<size_t>(r.load[static_cast<size_t>(e)] * H), 0.0f);
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t at = static_cast<size_t>(n * r.k + j);
      if (r.slot[at] < 0) continue;
      std::copy(x + n * H, x + (n + 1) * H, out[static_cast<size_t>(r.expert[at])].begin() + r.slot[at] * H);
    }
  return out;
}

void combine(const routing& r, const std::vector<std::vector<float>>& expert_out, int64_t H, float* y) {
  std::fill(y, y + r.N * H, 0.0f);
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t at = static_cast<size_t>(n * r.k + j);
      if (r.slot[at] < 0) continue;
      const float* row = expert_out[static_cast<size_t>(r.expert[at])].data() + r.slot[at] * H;
      for (int64_t c = 0; c < H; ++c) y[n * H + c] += r.gate[at] * row[c];
    }
}

combine_grads combine_backward(const routing& r, const std::vector<std::vector<float>>& expert_out, const float* dy,
                               int64_t H, bool normalize_top_k, float aux_coefficient) {
  combine_grads g;
  g.expert_out.resize(static_cast<size_t>(r.E));
  for (int64_t e = 0; e < r.E; ++e)
    g.expert_out[static_cast<size_t>(e)].assign(static_cast<size_t>(r.load[static_cast<size_t>(e)] * H), 0.0f);
  g.logits.assign(static_cast<size_t>(r.N * r.E), 0.0f);
  std::vector<float> dprob(static_cast<size_t>(r.E)), dgate(static_cast<size_t>(r.k));
  for (int64_t n = 0; n < r.N; ++n) {
    const float* p = r.probs.data() + n * r.E;
    // The load-balancing loss: dL/dp_ne = coefficient * E * f_e / N.
    for (int64_t e = 0; e < r.E; ++e)
      dprob[static_cast<size_t>(e)] = aux_coefficient * float(r.E) *
                                      (float(r.routed[static_cast<size_t>(e)]) / float(r.N * r.k)) / float(r.N);
    float weighted = 0, chosen = 0;
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t at = static_cast<size_t>(n * r.k + j);
      float d = 0;
      if (r.slot[at] >= 0) {
        const float* row = expert_out[static_cast<size_t>(r.expert[at])].data() + r.slot[at] * H;
        float* grow = g.expert_out[static_cast<size_t>(r.expert[at])].data() + r.slot[at] * H;
        for (int64_t c = 0; c < H; ++c) {
          d += dy[n * H + c] * row[c];
          grow[c] = r.gate[at] * dy[n * H + c];
        }
      }
      dgate[static_cast<size_t>(j)] = d;
      weighted += d * r.gate[at];
      chosen += p[r.expert[at]];
    }
    for (int64_t j = 0; j < r.k; ++j) {  // gate_j = p_j, or p_j / sum of the chosen p
      const size_t at = static_cast<size_t>(n * r.k + j);
      dprob[static_cast<size_t>(r.expert[at])] +=
          normalize_top_k ? (dgate[static_cast<size_t>(j)] - weighted) / chosen : dgate[static_cast<size_t>(j)];
    }
    float dot = 0;  // softmax: dz_i = p_i (dp_i - sum_e p_e dp_e)
    for (int64_t e = 0; e < r.E; ++e) dot += p[e] * dprob[static_cast<size_t>(e)];
    for (int64_t e = 0; e < r.E; ++e) g.logits[static_cast<size_t>(n * r.E + e)] = p[e] * (dprob[static_cast<size_t>(e)] - dot);
  }
  return g;
}

void dispatch_backward(const routing& r, const std::vector<std::vector<float>>& expert_in_grad, int64_t H, float* dx) {
  for (int64_t n = 0; n < r.N; ++n)
    for (int64_t j = 0; j < r.k; ++j) {
      const size_t at = static_cast<size_t>(n * r.k + j);
      if (r.slot[at] < 0) continue;
      const float* row = expert_in_grad[static_cast<size_t>(r.expert[at])].data() + r.slot[at] * H;
      for (int64_t c = 0; c < H; ++c) dx[n * H + c] += row[c];
    }
}

}  // namespace troupe::moe
