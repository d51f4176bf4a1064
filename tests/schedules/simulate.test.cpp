// Tests of simulate(): the textbook bubble formulas with uniform costs and free transfers
// (GPipe and 1F1B (P-1)/(M+P-1), interleaved (P-1)/(vM+P-1), ZB-H1 idle (P-1)(F+B-W)),
// peak live activations, transfer timing on links, per-chunk costs, timeline consistency, and
// ZeRO-3 parameter gathers (exposed time k*g without prefetch, g with prefetch 1 when g <= t,
// g + (k-1)(g-t) when the gather is the slower, the gather overlapping a receive's wait), and
// per-action jitter (bounds, seeding, the same draws under both dispatch policies, step averages).
// Ready dispatch's timing is dispatch.test.cpp's.
#include "schedules/simulate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "schedules/builders.hpp"
#include "schedules/passes.hpp"

namespace troupe::sched {
namespace {

constexpr double tolerance = 1e-9;

struct full_backward_costs {
  double forward, backward;
};
// The formulas must hold whatever the forward/backward ratio: check F=B and B=2F.
constexpr full_backward_costs ratios[] = {{1, 1}, {1, 2}};

TEST(schedules_simulate, gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1) {
  for (const auto [F, B] : ratios) {
    for (int P : {1, 2, 3, 4, 8}) {
      for (int M : {1, 2, 4, 8, 16}) {
        const cost_model costs = uniform_costs(F, B, B / 2, B / 2);
        for (const schedule& s : {gpipe(P, M), one_f_one_b(P, M)}) {
          const simulation r = simulate(complete(s), costs);
          SCOPED_TRACE(s.name + " P=" + std::to_string(P) + " M=" + std::to_string(M) +
                       " F=" + std::to_string(F) + " B=" + std::to_string(B));
          EXPECT_NEAR(r.bubble_fraction, double(P - 1) / (M + P - 1), tolerance);
          EXPECT_NEAR(r.makespan_seconds, (M + P - 1) * (F + B), tolerance);
          for (int d = 0; d < P; ++d) {
            EXPECT_NEAR(r.busy_seconds[d], M * (F + B), tolerance);
            EXPECT_NEAR(r.idle_seconds[d], (P - 1) * (F + B), tolerance);
          }
        }
      }
    }
  }
}

TEST(schedules_simulate, interleaved_bubble_is_p_minus_1_over_vm_plus_p_minus_1) {
  for (const auto [F, B] : ratios) {
    for (int P : {2, 4}) {
      for (int v : {2, 3, 4}) {
        for (int M : {P, 2 * P, 4 * P, 16}) {
          // The model is cut into v times more chunks, so each costs 1/v of a stage.
          const cost_model costs = uniform_costs(F / v, B / v, B / v / 2, B / v / 2);
          const simulation r = simulate(complete(interleaved_1f1b(P, M, v)), costs);
          SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M) +
                       " v=" + std::to_string(v) + " B=" + std::to_string(B));
          EXPECT_NEAR(r.bubble_fraction, double(P - 1) / (v * M + P - 1), tolerance);
          EXPECT_NEAR(r.makespan_seconds, (M + double(P - 1) / v) * (F + B), tolerance);
          // With v = 1 there is nothing to gain over plain 1F1B; with v > 1 it must be less.
          const simulation plain = simulate(complete(one_f_one_b(P, M)), uniform_costs(F, B, 0, 0));
          EXPECT_LT(r.bubble_fraction, plain.bubble_fraction);
        }
      }
    }
  }
}

struct split_costs {
  double forward, backward_input, backward_weight;
};

