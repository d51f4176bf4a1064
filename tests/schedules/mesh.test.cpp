// The mesh (schedules/mesh.hpp): rank order is tp innermost, then pp, then dp; each axis's group
// holds exactly the ranks that differ along it; processes hold contiguous equal blocks; the
// text form round-trips and bad meshes are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "schedules/mesh.hpp"

namespace troupe::sched {
namespace {

// Every rank is in its group along `a`, of the axis's size, and the groups' first members and
// indices count the groups once each.
void expect_groups_partition_the_ranks(const mesh& m, axis a) {
  std::set<int> firsts;
  for (int r = 0; r < m.ranks(); ++r) {
    const auto g = m.group(a, r);
    ASSERT_EQ(static_cast<int>(g.size()), m.size(a));
    EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
    EXPECT_EQ(g.at(static_cast<size_t>(m.place_in(a, r))), r) << to_string(a);
    firsts.insert(g.front());
    EXPECT_LT(m.group_index(a, r), m.groups(a));
    EXPECT_EQ(m.group_index(a, r), m.group_index(a, g.front())) << to_string(a);
  }
  EXPECT_EQ(static_cast<int>(firsts.size()), m.groups(a)) << to_string(a);
}

TEST(schedules_mesh, ranks_are_numbered_tp_innermost_then_pp_then_dp) {
  const mesh m{2, 3, 2, 1};
  ASSERT_EQ(m.ranks(), 12);
  // Hand-computed: rank = (d * pp + p) * tp + t.
  EXPECT_EQ(m.rank_of({1, 2, 1}), (1 * 3 + 2) * 2 + 1);
  EXPECT_EQ(m.rank_of({0, 1, 0}), 2);
  for (int r = 0; r < m.ranks(); ++r) EXPECT_EQ(m.rank_of(m.coords_of(r)), r);
  EXPECT_EQ(m.coords_of(7), (mesh_coords{1, 0, 1}));
  EXPECT_THROW(m.coords_of(12), std::out_of_range);
}

TEST(schedules_mesh, each_group_is_the_ranks_that_differ_along_its_axis_only) {
  const mesh m{2, 2, 1, 1};
  // dp x pp = 2 x 2: ranks 0,1 are replica 0's stages 0,1; ranks 2,3 replica 1's.
  EXPECT_EQ(m.group(axis::dp, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.group(axis::dp, 3), (std::vector<int>{1, 3}));
  EXPECT_EQ(m.group(axis::pp, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.group(axis::tp, 1), (std::vector<int>{1}));
  const mesh big{4, 2, 2, 1};
  for (axis a : {axis::dp, axis::pp, axis::tp})
    for (int r = 0; r < big.ranks(); ++r) {
      const auto g = big.group(a, r);
      ASSERT_EQ(static_cast<int>(g.size()), big.size(a));
      const mesh_coords me = big.coords_of(r);
      for (size_t i = 0; i < g.size(); ++i) {
        mesh_coords c = big.coords_of(g[i]);
        const int along = a == axis::dp ? c.dp : a == axis::pp ? c.pp : c.tp;
        EXPECT_EQ(along, static_cast<int>(i));
        (a == axis::dp ? c.dp : a == axis::pp ? c.pp : c.tp) = a == axis::dp ? me.dp : a == axis::pp ? me.pp : me.tp;
        EXPECT_EQ(c, me) << "group member differs along another axis";
      }
    }
}

// group_index numbers each axis's groups 0..groups(a)-1, one number per group, shared by its members.
TEST(schedules_mesh, group_index_names_each_group_once) {
  const mesh m{2, 3, 2, 1};
  for (axis a : {axis::dp, axis::pp, axis::tp}) {
    std::vector<int> seen(static_cast<size_t>(m.groups(a)), -1);
    for (int r = 0; r < m.ranks(); ++r) {
      const int g = m.group_index(a, r);
      ASSERT_GE(g, 0);
      ASSERT_LT(g, m.groups(a));
      const int first = m.group(a, r).front();
      if (seen[static_cast<size_t>(g)] < 0) seen[static_cast<size_t>(g)] = first;
      EXPECT_EQ(seen[static_cast<size_t>(g)], first) << to_string(a) << " group " << g << " holds two groups";
    }
  }
  EXPECT_EQ(m.group_index(axis::dp, m.rank_of({1, 2, 1})), 2 * 2 + 1);
  EXPECT_EQ(m.group_index(axis::tp, m.rank_of({1, 2, 0})), 1 * 3 + 2);
}

// Context parallelism: rank = ((d * cp + c) * pp + p) * tp + t; the cp ranks of one replica split
// its sequence (axis::cp), and the data-parallel group spans dp x cp (they hold the same parameters).
TEST(schedules_mesh, context_ranks_sit_between_dp_and_pp_and_join_the_data_parallel_group) {
  mesh m{2, 2, 1, 1};
  m.cp = 2;
  ASSERT_EQ(m.ranks(), 8);
  EXPECT_EQ(m.replicas(), 4);
  EXPECT_EQ(m.size(axis::dp), 4);
  EXPECT_EQ(m.size(axis::cp), 2);
  EXPECT_EQ(m.rank_of({1, 1, 0, 1}), ((1 * 2 + 1) * 2 + 1) * 1 + 0);
  for (int r = 0; r < m.ranks(); ++r) EXPECT_EQ(m.rank_of(m.coords_of(r)), r);
  EXPECT_EQ(m.coords_of(5), (mesh_coords{1, 1, 0, 0}));
  EXPECT_EQ(m.replica_of(5), 2);
  // Rank 0 (d0 c0 p0): its context partner is d0 c1 p0 = rank 2; its gradients reduce with
  // every replica's stage 0, in replica order.
  EXPECT_EQ(m.group(axis::cp, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.group(axis::dp, 0), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(m.group(axis::dp, 7), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m.group(axis::pp, 6), (std::vector<int>{6, 7}));
  for (axis a : {axis::dp, axis::pp, axis::tp, axis::cp}) expect_groups_partition_the_ranks(m, a);
  EXPECT_EQ(to_string(m), "dp2.pp2.tp1.cp2");
  m.processes = 2;
  EXPECT_EQ(to_string(m), "dp2.pp2.tp1.cp2/2");
  EXPECT_EQ(parse_mesh("dp2.pp2.tp1.cp2/2"), m);
  EXPECT_FALSE(parse_mesh("dp2.pp2.tp1.cp1").has_value());  // cp 1 is written without ".cp1"
  m.cp = 0;
  EXPECT_NE(check(m).find("cp must be >= 1"), std::string::npos);
}

// Expert parallelism adds no ranks: ep consecutive replicas (of dp x cp) share out the experts
// (axis::ep), and the replicas holding the same experts reduce those experts' gradients
// (axis::edp), ep apart.
TEST(schedules_mesh, expert_groups_are_consecutive_replicas_and_their_data_parallel_groups_stride_by_ep) {
  mesh m{4, 2, 1, 1};
  m.ep = 2;
  ASSERT_EQ(m.ranks(), 8);  // ep adds none
  EXPECT_EQ(m.size(axis::ep), 2);
  EXPECT_EQ(m.size(axis::edp), 2);
  // Rank 2 is replica 1, stage 0: its expert group is replicas 0 and 1 (ranks 0, 2), and the
  // replicas holding its experts are 1 and 3 (ranks 2, 6).
  EXPECT_EQ(m.group(axis::ep, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(m.group(axis::edp, 2), (std::vector<int>{2, 6}));
  EXPECT_EQ(m.group(axis::ep, 7), (std::vector<int>{5, 7}));
  EXPECT_EQ(m.group(axis::edp, 4), (std::vector<int>{0, 4}));
  EXPECT_EQ(m.place_in(axis::ep, 6), 1);  // replica 3
  EXPECT_EQ(m.place_in(axis::edp, 6), 1);
  m.cp = 2;  // with context: dp 4 x cp 2 = 8 replicas, an expert group of 2 spans one replica's cp ranks
  EXPECT_EQ(m.group(axis::ep, 0), (std::vector<int>{0, 2}));
  for (axis a : {axis::ep, axis::edp}) expect_groups_partition_the_ranks(m, a);
  EXPECT_EQ(to_string(m), "dp4.pp2.tp1.cp2.ep2");
  EXPECT_EQ(parse_mesh("dp4.pp2.tp1.cp2.ep2"), m);
  EXPECT_EQ(parse_mesh("dp4.pp2.tp1.ep4/2")->ep, 4);
  EXPECT_FALSE(parse_mesh("dp4.pp2.tp1.ep1").has_value());
  m.ep = 3;
  EXPECT_NE(check(m).find("ep 3 must divide the 8 data-parallel replicas"), std::string::npos) << check(m);
}

TEST(schedules_mesh, processes_hold_contiguous_equal_blocks_of_ranks) {
  const mesh m{2, 2, 1, 2};
  EXPECT_EQ(m.ranks_per_process(), 2);
  EXPECT_EQ(m.ranks_of_process(0), (std::vector<int>{0, 1}));  // replica 0's whole pipeline
  EXPECT_EQ(m.ranks_of_process(1), (std::vector<int>{2, 3}));
  EXPECT_EQ(m.process_of(3), 1);
  // Replicas in separate processes: a dp group crosses processes, a pipeline does not.
  EXPECT_TRUE(m.group_spans_processes(axis::dp, 0));
  EXPECT_FALSE(m.group_spans_processes(axis::pp, 0));
  EXPECT_FALSE((mesh{2, 2, 1, 1}).group_spans_processes(axis::dp, 3));
  const mesh four{2, 2, 1, 4};
  std::set<int> seen;
  for (int p = 0; p < 4; ++p)
    for (int r : four.ranks_of_process(p)) {
      EXPECT_EQ(four.process_of(r), p);
      seen.insert(r);
    }
  EXPECT_EQ(seen.size(), 4u);
}

TEST(schedules_mesh, text_form_round_trips_and_has_one_spelling) {
  for (const mesh& m : {mesh{1, 1, 1, 1}, mesh{2, 2, 1, 1}, mesh{4, 1, 1, 4}, mesh{2, 2, 1, 2}}) {
    const auto back = parse_mesh(to_string(m));
    ASSERT_TRUE(back.has_value()) << to_string(m);
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(to_string(mesh{2, 2, 1, 2}), "dp2.pp2.tp1/2");
  EXPECT_FALSE(parse_mesh("dp2.pp2.tp1/1").has_value());  // one process is written without "/1"
  EXPECT_FALSE(parse_mesh("dp2.pp2").has_value());
  EXPECT_FALSE(parse_mesh("dp2.pp2.tp1x").has_value());
  EXPECT_FALSE(parse_mesh("dp3.pp1.tp1/2").has_value());  // 3 ranks over 2 processes
}

TEST(schedules_mesh, a_bad_mesh_is_refused_naming_the_field) {
  EXPECT_EQ(check(mesh{2, 2, 1, 4}), "");
  EXPECT_NE(check(mesh{0, 1, 1, 1}).find("dp must be >= 1"), std::string::npos);
  EXPECT_NE(check(mesh{1, 1, 1, 0}).find("processes must be >= 1"), std::string::npos);
  EXPECT_EQ(check(mesh{2, 2, 2, 8}), "");
  EXPECT_NE(check(mesh{3, 1, 1, 2}).find("cannot be split evenly over 2 processes"), std::string::npos);
}

}  // namespace
}  // namespace troupe::sched
