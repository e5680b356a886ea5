// The device mesh: rank <-> coordinates and group membership for every
// factorisation of 1, 2, 3, 4, 6 and 8 ranks in all six axis orders, against
// a formula written independently of core/mesh.c (nested loops that count
// ranks in the order's nesting).
#include "core/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

namespace {

using Coord = std::array<int, TL_N_AXES>;  // by tl_axis: dp, tp, pp, cp
using Order = std::array<tl_axis, TL_N_AXES>;

// Ranks numbered by nested loops: the outermost loop runs over order[3],
// the innermost over order[0], and the counter increments innermost.
std::map<Coord, int> ReferenceNumbering(const int size[TL_N_AXES], const Order& order) {
  std::map<Coord, int> rank_of;
  int next = 0;
  Coord c{};
  for (c[order[3]] = 0; c[order[3]] < size[order[3]]; c[order[3]]++)
    for (c[order[2]] = 0; c[order[2]] < size[order[2]]; c[order[2]]++)
      for (c[order[1]] = 0; c[order[1]] < size[order[1]]; c[order[1]]++)
        for (c[order[0]] = 0; c[order[0]] < size[order[0]]; c[order[0]]++) rank_of[c] = next++;
  return rank_of;
}

std::vector<Order> AllOrders() {
  Order o = {TL_AXIS_DP, TL_AXIS_TP, TL_AXIS_PP, TL_AXIS_CP};
  std::vector<Order> all;
  do all.push_back(o);
  while (std::next_permutation(o.begin(), o.end()));
  return all;
}

std::string Describe(const tl_mesh& m) {
  char buf[160];
  snprintf(buf, sizeof buf, "dp=%d tp=%d pp=%d cp=%d order=[%s,%s,%s,%s]", m.size[0], m.size[1],
           m.size[2], m.size[3], tl_axis_name(m.order[0]), tl_axis_name(m.order[1]),
           tl_axis_name(m.order[2]), tl_axis_name(m.order[3]));
  return buf;
}

}  // namespace

TEST(Mesh, EveryFactorisationAndOrderMatchesTheIndependentFormula) {
  int meshes = 0;
  for (int n : {1, 2, 3, 4, 6, 8}) {
    for (int dp = 1; dp <= n; dp++)
      for (int tp = 1; tp <= n; tp++)
        for (int cp = 1; cp <= n; cp++) {
          if (n % (dp * tp * cp) != 0) continue;
          int pp = n / (dp * tp * cp);
          for (const Order& order : AllOrders()) {
            tl_mesh m;
            ASSERT_EQ(tl_mesh_init(dp, tp, pp, cp, order.data(), &m), TL_OK) << tl_last_error();
            meshes++;
            SCOPED_TRACE(Describe(m));
            ASSERT_EQ(m.n_ranks, n);
            int size[TL_N_AXES] = {dp, tp, pp, cp};
            std::map<Coord, int> rank_of = ReferenceNumbering(size, order);
            for (const auto& [coord, rank] : rank_of) {
              Coord c;
              tl_mesh_coords(&m, rank, c.data());
              EXPECT_EQ(c, coord) << "rank " << rank;
              EXPECT_EQ(tl_mesh_rank(&m, coord.data()), rank);
              for (int a = 0; a < TL_N_AXES; a++) {
                // The group: every rank that differs from this one only on axis a.
                std::vector<int> want;
                for (const auto& [other, r] : rank_of) {
                  bool same = true;
                  for (int b = 0; b < TL_N_AXES; b++) same &= b == a || other[b] == coord[b];
                  if (same) want.push_back(r);
                }
                std::sort(want.begin(), want.end());
                std::vector<int> got(size[a]);
                ASSERT_EQ(tl_mesh_group_ranks(&m, rank, (tl_axis)a, got.data()), size[a]);
                EXPECT_EQ(got, want) << "rank " << rank << " axis " << tl_axis_name((tl_axis)a);
                // A member's index in the group is its coordinate on the axis.
                EXPECT_EQ(got[coord[a]], rank);
                // The group id is shared by exactly the group's members.
                for (const auto& [other, r] : rank_of) {
                  bool member = std::find(want.begin(), want.end(), r) != want.end();
                  EXPECT_EQ(
                      tl_mesh_group_id(&m, r, (tl_axis)a) == tl_mesh_group_id(&m, rank, (tl_axis)a),
                      member);
                }
              }
              // The data group: the ranks of its tp and pp coordinates, each
              // at index dp_i * cp + cp_i.
              for (const auto& [other, r] : rank_of) {
                bool member = other[TL_AXIS_TP] == coord[TL_AXIS_TP] &&
                              other[TL_AXIS_PP] == coord[TL_AXIS_PP];
                EXPECT_EQ(tl_mesh_data_group_id(&m, r) == tl_mesh_data_group_id(&m, rank), member);
              }
              EXPECT_EQ(tl_mesh_data_index(&m, rank), coord[TL_AXIS_DP] * cp + coord[TL_AXIS_CP]);
            }
          }
        }
  }
  // factorisations into four ordered sizes: 1: 1, 2: 4, 3: 4, 4: 10, 6: 16,
  // 8: 20 — each in 24 orders
  EXPECT_EQ(meshes, (1 + 4 + 4 + 10 + 16 + 20) * 24);
}

