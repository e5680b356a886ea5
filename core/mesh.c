/* mesh.c — rank <-> (dp, tp, pp, cp) as a mixed-radix number, innermost
 * axis first; groups as the ranks that differ only in one digit (the data
 * group: in the dp and cp digits). */
#include "core/mesh.h"

#include <limits.h>
#include <string.h>

const char* tl_axis_name(tl_axis axis) {
  switch (axis) {
    case TL_AXIS_DP:
      return "dp";
    case TL_AXIS_TP:
      return "tp";
    case TL_AXIS_PP:
      return "pp";
    case TL_AXIS_CP:
      return "cp";
  }
  return "?";
}

tl_status tl_mesh_init(int dp, int tp, int pp, int cp, const tl_axis* order, tl_mesh* out) {
  static const tl_axis k_default[TL_N_AXES] = {TL_AXIS_TP, TL_AXIS_CP, TL_AXIS_DP, TL_AXIS_PP};
  memset(out, 0, sizeof *out);
  if (!order) order = k_default;
  int sizes[TL_N_AXES] = {dp, tp, pp, cp};
  for (int a = 0; a < TL_N_AXES; a++)
    if (sizes[a] < 1)
      return TL_ERRF(TL_ERR_INVALID, "mesh.%s = %d: expected an integer >= 1",
                     tl_axis_name((tl_axis)a), sizes[a]);
  if ((long long)dp * tp * pp * cp > INT_MAX)
    return TL_ERRF(TL_ERR_INVALID,
                   "mesh: dp * tp * pp * cp = %d * %d * %d * %d is more ranks than an int", dp, tp,
                   pp, cp);
  int seen = 0;
  for (int i = 0; i < TL_N_AXES; i++)
    if ((int)order[i] >= 0 && (int)order[i] < TL_N_AXES) seen |= 1 << order[i];
  if (seen != (1 << TL_N_AXES) - 1)
    return TL_ERRF(TL_ERR_INVALID,
                   "mesh.order = [%d, %d, %d, %d]: expected a permutation of the four axes "
                   "(dp = %d, tp = %d, pp = %d, cp = %d)",
                   order[0], order[1], order[2], order[3], TL_AXIS_DP, TL_AXIS_TP, TL_AXIS_PP,
                   TL_AXIS_CP);
  tl_mesh m;
  memcpy(m.size, sizes, sizeof sizes);
  memcpy(m.order, order, sizeof m.order);
  int stride = 1;
  for (int i = 0; i < TL_N_AXES; i++) {
    m.stride[order[i]] = stride;
    stride *= sizes[order[i]];
  }
  m.n_ranks = stride;
  *out = m;
  return TL_OK;
}

tl_status tl_mesh_from_config(const struct tl_mesh_config* cfg, tl_mesh* out) {
  return tl_mesh_init(cfg->dp, cfg->tp, cfg->pp, cfg->cp, cfg->order, out);
}

int tl_mesh_rank(const tl_mesh* mesh, const int coord[TL_N_AXES]) {
  int rank = 0;
  for (int a = 0; a < TL_N_AXES; a++) {
    TL_ASSERT(coord[a] >= 0 && coord[a] < mesh->size[a]);
    rank += coord[a] * mesh->stride[a];
  }
  return rank;
}

void tl_mesh_coords(const tl_mesh* mesh, int rank, int coord[TL_N_AXES]) {
  TL_ASSERT(rank >= 0 && rank < mesh->n_ranks);
  for (int a = 0; a < TL_N_AXES; a++) coord[a] = rank / mesh->stride[a] % mesh->size[a];
}

int tl_mesh_group_ranks(const tl_mesh* mesh, int rank, tl_axis axis, int* ranks) {
  int base = tl_mesh_group_id(mesh, rank, axis);
  for (int i = 0; i < mesh->size[axis]; i++) ranks[i] = base + i * mesh->stride[axis];
  return mesh->size[axis];
}

int tl_mesh_group_id(const tl_mesh* mesh, int rank, tl_axis axis) {
  int coord[TL_N_AXES];
  tl_mesh_coords(mesh, rank, coord);
  return rank - coord[axis] * mesh->stride[axis];
}

int tl_mesh_data_group_id(const tl_mesh* mesh, int rank) {
  int coord[TL_N_AXES];
  tl_mesh_coords(mesh, rank, coord);
  return rank - coord[TL_AXIS_DP] * mesh->stride[TL_AXIS_DP] -
         coord[TL_AXIS_CP] * mesh->stride[TL_AXIS_CP];
}

int tl_mesh_data_index(const tl_mesh* mesh, int rank) {
  int coord[TL_N_AXES];
  tl_mesh_coords(mesh, rank, coord);
  return coord[TL_AXIS_DP] * mesh->size[TL_AXIS_CP] + coord[TL_AXIS_CP];
}
