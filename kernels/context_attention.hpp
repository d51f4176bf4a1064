// context_attention: a block's causal attention when each sequence of the microbatch is split over
// a context-parallel group (--cp). Each rank holds 2 x cp-th chunks of every sequence (its
// ring_attention::balanced_positions, so every rank has the same attention work under the causal
// mask) and the queries, keys and values of those tokens only. Forward all-gathers the group's
// keys and values and folds them into its queries' online softmax block by block (ring_attention's
// arithmetic); backward gathers them again (nothing of the other ranks' is kept between the two,
// so a rank's stash stays its own tokens'), computes its queries' share of every block's key and
// value gradients and reduce-scatters them back to their owners. This is the all-gather form of
// context parallelism Llama 3 trained with; passing the blocks around a ring instead, so each
// step's transfer hides behind a block's attention, needs point-to-point sends in the group
// interface, which it does not have yet.
//
// The group is the kernels' collective interface (tp_group.hpp), here over the context ranks.
// Host memory only: a GPU stage does not take cp yet.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/device_ops.hpp"
#include "kernels/tp_group.hpp"

namespace troupe::context {

// The sequence positions of this rank's T_local tokens, ascending: balanced_positions of the
// whole sequence (T_local x group size) for the rank. Throws std::invalid_argument when T_local
// is odd (each rank holds two equal chunks).
std::vector<int64_t> positions(const tp_group& g, int64_t T_local);

// What forward leaves for backward, per microbatch: each query row's log-sum-exp per head
// (B, NH, T) then the attention's output (B, T, C), in one tensor of this shape.
std::vector<int64_t> attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t C);

// out (B, T, C) and state from the packed qkv (B, T, 3C) of this rank's T tokens.
void attention_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH);
// dqkv (B, T, 3C), written whole, from the output gradient (B, T, C).
void attention_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                        int64_t T, int64_t C, int64_t NH);

// A block's causal attention over the packed qkv (B, T, 3C) of its NH heads, as the blocks call it:
// with a context group (size > 1) over the group as above, else the device's own (device_ops).
// Makes out (B, T, C) and the state backward needs.
void attend(const device_ops& k, tp_group* group, tensor& out, tensor& state, const tensor& qkv, int64_t C, int64_t NH);
// dqkv (B, T, 3C) from dout and what attend kept.
tensor attend_backward(const device_ops& k, tp_group* group, const tensor& dout, const tensor& qkv, const tensor& state,
                       int64_t C, int64_t NH);

}  // namespace troupe::context
