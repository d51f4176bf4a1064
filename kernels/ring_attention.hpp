// ring_attention: causal attention computed one block of keys and values at a time, with the
// softmax combined online (a running maximum and sum per query row, as flash attention does
// within one device), so a rank holding only some of a sequence's queries can meet the other
// ranks' keys and values as they pass around a ring and still get exactly softmax(QK^T)V for its
// rows. This is context parallelism's arithmetic (Liu et al. 2023's ring attention, with the
// causal load balancing Megatron-Core and Llama 3 use); context_attention.hpp moves the blocks
// between the ranks of a --cp group in each of its three modes.
//
// Positions, not offsets, decide the causal mask, so a rank's queries need not be contiguous:
// balanced_positions() gives rank r of n the chunks r and 2n-1-r of 2n, which gives every rank
// the same number of (query, key) pairs under the mask.
//
// Layout: row-major rows of C = NH * hs floats with head h at columns [h*hs, (h+1)*hs), each
// operand with its own row stride (so q, k and v can be read in place from a packed (T, 3C)
// qkv). Every sum runs in a fixed order (blocks in the order given, within a block the GEMM's
// for the block's shape), so a run repeats bit for bit; against one device's attention the sums
// differ only in order.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::ring_attention {

// The sequence positions rank r of n holds, ascending: chunks r and 2n - 1 - r of 2n equal
// chunks of T. Throws std::invalid_argument unless 2n divides T and 0 <= r < n.
std::vector<int64_t> balanced_positions(int64_t T, int n, int r);

// A strided operand: rows of `stride` floats, the row of position index i at data + i * stride.
struct rows {
  const float* data = nullptr;
  int64_t stride = 0;
};
struct mutable_rows {
  float* data = nullptr;
  int64_t stride = 0;
};

// One rank's running forward state over its Tq query rows: the unnormalized output (Tq, C) and,
// per head and row, the running maximum of the scores and the sum of their exponentials.
struct partial {
  int64_t Tq = 0, C = 0, NH = 0;
  std::vector<float> out;  // (Tq, C)
  std::vector<float> max;  // (NH, Tq), -inf before any key
  std::vector<float> sum;  // (NH, Tq)
};
partial start(int64_t Tq, int64_t C, int64_t NH);

// Folds one block of Tk keys and values (at positions k_pos) into the state of the queries q (at
// positions q_pos): a key attends to a query when its position is not after the query's.
void accumulate(partial& p, rows q, const int64_t* q_pos, rows k, rows v, const int64_t* k_pos, int64_t Tk);

// The attention output (Tq rows) and each row's log-sum-exp of its scores, (NH, Tq): what the
// backward needs instead of the probabilities. Throws if a row met no key.
void finish(const partial& p, mutable_rows out, float* lse);

// Per head and row, D = sum over the head's columns of dout * out (the softmax backward's
// correction term), (NH, Tq).
void row_dots(rows dout, rows out, int64_t Tq, int64_t C, int64_t NH, float* D);

// The backward of one block: with the probabilities recomputed from lse, adds this block's share
// of dQ into dq (Tq rows) and its dK and dV into dk and dv (Tk rows; a ring carries them back to
// the block's owner, which sums what every rank adds).
void backward_block(rows q, const int64_t* q_pos, int64_t Tq, rows dout, const float* lse, const float* D, rows k,
                    rows v, const int64_t* k_pos, int64_t Tk, int64_t C, int64_t NH, mutable_rows dq,
                    mutable_rows dk, mutable_rows dv);

}  // namespace troupe::ring_attention