TEST(schedules_simulate, zb_h1_idle_is_p_minus_1_times_f_plus_b_minus_w) {
  for (const auto [F, B, W] : {split_costs{1, 1, 1}, split_costs{1, 1, 0.5}, split_costs{1, 2, 1},
                               split_costs{2, 2, 1}}) {
    for (int P : {2, 4}) {
      for (int M : {4, 8}) {
        // 1F1B runs the same work with a full backward costing B + W.
        const cost_model costs = uniform_costs(F, B + W, B, W);
        const simulation zb = simulate(complete(zb_h1(P, M)), costs);
        const simulation base = simulate(complete(one_f_one_b(P, M)), costs);
        SCOPED_TRACE("P=" + std::to_string(P) + " M=" + std::to_string(M) + " F=" +
                     std::to_string(F) + " B=" + std::to_string(B) + " W=" + std::to_string(W));
        EXPECT_NEAR(zb.makespan_seconds, M * (F + B + W) + (P - 1) * (F + B - W), tolerance);
        for (int d = 0; d < P; ++d) {
          EXPECT_NEAR(zb.idle_seconds[d], (P - 1) * (F + B - W), tolerance);
          EXPECT_NEAR(base.idle_seconds[d], (P - 1) * (F + B + W), tolerance);
          if (F == B && B == W) {
            EXPECT_NEAR(3 * zb.idle_seconds[d], base.idle_seconds[d], tolerance);
          }
        }
        // Same peak memory as 1F1B: no stage holds more than 1F1B's busiest stage (P).
        const int zb_peak = *std::max_element(zb.peak_live_activations.begin(), zb.peak_live_activations.end());
        const int base_peak = *std::max_element(base.peak_live_activations.begin(), base.peak_live_activations.end());
        EXPECT_EQ(zb_peak, base_peak);
        EXPECT_EQ(zb_peak, P);
      }
    }
  }
}

TEST(schedules_simulate, peak_live_activations_per_stage) {
  const cost_model costs = uniform_costs(1, 2, 1, 1);
  for (int P : {1, 2, 4, 8}) {
    for (int M : {1, 3, 8, 16}) {
      const simulation g = simulate(complete(gpipe(P, M)), costs);
      const simulation o = simulate(complete(one_f_one_b(P, M)), costs);
      const simulation z = simulate(complete(zb_h1(P, M)), costs);
      for (int d = 0; d < P; ++d) {
        EXPECT_EQ(g.peak_live_activations[d], M) << "gpipe P=" << P << " M=" << M << " stage " << d;
        EXPECT_EQ(o.peak_live_activations[d], std::min(P - d, M)) << "1f1b P=" << P << " M=" << M;
        EXPECT_LE(o.peak_live_activations[d], P);
        EXPECT_EQ(z.peak_live_activations[d], std::min(P, M)) << "zb_h1 P=" << P << " M=" << M;
      }
    }
  }
}

TEST(schedules_simulate, transfers_delay_the_receiver_and_count_bytes_per_link) {
  cost_model costs = uniform_costs(1, 2, 1, 1);
  costs.send_seconds = 0.5;
  costs.activation_bytes = 1000;
  costs.grad_bytes = 500;
  simulation r = simulate(complete(one_f_one_b(2, 1)), costs);
  // F0 on 0 [0,1]; arrives at 1.5; F0 on 1 [1.5,2.5]; B0 [2.5,4.5]; grad arrives 5; B0 [5,7].
  EXPECT_DOUBLE_EQ(r.makespan_seconds, 7);
  EXPECT_EQ(r.events.stages[1][1].what, parse_action("1F0"));
  EXPECT_DOUBLE_EQ(r.events.stages[1][0].start_seconds, 0);  // waiting in RA0<0 ...
  EXPECT_DOUBLE_EQ(r.events.stages[1][0].end_seconds, 1.5);  // ... until the send time elapsed
  EXPECT_DOUBLE_EQ(r.events.stages[1][1].start_seconds, 1.5);
  EXPECT_EQ(r.busy_seconds, (std::vector<double>{3, 3}));
  EXPECT_EQ(r.idle_seconds, (std::vector<double>{4, 4}));
  ASSERT_EQ(r.links.size(), 2u);
  EXPECT_EQ(r.links[0].from_stage, 0);
  EXPECT_EQ(r.links[0].to_stage, 1);
  EXPECT_EQ(r.links[0].messages, 1);
  EXPECT_DOUBLE_EQ(r.links[0].bytes, 1000);
  EXPECT_EQ(r.links[1].from_stage, 1);
  EXPECT_DOUBLE_EQ(r.links[1].bytes, 500);

  costs.link_bytes_per_second = 1000;  // activation 0.5 + 1 s, gradient 0.5 + 0.5 s
  EXPECT_DOUBLE_EQ(simulate(complete(one_f_one_b(2, 1)), costs).makespan_seconds, 8.5);

  const simulation big = simulate(complete(one_f_one_b(4, 8)), costs);
  ASSERT_EQ(big.links.size(), 6u);  // 0->1, 1->0, 1->2, 2->1, 2->3, 3->2
  for (const link_traffic& link : big.links) {
    EXPECT_EQ(link.messages, 8);
    EXPECT_DOUBLE_EQ(link.bytes, link.to_stage > link.from_stage ? 8000 : 4000);
  }
}