TEST(Mesh, RankOrderPutsTensorParallelInnermostByDefault) {
  tl_mesh m;
  ASSERT_EQ(tl_mesh_init(3, 2, 4, 1, nullptr, &m), TL_OK);
  for (int pp_i = 0; pp_i < 4; pp_i++)
    for (int dp_i = 0; dp_i < 3; dp_i++)
      for (int tp_i = 0; tp_i < 2; tp_i++) {
        int c[TL_N_AXES] = {dp_i, tp_i, pp_i, 0};
        EXPECT_EQ(tl_mesh_rank(&m, c), ((pp_i * 3) + dp_i) * 2 + tp_i);  // Megatron
      }
  // with a context axis: tp, cp, dp, pp from the innermost
  ASSERT_EQ(tl_mesh_init(2, 2, 2, 2, nullptr, &m), TL_OK);
  for (int pp_i = 0; pp_i < 2; pp_i++)
    for (int dp_i = 0; dp_i < 2; dp_i++)
      for (int cp_i = 0; cp_i < 2; cp_i++)
        for (int tp_i = 0; tp_i < 2; tp_i++) {
          int c[TL_N_AXES] = {dp_i, tp_i, pp_i, cp_i};
          EXPECT_EQ(tl_mesh_rank(&m, c), ((pp_i * 2 + dp_i) * 2 + cp_i) * 2 + tp_i);
        }
}

TEST(Mesh, FourDeviceExamplePlacesOperatorsLikeTheDesign) {
  // dp = 2, pp = 2, pipeline innermost: devices 1..4 are ranks 0..3.
  const tl_axis order[TL_N_AXES] = {TL_AXIS_PP, TL_AXIS_DP, TL_AXIS_TP, TL_AXIS_CP};
  tl_mesh m;
  ASSERT_EQ(tl_mesh_init(2, 1, 2, 1, order, &m), TL_OK);
  int c[TL_N_AXES];
  tl_mesh_coords(&m, 0, c);
  EXPECT_EQ(c[TL_AXIS_PP], 0);  // device 1: operator 1
  tl_mesh_coords(&m, 1, c);
  EXPECT_EQ(c[TL_AXIS_PP], 1);  // device 2: operator 2
  tl_mesh_coords(&m, 2, c);
  EXPECT_EQ(c[TL_AXIS_PP], 0);  // device 3: operator 1
  EXPECT_EQ(c[TL_AXIS_DP], 1);
  int g[2];
  tl_mesh_group_ranks(&m, 0, TL_AXIS_DP, g);
  EXPECT_EQ(std::vector<int>(g, g + 2), std::vector<int>({0, 2}));  // devices 1 and 3
  tl_mesh_group_ranks(&m, 3, TL_AXIS_DP, g);
  EXPECT_EQ(std::vector<int>(g, g + 2), std::vector<int>({1, 3}));  // devices 2 and 4
  tl_mesh_group_ranks(&m, 2, TL_AXIS_PP, g);
  EXPECT_EQ(std::vector<int>(g, g + 2), std::vector<int>({2, 3}));  // replica B
}

TEST(Mesh, BadShapesAreRefusedWithTheValue) {
  tl_mesh m;
  EXPECT_EQ(tl_mesh_init(2, 0, 1, 1, nullptr, &m), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("mesh.tp = 0"), std::string::npos);
  EXPECT_EQ(tl_mesh_init(2, 1, 1, 0, nullptr, &m), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("mesh.cp = 0"), std::string::npos);
  const tl_axis twice[TL_N_AXES] = {TL_AXIS_TP, TL_AXIS_TP, TL_AXIS_PP, TL_AXIS_CP};
  EXPECT_EQ(tl_mesh_init(1, 1, 1, 1, twice, &m), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("permutation"), std::string::npos);
  EXPECT_EQ(tl_mesh_init(65536, 65536, 2, 1, nullptr, &m), TL_ERR_INVALID);
  EXPECT_EQ(m.n_ranks, 0);
}

TEST(Mesh, FromConfigUsesTheConfiguredOrder) {
  struct tl_config c;
  tl_config_defaults(&c);
  c.mesh.dp = 2;
  c.mesh.pp = 2;
  c.mesh.order[0] = TL_AXIS_PP;
  c.mesh.order[1] = TL_AXIS_DP;
  c.mesh.order[2] = TL_AXIS_TP;
  c.mesh.order[3] = TL_AXIS_CP;
  tl_mesh m;
  ASSERT_EQ(tl_mesh_from_config(&c.mesh, &m), TL_OK);
  EXPECT_EQ(m.stride[TL_AXIS_PP], 1);
  EXPECT_EQ(m.stride[TL_AXIS_DP], 2);
  EXPECT_EQ(m.n_ranks, 4);
}
