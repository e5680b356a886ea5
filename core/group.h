/* group.h — process groups: the ranks that run one mesh axis's collectives.
 *
 * A tl_group is a vtable with an opaque context (struct tl_group_ops, see
 * group_impl.h) and two implementations: MPI for host buffers
 * (group_mpi.h) and NCCL for CUDA device buffers (group_nccl.h). Code above
 * core sees only this interface, so data, tensor and pipeline parallelism
 * run unchanged on either.
 *
 * Calls. Every collective below is collective over the group: each member
 * calls it, in the same order, with the same count, dtype, op and root.
 * Each is asynchronous when `req` is non-NULL: it returns once the operation
 * is issued, with a wait handle in *req, and the buffers must stay untouched
 * until tl_group_wait(*req) returns — that is how gradient all-reduces
 * overlap the backward pass. With req == NULL the call returns when the
 * operation is complete. On MPICH, a nonblocking operation advances only
 * inside MPI calls; tl_group_test lets a compute loop push it along.
 *
 * Ordering on a GPU. An operation of a group on a GPU's buffers waits, on
 * the GPU, for everything issued to that device before the call (its
 * kernels, copies and zeroing), so a caller issues it right after the
 * kernels that write its input, without synchronizing the host, and a
 * receive or gather may write a buffer that kernels issued before it still
 * read. What it writes is the caller's once tl_group_wait (or the blocking
 * call) has returned. NCCL groups do it with an event (group_nccl.c),
 * emulated GPUs' groups by running the queue that far (group_emul.h).
 *
 * Types. Elements are TL_F32, TL_I32 or TL_I64; TL_REDUCE_AVG is f32 only (the sum
 * divided by the group size). Buffers live on tl_group_device(g): host
 * memory for MPI groups, the group's GPU for NCCL groups.
 *
 * Uneven counts. reduce_scatter and all_gather split `count` elements over
 * the group's n ranks in chunks of c = ceil(count / n) elements: member i
 * owns [min(i*c, count), min((i+1)*c, count)). The last members' chunks may
 * be shorter or empty (count = 10, n = 4: 3, 3, 3, 1; count = 5, n = 4:
 * 2, 2, 1, 0). tl_group_chunk gives a member its offset and length.
 *
 * Stats. Every call that is issued is counted per group and per kind, with
 * its bytes (see tl_group_stats), so tests and metrics can tell how much a
 * step communicated.
 *
 * Errors. Functions return TL_OK, TL_ERR_INVALID (bad argument: named with
 * its value), TL_ERR_UNSUPPORTED, or the backend's TL_ERR_MPI / TL_ERR_NCCL
 * with the library's message. A failed collective leaves the group unusable
 * in general: the caller should stop the job (the launcher's worker aborts
 * every rank). A group is used from one thread at a time. */
#ifndef TL_CORE_GROUP_H
#define TL_CORE_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/dtype.h"
#include "core/mesh.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_group tl_group;
/* A wait handle: one issued operation. Freed by tl_group_wait. */
typedef struct tl_group_request tl_group_request;

typedef enum { TL_REDUCE_SUM = 0, TL_REDUCE_AVG, TL_REDUCE_MAX } tl_reduce_op;

/* X(NAME, name): the kinds of call a group counts. */
#define TL_GROUP_CALL_MAP(X)          \
  X(ALL_REDUCE, "all_reduce")         \
  X(REDUCE_SCATTER, "reduce_scatter") \
  X(ALL_GATHER, "all_gather")         \
  X(BROADCAST, "broadcast")           \
  X(SEND, "send")                     \
  X(RECV, "recv")                     \
  X(BARRIER, "barrier")

/* clang-format off */
typedef enum {
#define TL__GROUP_CALL_ENUM(name, str) TL_GROUP_##name,
  TL_GROUP_CALL_MAP(TL__GROUP_CALL_ENUM)
#undef TL__GROUP_CALL_ENUM
  TL_GROUP_CALL_COUNT
} tl_group_call;
/* clang-format on */

/* "all_reduce", ...; "?" outside the table. */
const char* tl_group_call_name(tl_group_call call);

/* Calls issued and bytes they moved, per kind of call. Bytes are this
 * rank's buffer as the caller passed it: all_reduce, broadcast, send, recv:
 * count elements; reduce_scatter: the count elements it reduces; all_gather:
 * the count elements it assembles; barrier: 0. */
typedef struct tl_group_stats {
  int64_t calls[TL_GROUP_CALL_COUNT];
  int64_t bytes[TL_GROUP_CALL_COUNT];
  int64_t total_calls;
  int64_t total_bytes;
} tl_group_stats;