TEST(schedules_simulate, a_link_carries_one_transfer_at_a_time) {
  cost_model costs = uniform_costs(1, 1, 0.5, 0.5);
  costs.send_seconds = 2;  // slower than a forward: transfers queue on the link
  const simulation r = simulate(complete(gpipe(2, 2)), costs);
  // Stage 1: RA0 F0 RA1 F1 ...: microbatch 1 leaves at 3 (after microbatch 0) and lands at 5.
  EXPECT_DOUBLE_EQ(r.events.stages[1][1].start_seconds, 3);
  EXPECT_DOUBLE_EQ(r.events.stages[1][3].start_seconds, 5);
  EXPECT_DOUBLE_EQ(r.makespan_seconds, 12);
}

TEST(schedules_simulate, per_chunk_costs_model_a_straggler) {
  cost_model costs = uniform_costs(1, 1, 0.5, 0.5);
  costs.per_chunk = {{}, {chunk_cost{3, 1, 0.5, 0.5}}};  // stage 1 forwards three times slower
  costs.reduce_grads_seconds = 0.25;
  costs.optimizer_step_seconds = 0.5;
  const simulation r = simulate(complete(gpipe(2, 2)), costs);
  // Stage 1: F0 [1,4] F1 [4,7] B0 [7,8] B1 [8,9] R O [9,9.75]; stage 0: B0 [8,9] B1 [9,10] R O.
  EXPECT_DOUBLE_EQ(r.makespan_seconds, 10.75);
  EXPECT_DOUBLE_EQ(r.busy_seconds[0], 4.75);
  EXPECT_DOUBLE_EQ(r.busy_seconds[1], 8.75);
  EXPECT_DOUBLE_EQ(r.bubble_fraction, (6 + 2) / (2 * 10.75));
}

TEST(schedules_simulate, timeline_matches_the_schedule_and_the_totals) {
  const cost_model costs = uniform_costs(1, 2, 1, 1);
  for (const schedule& s : {complete(gpipe(3, 4)), complete(one_f_one_b(4, 8)),
                            complete(interleaved_1f1b(2, 4, 2)), complete(zb_h1(4, 8))}) {
    const simulation r = simulate(s, costs);
    EXPECT_EQ(r.events.name, s.name);
    ASSERT_EQ(r.events.stages.size(), s.stages.size());
    for (std::size_t d = 0; d < s.stages.size(); ++d) {
      ASSERT_EQ(r.events.stages[d].size(), s.stages[d].size());
      double previous_end = 0, busy = 0;
      for (std::size_t i = 0; i < s.stages[d].size(); ++i) {
        const timed_action& e = r.events.stages[d][i];
        EXPECT_EQ(e.what, s.stages[d][i]);
        EXPECT_GE(e.start_seconds, previous_end);
        EXPECT_GE(e.end_seconds, e.start_seconds);
        if (is_send(e.what.kind)) {
          EXPECT_EQ(e.end_seconds, e.start_seconds);
        }
        if (!is_communication(e.what.kind)) busy += e.end_seconds - e.start_seconds;
        previous_end = e.end_seconds;
      }
      EXPECT_NEAR(busy, r.busy_seconds[d], tolerance);
    }
    EXPECT_NEAR(end_seconds(r.events), r.makespan_seconds, tolerance);
  }
}

