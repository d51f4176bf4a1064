// builders: the textbook pipeline schedules as pure functions returning compute-only schedules
// (forward/backward actions per stage, in order). They insert no send/recv, gradient reduction
// or optimizer step: passes.hpp adds those, and `complete()` there composes the full step.
// Bad arguments throw std::invalid_argument naming the argument.
#pragma once

#include "schedules/schedule.hpp"

namespace troupe::sched {

// GPipe: every stage runs all M forwards, then all M backwards (microbatch order 0..M-1).
// Peak live activations: M on every stage. Bubble (uniform costs): (P-1)/(M+P-1).
schedule gpipe(int num_stages, int num_microbatches);

// 1F1B, PipeDream-flush: stage s runs min(P-1-s, M) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. Same bubble as GPipe, but
// stage s holds at most min(P-s, M) live activations.
schedule one_f_one_b(int num_stages, int num_microbatches);

// Interleaved 1F1B (Megatron-LM): each device holds v chunks (see schedule.hpp for the layout)
// and runs its M*v chunk-microbatch units in the order Megatron uses: microbatches in groups of
// P, each group going through chunk 0, then chunk 1, ... on forward (the reverse on backward).
// Warm-up is (P-1-d)*2 + (v-1)*P forwards on device d. Bubble: (P-1)/(v*M+P-1) when each
// chunk costs F/v and B/v.
// Requires M % P == 0: a group of P microbatches is exactly what keeps the P devices busy
// while one round of chunks passes through them, so the output of device P-1's chunk c arrives
// at device 0 just as it finishes the group on chunk c. A partial group would leave the round
// short and the fixed group order would then make devices wait (or need a different order).
schedule interleaved_1f1b(int num_stages, int num_microbatches, int virtual_stages);

// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): backward is split into
// backward_input ("B" in the paper, on the critical path) and backward_weight ("W", off it).
// Stage s keeps 1F1B's warm-up of P-1-s forwards and its F/B order, but lets up to s weight
// halves wait: a W runs right after a B only once s of them are pending; the deferred ones fill
// the tail. An activation is freed at W, so every stage holds at most min(P, M) live
// activations: the same peak as 1F1B (whose stage 0 holds P). Bubble per stage with costs
// F, B(input), W: (P-1)(F+B-W), against 1F1B's (P-1)(F+B+W) with a full backward of B+W.
schedule zb_h1(int num_stages, int num_microbatches);

}  // namespace troupe::sched
