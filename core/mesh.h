/* mesh.h — the device mesh: where each rank sits on the data x tensor x
 * pipeline x context grid, and which ranks share each axis.
 *
 * A rank is a mixed-radix number whose digits are its coordinates, innermost
 * (fastest-varying) axis first. With the default order {tp, cp, dp, pp} that
 * is Megatron's layout
 *
 *     rank = (((pp_i * dp) + dp_i) * cp + cp_i) * tp + tp_i
 *
 * — tensor-parallel neighbours are neighbouring ranks (same node, fast
 * links), pipeline stages are furthest apart. Any other order the config
 * names (mesh.order) works the same way.
 *
 * The group of a rank along an axis is the ranks that share its other
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
  int size[TL_N_AXES];      /* ranks along each axis, indexed by tl_axis (dp, tp, pp, cp) */
  tl_axis order[TL_N_AXES]; /* innermost first */
  int stride[TL_N_AXES];    /* rank distance between neighbours along each axis, by tl_axis */
  int n_ranks;              /* dp * tp * pp * cp */
} tl_mesh;

/* "dp", "tp", "pp" or "cp"; "?" for other values. */
const char* tl_axis_name(tl_axis axis);

/* A mesh of dp x tp x pp x cp ranks laid out in `order` (TL_N_AXES axes,
 * innermost first; NULL = the default {tp, cp, dp, pp}). TL_ERR_INVALID
 * when a size is < 1, the product overflows an int, or order is not a
 * permutation of the axes. */
tl_status tl_mesh_init(int dp, int tp, int pp, int cp, const tl_axis* order, tl_mesh* out);
tl_status tl_mesh_from_config(const struct tl_mesh_config* cfg, tl_mesh* out);

/* The rank at coordinates coord[tl_axis]; each must be in [0, size[axis]). */
int tl_mesh_rank(const tl_mesh* mesh, const int coord[TL_N_AXES]);
/* The coordinates of `rank` (0 <= rank < n_ranks) into coord[tl_axis]. */
void tl_mesh_coords(const tl_mesh* mesh, int rank, int coord[TL_N_AXES]);

/* The ranks of `rank`'s group along `axis`, in rank order, into ranks[]
 * (room for mesh->size[axis]); returns the count. ranks[i] has coordinate i
 * on `axis`, so `rank` is ranks[coord[axis]]. */
int tl_mesh_group_ranks(const tl_mesh* mesh, int rank, tl_axis axis, int* ranks);

/* A number that is the same for every member of `rank`'s group along `axis`
 * and different between groups: the lowest rank of the group. Used as the
 * colour when splitting a communicator (MPI_Comm_split). */
int tl_mesh_group_id(const tl_mesh* mesh, int rank, tl_axis axis);

/* The data group: the ranks that share `rank`'s tensor and pipeline
 * coordinates (dp x cp: what the gradients are summed over and ZeRO shards
 * its state over — context parallelism's ranks hold the same parameters
 * and each a share of every sequence's gradient). Its colour (the lowest
 * rank of the group) and this rank's index in it, dp_i * cp + cp_i. */
int tl_mesh_data_group_id(const tl_mesh* mesh, int rank);
/* The slot of the data group after the axes' in arrays of a rank's groups
 * (tl_group_split_mesh), and their length. */
#define TL_MESH_DATA TL_N_AXES
#define TL_MESH_GROUPS (TL_N_AXES + 1)
int tl_mesh_data_index(const tl_mesh* mesh, int rank);

#ifdef __cplusplus
}
#endif

#endif