TEST(schedules_simulate, refuses_an_invalid_schedule_with_validates_message) {
  try {
    simulate(one_f_one_b(2, 2), uniform_costs(1, 2, 1, 1));  // compute-only: no receives
    FAIL();
  } catch (const std::invalid_argument& e) {
    // Stage 0 is dry-run first: its backward finds no gradient before stage 1 is looked at.
    EXPECT_STREQ(e.what(), "simulate: invalid schedule: stage 0, action 2 (B0): backward of "
                           "microbatch 0 on chunk 0 before its gradient arrived");
  }
}

// One stage running k forwards (M = k), each bracketed by the ZeRO-3 pass: FP_j F_j RP_j.
schedule forwards_with_fetches(int k) {
  schedule s;
  s.name = "forwards";
  s.num_microbatches = k;
  s.stages.resize(1);
  for (int m = 0; m < k; ++m) s.stages[0].push_back(action{0, op::forward, m, 0, -1});
  return add_param_fetches(s);
}

cost_model gather_costs(double forward, double gather) {
  cost_model costs = uniform_costs(forward, 2 * forward, forward, forward);
  costs.param_gather_seconds = gather;
  return costs;
}

TEST(schedules_simulate, without_prefetch_every_gather_is_exposed) {
  for (int k : {1, 2, 5}) {
    for (const double g : {0.25, 1.0, 3.0}) {
      const double t = 1;
      const simulation r = simulate(forwards_with_fetches(k), gather_costs(t, g), simulate_options{0});
      SCOPED_TRACE("k=" + std::to_string(k) + " g=" + std::to_string(g));
      EXPECT_NEAR(r.exposed_fetch_seconds[0], k * g, tolerance);
      EXPECT_NEAR(r.makespan_seconds, k * (t + g), tolerance);
      EXPECT_NEAR(r.busy_seconds[0], k * t, tolerance);
      EXPECT_NEAR(r.idle_seconds[0], k * g, tolerance);  // the exposed gather is idle time
    }
  }
  // The default options are prefetch 0.
  EXPECT_NEAR(simulate(forwards_with_fetches(3), gather_costs(1, 0.5)).exposed_fetch_seconds[0], 1.5, tolerance);
}

TEST(schedules_simulate, prefetch_one_hides_all_but_the_first_gather) {
  for (int k : {1, 2, 5}) {
    for (const double g : {0.25, 0.5, 1.0}) {  // g <= t
      const double t = 1;
      const simulation r = simulate(forwards_with_fetches(k), gather_costs(t, g), simulate_options{1});
      SCOPED_TRACE("k=" + std::to_string(k) + " g=" + std::to_string(g));
      EXPECT_NEAR(r.exposed_fetch_seconds[0], g, tolerance);
      EXPECT_NEAR(r.makespan_seconds, g + k * t, tolerance);
      // F_j starts when F_{j-1} ends: its gather ran during F_{j-1}.
      for (int j = 0; j < k; ++j) {
        EXPECT_NEAR(r.events.stages[0][static_cast<std::size_t>(3 * j + 1)].start_seconds, g + j * t, tolerance);
      }
    }
  }
}

TEST(schedules_simulate, a_gather_slower_than_the_compute_stays_exposed_by_the_difference) {
  // The gathers queue on the stage's one gather stream: F_j waits until (j+1)g.
  for (int k : {1, 2, 5}) {
    const double t = 1, g = 1.5;
    const simulation r = simulate(forwards_with_fetches(k), gather_costs(t, g), simulate_options{1});
    EXPECT_NEAR(r.exposed_fetch_seconds[0], g + (k - 1) * (g - t), tolerance) << k;
    EXPECT_NEAR(r.makespan_seconds, k * g + t, tolerance) << k;
    // A deeper prefetch cannot beat the gather stream's bandwidth.
    EXPECT_NEAR(simulate(forwards_with_fetches(k), gather_costs(t, g), simulate_options{4}).makespan_seconds,
                k * g + t, tolerance);
  }
}

