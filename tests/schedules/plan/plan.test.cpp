// The time model's collectives against NCCL's bus-bandwidth definition, placement of groups on
// nodes, the plan checks, and the search's contract (every plan fits, fastest first).
#include "schedules/plan/plan.hpp"
#include "tests/schedules/plan/test_cluster.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <tuple>

namespace troupe::sched::plan {
namespace {

cluster_desc small_cluster(int nodes) { return test_cluster(nodes); }

TEST(schedules_plan_time, ring_all_reduce_moves_2_n_minus_1_over_n_bytes_at_bus_bandwidth) {
  const link_class l{0, 100e9};
  // nccl-tests: busbw = algbw * 2(n-1)/n, so time = S * 2(n-1)/n / busbw.
  EXPECT_DOUBLE_EQ(ring_seconds(collective::all_reduce, 1e9, 8, l), 1e9 * 2 * 7 / 8 / 100e9);
  EXPECT_DOUBLE_EQ(ring_seconds(collective::all_gather, 1e9, 8, l), 1e9 * 7 / 8 / 100e9);
  EXPECT_DOUBLE_EQ(ring_seconds(collective::all_reduce, 1e9, 1, l), 0);
  // Latency: 2(n-1) hops for the ring, 2 log2(n) for the tree, which wins for small messages.
  const link_class slow{10e-6, 100e9};
  EXPECT_DOUBLE_EQ(ring_seconds(collective::all_reduce, 1, 64, slow), 1.0 * 2 * 63 / 64 / 100e9 + 126 * 10e-6);
  EXPECT_LT(tree_all_reduce_seconds(1, 64, slow), ring_seconds(collective::all_reduce, 1, 64, slow));
}

TEST(schedules_plan_time, groups_inside_a_node_use_nvlink_and_groups_across_use_each_ranks_nic) {
  const cluster_desc cl = small_cluster(4);
  const mesh tp8{4, 1, 8, 1};
  // tp = 8 fills a node: NVLink only.
  EXPECT_DOUBLE_EQ(group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::tp, cl),
                   ring_seconds(collective::all_reduce, 1e9, 8, cl.intra_node));
  // Its dp groups hold one rank per node: a ring over 4 NICs.
  EXPECT_DOUBLE_EQ(group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::dp, cl),
                   ring_seconds(collective::all_reduce, 1e9, 4, cl.inter_node));
  // dp = 32 over 4 nodes: within each node on NVLink, then 8 NICs each carrying an eighth.
  const mesh dp32{32, 1, 1, 1};
  EXPECT_DOUBLE_EQ(group_collective_seconds(collective::all_reduce, 1e9, dp32, axis::dp, cl),
                   ring_seconds(collective::all_reduce, 1e9, 8, cl.intra_node) +
                       ring_seconds(collective::all_reduce, 1e9 / 8, 4, cl.inter_node));
  EXPECT_TRUE(pipeline_crosses_nodes({1, 4, 8, 1}, cl));
  EXPECT_FALSE(pipeline_crosses_nodes({4, 4, 2, 1}, cl));
}