/* Colour for tl_group_split: this rank joins no group. */
#define TL_GROUP_UNDEFINED (-1)
/* Tags of tl_group_send/recv are 0..TL_GROUP_TAG_MAX (MPI's guaranteed range). */
#define TL_GROUP_TAG_MAX 32767

int tl_group_rank(const tl_group* g);
int tl_group_size(const tl_group* g);
/* The name given at creation ("world", "dp", "tp", "pp", ...). */
const char* tl_group_name(const tl_group* g);
/* "mpi" or "nccl". */
const char* tl_group_backend(const tl_group* g);
/* Where this group's buffers live. */
tl_device tl_group_device(const tl_group* g);

tl_group_stats tl_group_stats_get(const tl_group* g);
void tl_group_stats_reset(tl_group* g);

/* Member `index`'s chunk when `count` elements are split over `size`
 * members (see "Uneven counts" above). */
void tl_group_chunk(size_t count, int size, int index, size_t* offset, size_t* n);

/* recv (count) = op over members of send (count). send == recv: in place. */
tl_status tl_group_all_reduce(tl_group* g, const void* send, void* recv, size_t count,
                              tl_dtype dtype, tl_reduce_op op, tl_group_request** req);

/* recv (my chunk of count) = op over members of my chunk of send (count).
 * In place when recv == send + my chunk's offset (elements); otherwise the
 * buffers must not overlap. */
tl_status tl_group_reduce_scatter(tl_group* g, const void* send, void* recv, size_t count,
                                  tl_dtype dtype, tl_reduce_op op, tl_group_request** req);

/* recv (count) = every member's send (its chunk of count), in member order.
 * In place when send == recv + my chunk's offset (elements). */
tl_status tl_group_all_gather(tl_group* g, const void* send, void* recv, size_t count,
                              tl_dtype dtype, tl_group_request** req);

/* buf (count) on every member = buf on member `root`. */
tl_status tl_group_broadcast(tl_group* g, void* buf, size_t count, tl_dtype dtype, int root,
                             tl_group_request** req);

/* Point to point, not collective: send to member `peer`; the matching
 * tl_group_recv names this rank and the same tag (0..TL_GROUP_TAG_MAX) and
 * count. MPI matches messages by tag; NCCL has no tags and matches a pair's
 * messages in the order they were issued, so issue them in the same order
 * on both sides. A recv of a different count than was sent is an error. */
tl_status tl_group_send(tl_group* g, const void* buf, size_t count, tl_dtype dtype, int peer,
                        int tag, tl_group_request** req);
tl_status tl_group_recv(tl_group* g, void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                        tl_group_request** req);

/* Returns (or completes *req) once every member has called it. */
tl_status tl_group_barrier(tl_group* g, tl_group_request** req);

/* Blocks until the operation is complete, then frees the handle (also on
 * error). NULL does nothing. */
tl_status tl_group_wait(tl_group_request* req);
/* Waits for reqs[0..n), setting each to NULL; returns the first error. */
tl_status tl_group_wait_all(int n, tl_group_request** reqs);
/* Advances the operation; *done = whether it is complete (then wait returns
 * at once). Does not free the handle. */
tl_status tl_group_test(tl_group_request* req, bool* done);

/* Collective over `parent`: members with the same colour form a new group,
 * ordered by (key, parent rank) — MPI_Comm_split(parent, color, key). A
 * member passing TL_GROUP_UNDEFINED gets *out = NULL. The child uses the
 * parent's backend and device; `name` (copied) labels it in messages. */
tl_status tl_group_split(tl_group* parent, int color, int key, const char* name, tl_group** out);

/* Collective over `world` (whose size must be mesh->n_ranks, its rank being
 * the mesh rank): this rank's dp, tp, pp and cp groups into out[tl_axis],
 * named "dp", "tp", "pp", "cp" (a member's rank in each is its coordinate
 * on that axis), and its data group (dp x cp, mesh.h) into
 * out[TL_MESH_DATA], named "data" — the dp group itself when cp is 1.
 * tl_group_destroy_mesh frees them (the data group once). */
tl_status tl_group_split_mesh(tl_group* world, const tl_mesh* mesh, tl_group* out[TL_MESH_GROUPS]);
void tl_group_destroy_mesh(tl_group* groups[TL_MESH_GROUPS]);

/* Frees the group (not collective). Wait for its requests first. NULL is fine. */
void tl_group_destroy(tl_group* g);

#ifdef __cplusplus
}
#endif

#endif