// FP sits before the receive (passes.hpp), so its gather overlaps the wait for the tensor.
// 1F1B P=2 M=1, F=1 B=2, g=0.5, prefetch 0:
//   stage 0: FP0, F0 waits for its gather [0,0.5] (exposed 0.5), runs [0.5,1.5], SA0 lands 1.5;
//            FP0's gather [1.5,2] hides behind RG0<1 (until 5); B0 [5,7].
//   stage 1: FP0's gather [0,0.5] hides behind RA0<0 (until 1.5); F0 [1.5,2.5]; FP0 right after
//            RP0: gather [2.5,3] exposed 0.5; B0 [3,5], SG0 lands at 5.
// With prefetch 1 stage 1's second gather runs during F0 and is hidden.
TEST(schedules_simulate, a_fetch_before_a_receive_overlaps_its_wait) {
  const schedule s = add_param_fetches(complete(one_f_one_b(2, 1)));
  cost_model costs = uniform_costs(1, 2, 1, 1);
  costs.param_gather_seconds = 0.5;
  const simulation r = simulate(s, costs);
  EXPECT_NEAR(r.makespan_seconds, 7, tolerance);
  EXPECT_EQ(r.exposed_fetch_seconds, (std::vector<double>{0.5, 0.5}));
  const simulation early = simulate(s, costs, simulate_options{1});
  EXPECT_NEAR(early.makespan_seconds, 6.5, tolerance);
  EXPECT_EQ(early.exposed_fetch_seconds, (std::vector<double>{0.5, 0}));
  // The same schedule with each fetch moved after its receive waits longer.
  schedule after = s;
  for (auto& row : after.stages)
    for (std::size_t i = 0; i + 1 < row.size(); ++i)
      if (row[i].kind == op::fetch_params && is_recv(row[i + 1].kind)) std::swap(row[i], row[i + 1]);
  const simulation late = simulate(after, costs);
  EXPECT_NEAR(late.makespan_seconds, 8, tolerance);
  EXPECT_EQ(late.exposed_fetch_seconds, (std::vector<double>{1, 1}));
}

// With no gather time, fetches cost only their own device time (0 here): the textbook figures
// of every builder are unchanged, nothing is exposed, and one (chunk, microbatch) is held.
TEST(schedules_simulate, fetches_without_gather_time_change_nothing) {
  const cost_model costs = uniform_costs(1, 2, 1, 1);
  for (const schedule& s : {complete(gpipe(3, 4)), complete(one_f_one_b(4, 8)),
                            complete(interleaved_1f1b(2, 4, 2)), complete(zb_h1(4, 8))}) {
    for (int prefetch : {0, 2}) {
      const simulation plain = simulate(s, costs);
      const simulation fetched = simulate(add_param_fetches(s), costs, simulate_options{prefetch});
      EXPECT_NEAR(fetched.makespan_seconds, plain.makespan_seconds, tolerance) << s.name;
      EXPECT_NEAR(fetched.bubble_fraction, plain.bubble_fraction, tolerance) << s.name;
      EXPECT_EQ(fetched.exposed_fetch_seconds, std::vector<double>(s.stages.size(), 0)) << s.name;
      EXPECT_EQ(fetched.peak_fetched, std::vector<int>(s.stages.size(), 1)) << s.name;
      EXPECT_EQ(plain.peak_fetched, std::vector<int>(s.stages.size(), 0)) << s.name;
    }
  }
}

TEST(schedules_simulate, fetch_and_release_device_time_is_busy_time) {
  cost_model costs = uniform_costs(1, 2, 1, 1);
  costs.fetch_params_seconds = 0.25;
  costs.release_params_seconds = 0.125;
  const simulation r = simulate(add_param_fetches(gpipe(1, 2)), costs);  // 4 F/B, each bracketed
  EXPECT_NEAR(r.busy_seconds[0], 2 * (1 + 2) + 4 * (0.25 + 0.125), tolerance);
  EXPECT_NEAR(r.makespan_seconds, r.busy_seconds[0], tolerance);
}

