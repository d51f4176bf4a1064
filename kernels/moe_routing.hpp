// moe_routing: a mixture of experts' router and token movement, the arithmetic expert
// parallelism distributes. A router's logits (N tokens x E experts) give each token a softmax
// over the experts; it goes to its top_k (ties to the lower index), weighted by their
// probabilities (renormalized over the k, as Mixtral and Qwen do, or not, as Switch and GShard
// do). An expert takes at most `capacity` tokens, in token order, and drops the rest (their
// weight is lost: the token keeps only what its other experts return); capacity 0 drops none.
// The load-balancing loss is Switch's and Megatron-Core's: coefficient x E x sum over experts of
// f_e (the share of the N x k assignments the router made to e, before drops) times P_e (e's mean
// probability), 1 x coefficient when the load is even. The GPT's MoE blocks (--experts) route with
// it; expert parallelism (--ep) and its all-to-alls are not built yet.
//
// Every sum runs in a fixed order (tokens ascending, a token's choices in rank order), so a run
// repeats bit for bit.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::moe {

struct routing {
  int64_t N = 0, E = 0, k = 0, capacity = 0;
  std::vector<float> probs;    // (N, E): the router's softmax
  std::vector<int32_t> expert; // (N, k): each token's choices, best first
  std::vector<float> gate;     // (N, k): their weights
  std::vector<int64_t> slot;   // (N, k): the row in the expert's buffer, -1 when dropped
  std::vector<int64_t> load;   // (E): tokens each expert took (after drops)
  std::vector<int64_t> routed; // (E): assignments the router made to each (before drops)
  int64_t dropped = 0;         // assignments dropped for capacity
  float aux_loss = 0;          // the load-balancing loss, with the coefficient applied
};

// Throws std::invalid_argument unless 1 <= k <= E and capacity >= 0.
routing route(const float* logits, int64_t N, int64_t E, int64_t k, int64_t capacity, bool normalize_top_k,
              float aux_coefficient);

// The capacity a factor gives (GShard's): ceil(factor x N x k / E); factor 0 gives 0 (dropless).
int64_t capacity_for(double factor, int64_t N, int64_t E, int64_t k);

// Expert e's input rows: buffer (load[e], H) per expert, the tokens it took in slot order.
std::vector<std::vector<float>> dispatch(const routing& r, const float* x, int64_t H);

// y (N, H) = sum over a token's kept choices of gate x the expert's output row.
void combine(const routing& r, const std::vector<std::vector<float>>& expert_out, int64_t H, float* y);

// Backward of combine and of the router: given dy (N, H) and the experts' outputs, the gradient of
// each expert's output rows (gate x dy, per expert buffer) and of the router's logits (N, E),
// including the load-balancing loss's (its f_e held constant, as the frameworks do).
struct combine_grads {
  std::vector<std::vector<float>> expert_out;  // per expert, (load[e], H)
  std::vector<float> logits;                   // (N, E)
};
combine_grads combine_backward(const routing& r, const std::vector<std::vector<float>>& expert_out, const float* dy,
                               int64_t H, bool normalize_top_k, float aux_coefficient);

// Backward of dispatch: dx (N, H) += each expert's input-row gradients, back at their tokens.
void dispatch_backward(const routing& r, const std::vector<std::vector<float>>& expert_in_grad, int64_t H, float* dx);

}  // namespace troupe::moe
