/* mesh.h — the device mesh: where each rank sits on the data x tensor x
 * pipeline grid, and which ranks share each axis.
 *
 * A rank is a mixed-radix number whose digits are its coordinates, innermost
 * (fastest-varying) axis first. With the default order {tp, dp, pp} that is
 * Megatron's layout
 *
 *     rank = ((pp_i * dp) + dp_i) * tp + tp_i
 *
 * — tensor-parallel neighbours are neighbouring ranks (same node, fast
 * links), pipeline stages are furthest apart. Any other order the config
 * names (mesh.order) works the same way.
 *
 * The group of a rank along an axis is the ranks that share its other two
 * coordinates; a member's index inside the group is its coordinate on that
 * axis, and members in rank order are members in coordinate order (every
 * digit has a positive weight). Pure arithmetic: no communication here, see
 * group.h for the process groups built from it. */
#ifndef TL_CORE_MESH_H
#define TL_CORE_MESH_H

#include "core/config.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_mesh {
  int size[3];      /* ranks along each axis, indexed by tl_axis (dp, tp, pp) */
  tl_axis order[3]; /* innermost first */
  int stride[3];    /* rank distance between neighbours along each axis, by tl_axis */
  int n_ranks;      /* dp * tp * pp */
} tl_mesh;

/* "dp", "tp" or "pp"; "?" for other values. */
const char* tl_axis_name(tl_axis axis);

/* A mesh of dp x tp x pp ranks laid out in `order` (innermost first; NULL =
 * the default {tp, dp, pp}). TL_ERR_INVALID when a size is < 1, the product
 * overflows an int, or order is not a permutation of the three axes. */
tl_status tl_mesh_init(int dp, int tp, int pp, const tl_axis* order, tl_mesh* out);
tl_status tl_mesh_from_config(const struct tl_mesh_config* cfg, tl_mesh* out);

/* The rank at coordinates coord[tl_axis]; each must be in [0, size[axis]). */
int tl_mesh_rank(const tl_mesh* mesh, const int coord[3]);
/* The coordinates of `rank` (0 <= rank < n_ranks) into coord[tl_axis]. */
void tl_mesh_coords(const tl_mesh* mesh, int rank, int coord[3]);

/* The ranks of `rank`'s group along `axis`, in rank order, into ranks[]
 * (room for mesh->size[axis]); returns the count. ranks[i] has coordinate i
 * on `axis`, so `rank` is ranks[coord[axis]]. */
int tl_mesh_group_ranks(const tl_mesh* mesh, int rank, tl_axis axis, int* ranks);

/* A number that is the same for every member of `rank`'s group along `axis`
 * and different between groups: the lowest rank of the group. Used as the
 * colour when splitting a communicator (MPI_Comm_split). */
int tl_mesh_group_id(const tl_mesh* mesh, int rank, tl_axis axis);

#ifdef __cplusplus
}
#endif

#endif