// A gather wait is a gap before the compute it delays: intervals stay ordered, busy is the sum
// of the non-communication intervals, and busy + idle is the makespan.
TEST(schedules_simulate, timeline_with_gather_waits_matches_the_totals) {
  cost_model costs = uniform_costs(1, 2, 1, 1);
  costs.param_gather_seconds = 0.75;
  costs.fetch_params_seconds = 0.0625;
  for (const schedule& s : {complete(one_f_one_b(4, 8)), complete(interleaved_1f1b(2, 4, 2)), complete(zb_h1(3, 6))}) {
    for (int prefetch : {0, 1, 3}) {
      const schedule with = add_param_fetches(s);
      const simulation r = simulate(with, costs, simulate_options{prefetch});
      for (std::size_t d = 0; d < with.stages.size(); ++d) {
        double previous_end = 0, busy = 0;
        for (const timed_action& e : r.events.stages[d]) {
          EXPECT_GE(e.start_seconds, previous_end);
          if (!is_communication(e.what.kind)) busy += e.end_seconds - e.start_seconds;
          previous_end = e.end_seconds;
        }
        EXPECT_NEAR(busy, r.busy_seconds[d], tolerance);
        EXPECT_NEAR(r.busy_seconds[d] + r.idle_seconds[d], r.makespan_seconds, tolerance);
        EXPECT_LE(r.exposed_fetch_seconds[d], r.idle_seconds[d] + tolerance);
      }
    }
  }
}

TEST(schedules_simulate, refuses_a_negative_prefetch) {
  EXPECT_THROW(simulate(complete(gpipe(1, 1)), uniform_costs(1, 2, 1, 1), simulate_options{-1}),
               std::invalid_argument);
}

// Jitter (simulate_options::jitter_*): a compute action takes its cost plus a draw in [0, max) that
// depends only on (seed, stage, step, its index in the row); nothing else is touched.
TEST(schedules_simulate, jitter_lengthens_compute_actions_by_a_seeded_draw_below_its_bound) {
  const schedule s = complete(one_f_one_b(3, 6));
  const cost_model costs = uniform_costs(1, 2, 1, 1);
  const simulation plain = simulate(s, costs);
  simulate_options o;
  o.jitter_max_seconds = {0.5, 0, 2};
  o.jitter_seed = 7;
  const simulation r = simulate(s, costs, o);
  for (std::size_t d = 0; d < 3; ++d) {
    double extra = 0;
    for (std::size_t i = 0; i < s.stages[d].size(); ++i) {
      const timed_action& e = r.events.stages[d][i];
      const double cost = plain.events.stages[d][i].end_seconds - plain.events.stages[d][i].start_seconds;
      const double took = e.end_seconds - e.start_seconds;
      if (is_compute(e.what.kind)) {
        EXPECT_GE(took, cost);
        if (d == 1) {
          EXPECT_EQ(took, cost);  // a bound of 0: none
        } else {
          EXPECT_LT(took, cost + o.jitter_max_seconds[d]);
        }
        extra += took - cost;
      } else if (!is_recv(e.what.kind)) {
        EXPECT_EQ(took, cost) << to_string(e.what);  // sends, R and O: no jitter
      }
    }
    EXPECT_NEAR(r.busy_seconds[d], plain.busy_seconds[d] + extra, tolerance);
    if (d != 1) {
      EXPECT_GT(extra, 0);
    }
  }
  EXPECT_GT(r.makespan_seconds, plain.makespan_seconds);

  // It repeats; another seed or step draws again.
  EXPECT_EQ(simulate(s, costs, o).makespan_seconds, r.makespan_seconds);
  simulate_options other_seed = o, other_step = o;
  other_seed.jitter_seed = 8;
  other_step.jitter_step = 1;
  EXPECT_NE(simulate(s, costs, other_seed).makespan_seconds, r.makespan_seconds);
  EXPECT_NE(simulate(s, costs, other_step).makespan_seconds, r.makespan_seconds);

  // A bound of 0 everywhere is no jitter, bit for bit.
  simulate_options zero;
  zero.jitter_max_seconds.assign(3, 0);
  EXPECT_EQ(simulate(s, costs, zero).makespan_seconds, plain.makespan_seconds);
}

