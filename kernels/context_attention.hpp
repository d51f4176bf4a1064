// context_attention: a block's causal attention when each sequence of the microbatch is split over
// a context-parallel group (--cp). Each rank holds 2 x cp-th chunks of every sequence (its
// ring_attention::balanced_positions, so every rank has the same attention work under the causal
// mask) and the queries, keys and values of those tokens only. Three ways to meet the others'
// (--cp-mode, the forms Megatron-Core offers as cp_comm_type):
//  - all-gather (context_attention.cpp): forward gathers the group's keys and values and folds them
//    into its queries' online softmax block by block; backward gathers them again, computes its
//    queries' share of every block's key and value gradients and reduce-scatters them back. Llama
//    3's form: two collectives per attention.
//  - ring (context_ring.cpp): the blocks pass around the group one step at a time (shift), each
//    step's transfer running while the block before it is folded in; backward passes each block's
//    key and value gradients along with it, so they arrive home summed. Liu et al.'s ring
//    attention: one block in flight, never the whole sequence's keys on a rank.
//  - all-to-all (context_ulysses.cpp): DeepSpeed-Ulysses. An all-to-all turns "my tokens, all
//    heads" into "all tokens, my heads" (heads must divide by the group), attention runs on the
//    whole sequence for those heads, and a second all-to-all turns the output back.
// In every mode forward keeps the same state (each query row's log-sum-exp per head, then the
// output, as many floats as the rank's tokens and heads), and nothing of the other ranks' is kept
// between forward and backward: the stash stays 1/cp of the unsplit model's.
//
// The group is the kernels' collective interface (tp_group.hpp), here over the context ranks.
// Host memory only: a GPU stage does not take cp yet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/device_ops.hpp"
#include "kernels/tp_group.hpp"

namespace troupe::context {

enum class cp_mode : uint8_t { all_gather, ring, all_to_all };
const char* to_string(cp_mode m);  // "all-gather", "ring", "all-to-all"
std::optional<cp_mode> parse_cp_mode(const std::string& text);

// What a layer holds of context parallelism: its group (null or of one: none) and the mode.
struct context_split {
  context_split() = default;
  context_split(tp_group* g, cp_mode m = cp_mode::all_gather) : group(tp_size(g) > 1 ? g : nullptr), mode(m) {}
  tp_group* group = nullptr;
  cp_mode mode = cp_mode::all_gather;
  explicit operator bool() const { return group != nullptr; }
};

// Why `mode` cannot split a block of NH heads over `ranks` context ranks, or empty: the
// all-to-all needs the heads to divide evenly.
std::string refuses(cp_mode mode, int64_t NH, int ranks);

// The sequence positions of this rank's T_local tokens, ascending: balanced_positions of the
// whole sequence (T_local x group size) for the rank. Throws std::invalid_argument when T_local
// is odd (each rank holds two equal chunks).
std::vector<int64_t> positions(const tp_group& g, int64_t T_local);

// What forward leaves for backward, per microbatch: each query row's log-sum-exp per head
// (B, NH, T) then the attention's output (B, T, C), in one tensor of this shape.
std::vector<int64_t> attention_state_shape(int64_t B, int64_t NH, int64_t T, int64_t C);

// out (B, T, C) and state from the packed qkv (B, T, 3C) of this rank's T tokens, in `mode`.
void attention_forward(tp_group& g, cp_mode mode, float* out, float* state, const float* qkv, int64_t B, int64_t T,
                       int64_t C, int64_t NH);
// dqkv (B, T, 3C), written whole, from the output gradient (B, T, C).
void attention_backward(tp_group& g, cp_mode mode, float* dqkv, const float* dout, const float* qkv,
                        const float* state, int64_t B, int64_t T, int64_t C, int64_t NH);

// Each mode's own (attention_forward and _backward call them).
void gather_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
void gather_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                     int64_t T, int64_t C, int64_t NH);
void ring_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C, int64_t NH);
void ring_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                   int64_t T, int64_t C, int64_t NH);
void ulysses_forward(tp_group& g, float* out, float* state, const float* qkv, int64_t B, int64_t T, int64_t C,
                     int64_t NH);
void ulysses_backward(tp_group& g, float* dqkv, const float* dout, const float* qkv, const float* state, int64_t B,
                      int64_t T, int64_t C, int64_t NH);

// A block's causal attention over the packed qkv (B, T, 3C) of its NH heads, as the blocks call it:
// with a context group over the group as above, else the device's own (device_ops). Makes out
// (B, T, C) and the state backward needs.
void attend(const device_ops& k, const context_split& split, tensor& out, tensor& state, const tensor& qkv, int64_t C,
            int64_t NH);
// dqkv (B, T, 3C) from dout and what attend kept.
tensor attend_backward(const device_ops& k, const context_split& split, const tensor& dout, const tensor& qkv,
                       const tensor& state, int64_t C, int64_t NH);

}  // namespace troupe::context
