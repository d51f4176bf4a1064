// The planner's newer forms against their formulas: context parallelism (activations split over
// cp, the ring's traffic), mixture of experts with expert parallelism (parameters, the
// all-to-alls' bytes and where they cross nodes), FP8 (its peak, its casts, its weight copies),
// uneven chunks, the stack's overlap, and the text forms of the new choices.
#include <gtest/gtest.h>

#include <string>

#include "schedules/plan/plan.hpp"
#include "tests/schedules/plan/test_cluster.hpp"

namespace troupe::sched::plan {
namespace {

// The test cluster with an FP8 peak twice its bf16 one; memory is asserted on, never a limit here.
cluster_desc cluster(int nodes, double inter_bytes_per_second = 20e9) {
  cluster_desc cl = test_cluster(nodes, inter_bytes_per_second);
  cl.device.peak(gemm_precision{dtype::bf16, false, fp8_scaling::tensor}) = 200e12;
  cl.device.memory_bytes = 1e6 * gib;
  return cl;
}

// Llama-like: grouped-query attention, SwiGLU, flash attention, no dropout.
model_desc dense() {
  model_desc m;
  m.name = "dense";
  m.layers = 8;
  m.hidden = 2048;
  m.heads = 16;
  m.kv_heads = 4;
  m.ffn_hidden = 5632;
  m.activation = activation_kind::swiglu;
  m.fused_attention = true;
  m.dropout = false;
  m.tied_embeddings = false;
  m.sequence = 8192;
  m.vocab = 32000;
  return m;
}

model_desc moe() {
  model_desc m = dense();
  m.name = "moe";
  m.experts = 16;
  m.top_k = 2;
  m.moe_ffn_hidden = 1024;
  m.head_dim = 256;  // 16 heads of 256 over hidden 2048
  return m;
}

plan_config config(mesh m, int global_batch) {
  plan_config c;
  c.m = m;
  c.global_batch = global_batch;
  c.rc = recompute_mode::none;
  c.sequence_parallel = true;
  return c;
}

TEST(schedules_plan_forms, context_parallelism_halves_each_ranks_activations_and_keeps_the_micro_batches) {
  // The same dp, pp and tp, so the same micro-batches in flight; cp 2 on twice the GPUs.
  const plan_config one = config({1, 2, 4, 1}, 8);
  plan_config two = one;
  two.cp = 2;
  const plan_result a = evaluate(dense(), cluster(1), one), b = evaluate(dense(), cluster(2), two);
  ASSERT_EQ(a.config.microbatches(), b.config.microbatches());
  EXPECT_NEAR(b.memory.activations / a.memory.activations, 0.5, 1e-12);
  // Model FLOPs per sequence do not depend on the split; per GPU they halve with twice the GPUs.
  EXPECT_LT(b.step_seconds, a.step_seconds);
}

TEST(schedules_plan_forms, the_ring_shows_what_outlasts_attention_and_each_step_passes_a_k_and_v_block) {
  // cp 4 with tp 4 spans two nodes, so the ring's steps run on the NIC; slow enough that they
  // outlast attention at both bandwidths, halving the bandwidth adds exactly the ring's bytes
  // once more: (cp - 1) steps of a k and v block forward, twice that backward, per layer and
  // micro-batch.
  model_desc md = dense();
  plan_config c = config({1, 1, 4, 1}, 4);
  c.cp = 4;
  const plan_result fast = evaluate(md, cluster(2, 2e9), c), slow = evaluate(md, cluster(2, 1e9), c);
  ASSERT_GT(fast.breakdown.context_parallel, 0);
  const double rows = md.sequence / c.cp, block = 2 * 2 * rows * md.kv_width() / c.m.tp;
  const double per_layer = (c.cp - 1) * 3 * block;
  const double expected = c.microbatches() * md.layers * per_layer * (1 / 1e9 - 1 / 2e9);
  EXPECT_NEAR(slow.breakdown.context_parallel - fast.breakdown.context_parallel, expected, 1e-9 * expected);
  // Inside a node on NVLink the same ring hides under attention.
  plan_config inside = config({1, 1, 2, 1}, 4);
  inside.cp = 4;
  EXPECT_EQ(evaluate(md, cluster(1), inside).breakdown.context_parallel, 0);
}

// Llama 3's all-gather form: the same attention as the ring's (each rank's queries against every
// key), its k and v gathered with nothing to hide behind. Inside a node, where the ring hides
// whole, it still shows; and it is nothing but the all-gather forward and the all-gather and
// reduce-scatter backward of every rank's k|v. (Across nodes it can beat the ring: a gather
// runs hierarchically, while every ring step waits on its NIC hop.)
TEST(schedules_plan_forms, the_all_gather_form_computes_what_the_ring_does_and_shows_all_its_traffic) {
  model_desc md = dense();
  for (int nodes : {1, 2}) {
    SCOPED_TRACE(std::to_string(nodes) + " node(s)");
    plan_config ring = config({1, 1, nodes == 1 ? 2 : 4, 1}, 4);
    ring.cp = 4;
    plan_config gathered = ring;
    gathered.cp_attention = cp_kind::all_gather;
    const plan_result r = evaluate(md, cluster(nodes, 2e9), ring), g = evaluate(md, cluster(nodes, 2e9), gathered);
    EXPECT_EQ(check(md, cluster(nodes, 2e9), gathered), "");
    EXPECT_NEAR(g.breakdown.compute, r.breakdown.compute, 1e-12 * r.breakdown.compute);
    EXPECT_GT(g.breakdown.context_parallel, 0);
    if (nodes == 1) {
      EXPECT_EQ(r.breakdown.context_parallel, 0);
    }
    const double rows = md.sequence / gathered.cp;
    const double bytes = 2 * 2 * rows * md.kv_width() / gathered.m.tp * gathered.cp;
    const cluster_desc cl = cluster(nodes, 2e9);
    const double per_layer = 2 * group_collective_seconds(collective::all_gather, bytes, gathered.cp, gathered.m.tp, cl) +
                             group_collective_seconds(collective::reduce_scatter, bytes, gathered.cp, gathered.m.tp, cl);
    const double expected = gathered.microbatches() * md.layers * per_layer;
    EXPECT_NEAR(g.breakdown.context_parallel, expected, 1e-9 * expected);
  }
  model_desc odd = dense();
  odd.sequence = 4100;  // divides by cp 4, not into 2 x 4 chunks
  plan_config c = config({1, 1, 2, 1}, 4);
  c.cp = 4;
  c.cp_attention = cp_kind::all_gather;
  EXPECT_NE(check(odd, cluster(1), c).find("all-gather attention splits the 4100-token sequence into 2 x cp = 8"),
            std::string::npos);
}

TEST(schedules_plan_forms, a_mixture_of_experts_counts_every_expert_as_parameters_and_top_k_as_flops) {
  const model_desc m = moe();
  const double attention = 2 * 2048.0 * 16 * 256 + 2 * 2048.0 * 4 * 256;
  const double expert = 3 * 2048.0 * 1024;
  EXPECT_DOUBLE_EQ(m.layer_gemm_parameters(), attention + 16 * expert + 2048.0 * 16);
  EXPECT_DOUBLE_EQ(m.active_layer_gemm_parameters(), attention + 2 * expert + 2048.0 * 16);
  EXPECT_DOUBLE_EQ(m.layer_expert_parameters(), 16 * expert);
  const double s = m.sequence;
  EXPECT_DOUBLE_EQ(m.model_flops_per_sequence(),
                   3 * (2 * s * 8 * m.active_layer_gemm_parameters() + 4 * s * s * m.q_width() * 8 + 2 * s * 2048 * 32000));
  EXPECT_NE(m.describe_shape().find("head dim 256, MoE 16 experts top-2 SwiGLU 1024"), std::string::npos)
      << m.describe_shape();
}

TEST(schedules_plan_forms, expert_parallelism_splits_the_experts_and_pays_four_all_to_alls_per_layer) {
  const model_desc m = moe();
  // 4 nodes, tp 2, dp 16, Megatron's order: a stage's 32 ranks are contiguous, 8 to a node, so an
  // expert group of 16 spans two nodes: half of each rank's routed bytes cross its NIC.
  plan_config c = config({16, 1, 2, 1}, 32);
  c.order = rank_order::tp_cp_dp_pp;
  plan_config split = c;
  split.ep = 16;
  const cluster_desc cl = cluster(4);
  const plan_result whole = evaluate(m, cl, c), spread = evaluate(m, cl, split);
  const double tokens = m.sequence / c.m.tp, routed = tokens * m.top_k, bytes = 2 * routed * m.hidden;
  const double a2a = all_to_all_seconds(bytes, 16, 8, 2, cl);
  EXPECT_DOUBLE_EQ(a2a, bytes * 8 / 16 / 20e9);  // the NIC's half outlasts NVLink's 7/16
  EXPECT_NEAR(spread.breakdown.expert_parallel, c.microbatches() * m.layers * 4 * a2a, 1e-9);
  EXPECT_EQ(whole.breakdown.expert_parallel, 0);
  // Each rank holds 1/16 of the experts: the parameters fall by 15/16 of the experts' share.
  const double experts_per_rank = m.layers * m.layer_expert_parameters();
  EXPECT_NEAR(whole.memory_stage_parameters - spread.memory_stage_parameters, experts_per_rank * 15 / 16,
              1e-6 * experts_per_rank);
  // Overlapped with another micro-batch's compute (overlap_ep), only what outlasts it shows.
  split.stack.overlap_ep = true;
  const plan_result hidden = evaluate(m, cl, split);
  EXPECT_LT(hidden.breakdown.expert_parallel, spread.breakdown.expert_parallel);
}

TEST(schedules_plan_forms, fp8_runs_linear_gemms_at_the_fp8_peak_and_keeps_cast_weights) {
  const cluster_desc cl = cluster(1);
  const published_device hw(cl.device);
  const gemm_precision bf16{dtype::bf16, false}, fp8{dtype::bf16, false, fp8_scaling::tensor};
  // A compute-bound GEMM whose tiles fill the SMs in whole waves: exactly twice as fast.
  EXPECT_DOUBLE_EQ(hw.gemm_seconds_at(bf16, 12800, 12800, 8192, 1) / hw.gemm_seconds_at(fp8, 12800, 12800, 8192, 1), 2);
  plan_config c = config({2, 1, 4, 1}, 2);
  const plan_result a = evaluate(dense(), cl, c);
  c.precision = fp8;
  const plan_result b = evaluate(dense(), cl, c);
  EXPECT_LT(b.breakdown.compute, a.breakdown.compute);
  EXPECT_GT(b.breakdown.compute, a.breakdown.compute / 2);  // attention, the logits and the casts stay
  // The linear weights' FP8 copies, and their transposes: 2 bytes per linear parameter.
  const model_desc md = dense();
  const double linear = md.layers * (md.attention_parameters() + md.mlp_parameters(md.ffn())) / 4;
  EXPECT_NEAR(b.memory.buffers - a.memory.buffers, 2 * linear, 1e-6 * linear);
  EXPECT_LT(b.memory.activations, a.memory.activations);  // linear inputs kept as their FP8 casts
}

TEST(schedules_plan_forms, fused_attention_costs_its_flops_without_the_score_matrix) {
  cluster_desc cl = cluster(1);
  cl.device.tile_m = 128;
  const published_device hw(cl.device);
  const gemm_precision bf16{dtype::bf16, false};
  // 8192 queries of 100 heads in tiles of 128: 6400 tiles, 64 whole waves over 100 SMs.
  const double flops = 4.0 * 8192 * 4096 * 128 * 100;
  EXPECT_DOUBLE_EQ(hw.fused_attention_seconds(bf16, 8192, 4096, 128, 100), flops / (100e12 * 0.7));
  // Unfused, the same products write and read the 8192 x 4096 scores of every head: on a device
  // with a tenth of the bandwidth that traffic bounds them, while the fused kernel stays compute-bound.
  cluster_desc narrow = cl;
  narrow.device.memory_bandwidth = 0.1e12;
  const published_device slow_memory(narrow.device);
  const double scores = 2.0 * 8192 * 4096 * 100;  // 16-bit, written once and read once
  EXPECT_GE(slow_memory.gemm_seconds_at(bf16, 8192, 4096, 128, 100) + slow_memory.gemm_seconds_at(bf16, 8192, 128, 4096, 100),
            2 * scores / 0.1e12);
  EXPECT_DOUBLE_EQ(slow_memory.fused_attention_seconds(bf16, 8192, 4096, 128, 100), flops / (100e12 * 0.7));
  // A stack whose attention kernels reach less of the peak (FlashAttention-2 on H100) is slower
  // by attention's share only.
  plan_config c = config({2, 1, 4, 1}, 2);
  const plan_result fast = evaluate(dense(), cl, c);
  c.stack.attention_efficiency = 0.35;
  const plan_result slow = evaluate(dense(), cl, c);
  EXPECT_GT(slow.breakdown.compute, fast.breakdown.compute);
  EXPECT_LT(slow.breakdown.compute, 2 * fast.breakdown.compute);
}

TEST(schedules_plan_forms, uneven_chunks_give_the_first_and_last_chunk_one_layer_fewer) {
  model_desc md = dense();
  md.layers = 126;
  plan_config c = config({16, 8, 4, 1}, 512);
  c.schedule = "interleaved";
  c.virtual_stages = 8;
  c.first_stage_layers = c.last_stage_layers = 15;
  double total = 0;
  for (int d = 0; d < 8; ++d)
    for (int j = 0; j < 8; ++j) total += chunk_layers(md, c, d, j);
  EXPECT_DOUBLE_EQ(total, 126);
  EXPECT_DOUBLE_EQ(chunk_layers(md, c, 0, 0), 1);
  EXPECT_DOUBLE_EQ(chunk_layers(md, c, 0, 1), 2);
  EXPECT_DOUBLE_EQ(chunk_layers(md, c, 7, 7), 1);
  EXPECT_DOUBLE_EQ(chunk_layers(md, c, 7, 6), 2);
  EXPECT_DOUBLE_EQ(chunk_layers(md, c, 3, 0), 2);
  EXPECT_EQ(check(md, cluster(64), c), "");
  c.virtual_stages = 16;  // a 15-layer stage cannot fill 16 chunks
  EXPECT_NE(check(md, cluster(64), c).find("leave a chunk of stage 0's 15 layers empty"), std::string::npos);
}

TEST(schedules_plan_forms, overlapped_gradient_reduction_shows_only_what_outlasts_a_micro_batch) {
  plan_config c = config({8, 2, 1, 1}, 64);
  const cluster_desc cl = cluster(2, 1e9);
  const plan_result plain = evaluate(dense(), cl, c);
  c.stack.overlap_dp = true;
  const plan_result overlapped = evaluate(dense(), cl, c);
  ASSERT_GT(plain.dp_seconds, 0);
  EXPECT_LT(overlapped.dp_seconds, plain.dp_seconds);
  EXPECT_NEAR(plain.step_seconds - overlapped.step_seconds, plain.dp_seconds - overlapped.dp_seconds,
              1e-9 * plain.step_seconds);
}

TEST(schedules_plan_forms, the_new_choices_have_text_forms_that_round_trip) {
  for (rank_order o : {rank_order::tp_cp_pp_dp, rank_order::tp_cp_dp_pp}) EXPECT_EQ(parse_rank_order(to_string(o)), o);
  for (cp_kind k : {cp_kind::ring, cp_kind::all_to_all, cp_kind::all_gather}) EXPECT_EQ(parse_cp_kind(to_string(k)), k);
  for (gemm_precision p : all_precisions) {
    gemm_precision back;
    ASSERT_TRUE(parse_precision(to_string(p), back)) << to_string(p);
    EXPECT_TRUE(back == p) << to_string(p);
  }
  EXPECT_FALSE(parse_rank_order("pp-dp"));
  EXPECT_FALSE(parse_cp_kind("ulysses"));
  gemm_precision p;
  EXPECT_FALSE(parse_precision("fp4", p));
  EXPECT_STREQ(to_string(gemm_precision{dtype::bf16, false, fp8_scaling::block}), "fp8-block");
}

TEST(schedules_plan_forms, check_names_cp_and_ep_that_do_not_fit_the_model) {
  plan_config c = config({2, 1, 4, 1}, 4);
  c.ep = 2;
  EXPECT_NE(check(dense(), cluster(1), c).find("has no experts to spread"), std::string::npos);
  c.ep = 3;
  EXPECT_NE(check(moe(), cluster(1), c).find("does not divide the 16 experts"), std::string::npos);
  c.ep = 16;  // a stage has tp x cp x dp = 8 ranks
  EXPECT_NE(check(moe(), cluster(1), c).find("does not divide a pipeline stage's tp x cp x dp = 8 ranks"),
            std::string::npos);
  c.m.dp = 1;
  c.ep = 1;
  c.cp = 2;
  c.cp_attention = cp_kind::all_to_all;  // 4 kv heads over tp 4 leave one per rank
  EXPECT_NE(check(dense(), cluster(1), c).find("kv heads over cp"), std::string::npos);
  model_desc odd = dense();
  odd.sequence = 8191;
  EXPECT_NE(check(odd, cluster(1), c).find("--cp 2 does not divide the 8191-token sequence"), std::string::npos);
}

TEST(schedules_plan_forms, search_spreads_experts_only_over_degrees_that_divide_them) {
  search_space space;
  space.tp = {1, 2};
  space.micro_batch = {1};
  space.schedules = {"1f1b"};
  const auto found = search(moe(), cluster(2), 32, space, 20);
  ASSERT_FALSE(found.empty());
  bool spread = false;
  for (const plan_result& r : found) {
    EXPECT_EQ(moe().experts % r.config.ep, 0);
    EXPECT_EQ((r.config.m.tp * r.config.cp * r.config.m.dp) % r.config.ep, 0);
    spread = spread || r.config.ep > 1;
  }
  EXPECT_TRUE(spread);
}

}  // namespace
}  // namespace troupe::sched::plan