// Each action's draw is fixed before the run, so both dispatch policies see the same per-action
// times: what differs between them is the order alone.
TEST(schedules_simulate, jitter_is_the_same_per_action_under_both_dispatch_policies) {
  const schedule s = complete(zb_h1(4, 8));
  simulate_options o;
  o.jitter_max_seconds.assign(4, 1.5);
  o.jitter_seed = 3;
  const simulation fixed = simulate(s, uniform_costs(1, 2, 1, 1), o);
  o.dispatch = dispatch_policy::ready;
  o.ready_stash = 1;
  const simulation ready = simulate(s, uniform_costs(1, 2, 1, 1), o);
  int reordered = 0;
  for (std::size_t d = 0; d < 4; ++d) {
    std::map<std::string, double> took;
    for (const timed_action& e : fixed.events.stages[d])
      if (is_compute(e.what.kind)) took[to_string(e.what)] = e.end_seconds - e.start_seconds;
    for (const timed_action& e : ready.events.stages[d])
      if (is_compute(e.what.kind)) {
        EXPECT_NEAR(e.end_seconds - e.start_seconds, took.at(to_string(e.what)), tolerance);  // other start, other rounding
      }
    EXPECT_NEAR(ready.busy_seconds[d], fixed.busy_seconds[d], tolerance);
    reordered += ready.out_of_order[d];
  }
  EXPECT_GT(reordered, 0);
}

TEST(schedules_simulate, simulate_steps_averages_steps_of_fresh_jitter) {
  const schedule s = complete(one_f_one_b(2, 4));
  const cost_model costs = uniform_costs(1, 2, 1, 1);
  simulate_options o;
  o.jitter_max_seconds = {1, 1};
  o.jitter_step = 10;
  const step_statistics st = simulate_steps(s, costs, o, 5);
  double sum = 0, most = 0, bubble = 0;
  for (int k = 0; k < 5; ++k) {
    simulate_options one = o;
    one.jitter_step = 10 + k;
    const simulation r = simulate(s, costs, one);
    sum += r.makespan_seconds;
    most = std::max(most, r.makespan_seconds);
    bubble += r.bubble_fraction;
  }
  EXPECT_EQ(st.steps, 5);
  EXPECT_NEAR(st.mean_makespan_seconds, sum / 5, tolerance);
  EXPECT_EQ(st.max_makespan_seconds, most);
  EXPECT_NEAR(st.mean_bubble_fraction, bubble / 5, tolerance);
  EXPECT_EQ(st.peak_live_activations, (std::vector<int>{2, 1}));
  EXPECT_EQ(st.out_of_order, 0);
  // Without jitter every step is the same step.
  const step_statistics calm = simulate_steps(s, costs, {}, 3);
  EXPECT_EQ(calm.mean_makespan_seconds, simulate(s, costs).makespan_seconds);
  EXPECT_THROW(simulate_steps(s, costs, {}, 0), std::invalid_argument);
}

TEST(schedules_simulate, refuses_bad_jitter_and_headroom) {
  const schedule s = complete(one_f_one_b(2, 2));
  const cost_model costs = uniform_costs(1, 2, 1, 1);
  simulate_options o;
  o.jitter_max_seconds = {1};  // one entry for two stages
  EXPECT_THROW(simulate(s, costs, o), std::invalid_argument);
  o.jitter_max_seconds = {1, -1};
  EXPECT_THROW(simulate(s, costs, o), std::invalid_argument);
  o.jitter_max_seconds = {1, std::nan("")};
  EXPECT_THROW(simulate(s, costs, o), std::invalid_argument);
  o.jitter_max_seconds = {};
  o.ready_stash = -1;
  EXPECT_THROW(simulate(s, costs, o), std::invalid_argument);
}

}  // namespace
}  // namespace troupe::sched