// A shared NIC gives each of its GPUs a share; an oversubscribed tier divides what crosses
// leaves, and only that.
TEST(schedules_plan_time, shared_nics_and_oversubscribed_tiers_divide_the_bandwidth_that_crosses_them) {
  cluster_desc cl = small_cluster(4);  // 4 nodes of 8
  const mesh tp8{4, 1, 8, 1};           // dp groups: one rank on each of the 4 nodes
  const double dedicated = group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::dp, cl);
  cl.gpus_per_nic = 2;
  link_class half = cl.inter_node;
  half.bus_bytes_per_second /= 2;
  EXPECT_DOUBLE_EQ(group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::dp, cl),
                   ring_seconds(collective::all_reduce, 1e9, 4, half));
  EXPECT_GT(group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::dp, cl), 1.9 * dedicated);
  cl.gpus_per_nic = 1;
  cl.nodes_per_leaf = 2;
  cl.oversubscription = 4;  // the group spans 4 nodes, two leaves: its traffic crosses the uplinks
  link_class quarter = cl.inter_node;
  quarter.bus_bytes_per_second /= 4;
  EXPECT_DOUBLE_EQ(group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::dp, cl),
                   ring_seconds(collective::all_reduce, 1e9, 4, quarter));
  cl.nodes_per_leaf = 4;  // one leaf holds them all: the tier is not crossed
  EXPECT_DOUBLE_EQ(group_collective_seconds(collective::all_reduce, 1e9, tp8, axis::dp, cl), dedicated);
  // A pipeline hop to the next node stays within a leaf of 2.
  cl.nodes_per_leaf = 2;
  EXPECT_EQ(pipeline_span({1, 4, 8, 1}, cl), 2);
  EXPECT_DOUBLE_EQ(inter_node_link(cl, 2).bus_bytes_per_second, cl.inter_node.bus_bytes_per_second);
}

TEST(schedules_plan_time, gemm_is_compute_bound_at_efficiency_and_pays_for_a_partial_wave) {
  device_desc d = small_cluster(1).device;
  d.gemm_efficiency = 0.5;
  d.tile_m = d.tile_n = 128;
  const published_device hw(d);
  // 10 x 10 tiles = 100 tiles, one full wave of 100 SMs.
  EXPECT_DOUBLE_EQ(hw.gemm_seconds(dtype::bf16, 1280, 1280, 8192, 1), 2.0 * 1280 * 1280 * 8192 / (100e12 * 0.5));
  // 10 x 11 = 110 tiles need two waves: the GEMM runs at 110/200 of the full-wave rate.
  EXPECT_NEAR(hw.gemm_seconds(dtype::bf16, 1280, 1290, 8192, 1) / hw.gemm_seconds(dtype::bf16, 1280, 1280, 8192, 1),
              (1290.0 / 1280) * 200 / 110, 1e-9);
}

TEST(schedules_plan_time, tf32_is_the_f32_gemms_math_mode_and_keeps_its_published_name) {
  device_desc d = small_cluster(1).device;
  d.peak(gemm_precision{dtype::f32, false}) = 20e12;
  d.peak(gemm_precision{dtype::f32, true}) = 80e12;
  const double m = 4096, n = 4096, k = 4096;
  EXPECT_DOUBLE_EQ(published_device(d).gemm_seconds(dtype::f32, m, n, k, 1) /
                       published_device(d, true).gemm_seconds(dtype::f32, m, n, k, 1),
                   4.0);
  // The mode is f32's alone: bf16 operands reach bf16's peak either way.
  EXPECT_DOUBLE_EQ(published_device(d, true).gemm_seconds(dtype::bf16, m, n, k, 1),
                   published_device(d).gemm_seconds(dtype::bf16, m, n, k, 1));
  for (const char* text : {"fp32", "tf32", "fp16", "bf16"}) {
    gemm_precision p;
    ASSERT_TRUE(parse_precision(text, p)) << text;
    EXPECT_STREQ(to_string(p), text);
  }
  gemm_precision p;
  EXPECT_FALSE(parse_precision("f32", p));
  EXPECT_THROW(published_device(d).gemm_seconds(dtype::i32, m, n, k, 1), std::invalid_argument);
}

model_desc small_model() {
  model_desc m;
  m.name = "small";
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 16;
  m.sequence = 1024;
  m.vocab = 32000;
  return m;
}

TEST(schedules_plan, check_names_the_field_that_is_wrong) {
  const cluster_desc cl = small_cluster(2);
  plan_config c;
  c.global_batch = 64;
  c.m = {2, 2, 2, 1};  // 8 ranks on 16 GPUs
  EXPECT_NE(check(small_model(), cl, c).find("has 8 ranks but cluster test has 16 GPUs"), std::string::npos);
  c.m = {1, 16, 1, 1};
  EXPECT_NE(check(small_model(), cl, c).find("does not divide the 8 layers"), std::string::npos);
  c.m = {16, 1, 1, 1};
  c.global_batch = 24;
  EXPECT_NE(check(small_model(), cl, c).find("global batch 24"), std::string::npos);
  EXPECT_THROW(evaluate(small_model(), cl, c), std::invalid_argument);
}

TEST(schedules_plan, gqa_and_ffn_width_are_checked_against_tp_naming_the_field) {
  const cluster_desc cl = small_cluster(2);  // 16 GPUs, 8 a node
  plan_config c;
  c.global_batch = 64;
  c.m = {2, 1, 8, 1};
  model_desc m = small_model();  // 16 heads
  m.kv_heads = 4;
  EXPECT_NE(check(m, cl, c).find("--tp 8 does not divide the 4 kv_heads of small"), std::string::npos) << check(m, cl, c);
  m.kv_heads = 5;
  EXPECT_NE(check(m, cl, c).find("kv_heads 5 does not divide the 16 heads of small"), std::string::npos);
  m.kv_heads = 8;
  m.ffn_hidden = 2732;
  EXPECT_NE(check(m, cl, c).find("--tp 8 does not divide ffn_hidden 2732 of small"), std::string::npos);
  m.ffn_hidden = 2736;
  EXPECT_EQ(check(m, cl, c), "");
}

// GPT-3's shape is Narayanan et al. 2021's formulas exactly; each other shape changes the GEMMs'
// weights by what its matrices hold, and nothing else.
TEST(schedules_plan, flops_follow_the_layers_matrices_and_reduce_to_narayanans_formula) {
  model_desc m = small_model();
  const double s = m.sequence, h = m.hidden, l = m.layers, V = m.vocab;
  EXPECT_DOUBLE_EQ(m.layer_gemm_parameters(), 12 * h * h);
  EXPECT_NEAR(m.model_flops_per_sequence() / (72 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1, 1e-12);
  EXPECT_NEAR(m.hardware_flops_per_sequence(recompute_mode::full) /
                  (96 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), 1, 1e-12);
  const double mha = m.model_flops_per_sequence();
  m.kv_heads = 4;  // k and v shrink from h^2 to h^2 / 4 each
  EXPECT_DOUBLE_EQ(m.layer_gemm_parameters(), 12 * h * h - 2 * h * h * 3 / 4);
  EXPECT_NEAR(mha - m.model_flops_per_sequence(), 3 * 2 * s * l * (2 * h * h * 3 / 4), 1e-6 * mha);
  m.activation = activation_kind::swiglu;
  m.ffn_hidden = 2816;  // three matrices of h x f
  EXPECT_DOUBLE_EQ(m.layer_gemm_parameters(), 2 * h * h + 2 * h * h / 4 + 3 * h * 2816);
  EXPECT_EQ(m.describe_shape(), "GQA 4 kv heads, SwiGLU 2816");
  const double tied = m.parameters();
  m.tied_embeddings = false;
  m.fused_attention = true;
  EXPECT_DOUBLE_EQ(m.parameters() - tied, V * h);
  EXPECT_EQ(m.describe_shape(), "GQA 4 kv heads, SwiGLU 2816, untied, fused attention");
  EXPECT_EQ(parse_activation("swiglu"), activation_kind::swiglu);
  EXPECT_EQ(parse_activation("relu"), std::nullopt);
}

// Fused attention keeps and moves no s x s scores: activations fall by the 5as/(ht) term and
// the step by the softmax's passes over memory; untied embeddings drop the first and last
// stages' embedding all-reduce.
TEST(schedules_plan, fused_attention_saves_the_scores_memory_and_time_and_untied_embeddings_their_all_reduce) {
  const cluster_desc cl = small_cluster(2);
  plan_config c;
  c.global_batch = 64;
  c.m = {4, 2, 2, 1};
  c.rc = recompute_mode::none;
  model_desc m = small_model();
  const plan_result plain = evaluate(m, cl, c);
  m.fused_attention = true;
  const plan_result fused = evaluate(m, cl, c);
  EXPECT_LT(fused.memory.activations, plain.memory.activations);
  EXPECT_LT(fused.step_seconds, plain.step_seconds);
  EXPECT_DOUBLE_EQ(fused.memory.parameters, plain.memory.parameters);
  m.tied_embeddings = false;
  const plan_result untied = evaluate(m, cl, c);
  EXPECT_LT(untied.dp_seconds, fused.dp_seconds);
}

// Uneven pipeline stages: the first and last stages take the layers they are given and the
// others split the rest; each stage's time, memory and parameters follow its own layers.
TEST(schedules_plan, uneven_first_and_last_stages_price_each_stage_by_its_own_layers) {
  const cluster_desc cl = small_cluster(2);  // 16 GPUs
  model_desc m = small_model();
  m.layers = 10;
  m.vocab = 1000;  // so the embedding's states do not outweigh a stage's layers
  plan_config c;
  c.global_batch = 64;
  c.m = {4, 4, 1, 1};
  EXPECT_NE(check(m, cl, c).find("--pp 4 x virtual stages 1 does not divide the 10 layers of small"), std::string::npos);
  c.first_stage_layers = c.last_stage_layers = 2;  // 2, 3, 3, 2
  ASSERT_EQ(check(m, cl, c), "");
  EXPECT_DOUBLE_EQ(stage_layers(m, c, 0), 2);
  EXPECT_DOUBLE_EQ(stage_layers(m, c, 1), 3);
  EXPECT_DOUBLE_EQ(stage_layers(m, c, 3), 2);
  c.rc = recompute_mode::none;
  const plan_result r = evaluate(m, cl, c);
  // 1F1B stashes 4, 3, 2, 1 microbatches on stages 0..3: 4 x 2 layers on the first, 3 x 3 on the
  // second, which is the busiest device (the even split's busiest is the first, 4 x 2.5).
  EXPECT_EQ(r.memory_stage, 1);
  EXPECT_DOUBLE_EQ(r.memory_stage_parameters, 3 * m.layer_parameters());
  c.first_stage_layers = 3;  // leaves 5 for two stages
  EXPECT_NE(check(m, cl, c).find("leave 5 of small's 10 layers, which 2 other stages cannot split evenly"),
            std::string::npos) << check(m, cl, c);
  c.first_stage_layers = 2;
  c.schedule = "interleaved";
  c.virtual_stages = 2;
  EXPECT_NE(check(m, cl, c).find("virtual stages 2 do not divide the middle stages' 3 layers"), std::string::npos)
      << check(m, cl, c);
  // --search splits layers pp does not divide as Llama 3 did: ceil(L / pp) in the middle, the
  // first and last sharing the rest.
  search_space space;
  space.tp = {1};
  space.max_pp = 4;
  bool uneven = false;
  for (const plan_result& p : search(m, cl, 64, space, 1000))
    if (p.config.m.pp == 4) {
      uneven = true;
      EXPECT_EQ(p.config.first_stage_layers, 2);
      EXPECT_EQ(p.config.last_stage_layers, 2);
    }
  EXPECT_TRUE(uneven) << "no pp 4 plan for 10 layers";
}

TEST(schedules_plan, more_microbatches_shrink_the_bubble_and_recomputation_costs_time_but_saves_memory) {
  const cluster_desc cl = small_cluster(1);
  plan_config c;
  c.m = {1, 4, 2, 1};
  c.global_batch = 8;
  c.rc = recompute_mode::none;
  const plan_result few = evaluate(small_model(), cl, c);
  c.global_batch = 64;
  const plan_result many = evaluate(small_model(), cl, c);
  EXPECT_LT(many.bubble_fraction, few.bubble_fraction);
  c.rc = recompute_mode::full;
  const plan_result full = evaluate(small_model(), cl, c);
  EXPECT_GT(full.step_seconds, many.step_seconds);
  EXPECT_LT(full.memory.activations, many.memory.activations);
  // 1F1B keeps P = 4 micro-batches in flight on stage 0, each 2 layers deep.
  EXPECT_EQ(many.memory_stage, 0);
  const double per_layer = activation_bytes_per_layer({1024, 1, 1024, 16}, 2, false, recompute_mode::none);
  EXPECT_DOUBLE_EQ(many.memory.activations, 4 * 2 * per_layer);
}

// Ready dispatch priced before a run: without lateness both policies take the plan's own
// simulated step (no gain, nothing to price); with actions late by up to twice their cost the
// fixed order slows, and ready dispatch with stash headroom takes less (the simulator's own
// result, which bench/README.md's ready-dispatch table checked against runs within 4%). At half
// their cost this small plan's two policies tie: its gains need real variability.
TEST(schedules_plan, dispatch_price_is_the_plans_step_without_lateness_and_ready_gains_under_it) {
  const cluster_desc cl = small_cluster(1);
  plan_config c;
  c.m = {1, 4, 2, 1};
  c.global_batch = 16;
  c.rc = recompute_mode::none;
  const plan_result r = evaluate(small_model(), cl, c);
  const dispatch_price calm = price_dispatch(small_model(), cl, c, 0.0, 4);
  EXPECT_DOUBLE_EQ(calm.fixed_seconds, r.step_seconds);
  EXPECT_DOUBLE_EQ(calm.ready_seconds, r.step_seconds);
  const dispatch_price noisy = price_dispatch(small_model(), cl, c, 2.0, 4);
  EXPECT_GT(noisy.fixed_seconds, r.step_seconds);
  EXPECT_LT(noisy.ready_seconds, noisy.fixed_seconds);
  EXPECT_GT(noisy.out_of_order, 0);
  EXPECT_THROW(price_dispatch(small_model(), cl, c, -0.1, 4), std::invalid_argument);
  EXPECT_THROW(price_dispatch(small_model(), cl, c, 0.5, -1), std::invalid_argument);
}

TEST(schedules_plan, search_returns_plans_that_fit_fastest_first) {
  cluster_desc cl = small_cluster(2);
  cl.device.memory_bytes = 2 * gib;  // tight enough that some plans do not fit
  search_space space;
  space.micro_batch = {1, 2};
  const auto found = search(small_model(), cl, 64, space, 5);
  ASSERT_FALSE(found.empty());
  for (size_t i = 0; i < found.size(); ++i) {
    EXPECT_TRUE(found[i].fits);
    EXPECT_LE(found[i].memory.total(), cl.device.memory_bytes);
    EXPECT_EQ(found[i].config.m.ranks(), 16);
    if (i) {
      EXPECT_LE(found[i - 1].step_seconds, found[i].step_seconds);
    }
  }
}

// The search covers what the runtime and the published runs use: sequence parallelism wherever
// tp > 1 (never at tp 1), and interleaving 4 ways as well as 2; a plan that needs one of them to
// fit is found only because the space has it.
TEST(schedules_plan, search_tries_sequence_parallelism_and_interleaving_four_ways) {
  cluster_desc cl = small_cluster(2);
  search_space space;
  space.micro_batch = {1};
  space.recomputes = {recompute_mode::none};
  const auto all = search(small_model(), cl, 64, space, 100000);
  bool sp = false, v4 = false;
  for (const auto& r : all) {
    sp = sp || r.config.sequence_parallel;
    v4 = v4 || (r.config.schedule == "interleaved" && r.config.virtual_stages == 4);
    if (r.config.sequence_parallel) {
      EXPECT_GT(r.config.m.tp, 1);
    }
  }
  EXPECT_TRUE(sp) << "no plan with sequence parallelism";
  EXPECT_TRUE(v4) << "no plan interleaved 4 ways";
  // Memory that only sequence parallelism's smaller activations fit: every plan found uses it.
  plan_config c;
  c.m = {1, 2, 8, 1};
  c.global_batch = 64;
  c.schedule = "1f1b";
  c.rc = recompute_mode::none;
  const double without = evaluate(small_model(), cl, c).memory.total();
  c.sequence_parallel = true;
  const double with = evaluate(small_model(), cl, c).memory.total();
  ASSERT_LT(with, without);
  cl.device.memory_bytes = (with + without) / 2;
  space.tp = {8};
  space.zero = {0};
  space.schedules = {"1f1b"};
  space.max_pp = 2;  // pp 1 needs more memory than pp 2, with or without
  const auto tight = search(small_model(), cl, 64, space, 100000);
  ASSERT_FALSE(tight.empty());
  for (const auto& r : tight) EXPECT_TRUE(r.config.sequence_parallel) << r.config.m.pp;
}

TEST(schedules_plan, the_breakdown_adds_up_to_the_step_and_its_idle_is_the_simulators_idle_of_that_stage) {
  const cluster_desc cl = small_cluster(2);
  for (const auto& [m, schedule, v, zero, rc] :
       {std::tuple{mesh{2, 4, 2, 1}, "1f1b", 1, 0, recompute_mode::full},
        std::tuple{mesh{2, 2, 4, 1}, "interleaved", 2, 1, recompute_mode::selective},
        std::tuple{mesh{4, 2, 2, 1}, "zb-h1", 1, 3, recompute_mode::none}, std::tuple{mesh{16, 1, 1, 1}, "1f1b", 1, 0, recompute_mode::none}}) {
    plan_config c;
    c.m = m;
    c.global_batch = 32;
    c.schedule = schedule;
    c.virtual_stages = v;
    c.zero = zero;
    c.rc = rc;
    const plan_result r = evaluate(small_model(), cl, c);
    const step_breakdown& b = r.breakdown;
    SCOPED_TRACE(to_string(m) + " " + schedule);
    EXPECT_NEAR(b.total(), r.step_seconds, 1e-9 * r.step_seconds);
    EXPECT_NEAR(b.pipeline_idle, r.sim.idle_seconds[b.stage], 1e-9 * r.step_seconds);
    for (int d = 0; d < m.pp; ++d) EXPECT_LE(r.sim.idle_seconds[b.stage], r.sim.idle_seconds[d]);
    EXPECT_GT(b.compute, 0);
    EXPECT_EQ(b.recompute > 0, rc != recompute_mode::none);
    EXPECT_EQ(b.tensor_parallel > 0, m.tp > 1);
    EXPECT_EQ(b.zero3_gathers > 0, zero == 3);
    // pp > 1 adds the tied embedding's all-reduce between the first and last stages.
    EXPECT_EQ(b.dp_reduction > 0, (m.dp > 1 && zero < 3) || m.pp > 1);
  }
}

TEST(schedules_plan, explain_names_the_choice_behind_each_part_largest_saving_first) {
  const cluster_desc cl = small_cluster(2);
  plan_config ref;
  ref.m = {2, 4, 2, 1};
  ref.global_batch = 32;
  ref.rc = recompute_mode::full;
  plan_config fast = ref;
  fast.rc = recompute_mode::none;
  const auto lines = explain(evaluate(small_model(), cl, fast), evaluate(small_model(), cl, ref));
  ASSERT_GE(lines.size(), 3u);
  EXPECT_NE(lines[0].find("x the reference's throughput"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("recompute ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find("saves"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("recomputation full -> none"), std::string::npos) << lines[1];
  EXPECT_EQ(lines.back().rfind("memory ", 0), 0u) << lines.back();
  // A plan against itself differs in no part: only the headline and the memory.
  EXPECT_EQ(explain(evaluate(small_model(), cl, ref), evaluate(small_model(), cl, ref)).size(), 2u);
}

}  // namespace
}  // namespace troupe::sched::plan
