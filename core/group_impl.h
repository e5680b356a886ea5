/* group_impl.h — what a process-group backend implements (MPI in
 * group_mpi.c, NCCL in group_nccl.c) and the struct behind tl_group.
 *
 * group.c checks arguments, counts calls and then dispatches here, so a
 * backend sees only valid calls: dtype f32 or i32, op allowed for the dtype,
 * root/peer/tag in range, count <= INT_MAX, buffers non-NULL when count > 0,
 * and in-place forms as group.h describes them. */
#ifndef TL_CORE_GROUP_IMPL_H
#define TL_CORE_GROUP_IMPL_H

#include "core/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every backend's request starts with this header; group.c fills in `group`. */
struct tl_group_request {
  tl_group* group;
  int call; /* tl_group_call, and its bytes: what a wait waits for (watchdog.h) */
  size_t bytes;
};

/* `req` NULL: complete the operation before returning. Otherwise issue it and
 * store a request (allocated by the backend, freed by its wait) in *req. */
struct tl_group_ops {
  const char* name; /* "mpi", "nccl" */
  tl_status (*all_reduce)(void* ctx, const void* send, void* recv, size_t count, tl_dtype dtype,
                          tl_reduce_op op, tl_group_request** req);
  tl_status (*reduce_scatter)(void* ctx, const void* send, void* recv, size_t count, tl_dtype dtype,
                              tl_reduce_op op, tl_group_request** req);
  tl_status (*all_gather)(void* ctx, const void* send, void* recv, size_t count, tl_dtype dtype,
                          tl_group_request** req);
  tl_status (*broadcast)(void* ctx, void* buf, size_t count, tl_dtype dtype, int root,
                         tl_group_request** req);
  tl_status (*send)(void* ctx, const void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                    tl_group_request** req);
  tl_status (*recv)(void* ctx, void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                    tl_group_request** req);
  tl_status (*barrier)(void* ctx, tl_group_request** req);
  tl_status (*test)(void* ctx, tl_group_request* req, bool* done);
  tl_status (*wait)(void* ctx, tl_group_request* req); /* frees req, also on error */
  /* Collective: the child's context, rank and size; *child NULL for
   * TL_GROUP_UNDEFINED. */
  tl_status (*split)(void* ctx, int color, int key, void** child, int* rank, int* size);
  void (*destroy)(void* ctx);
  /* optional: the group's name, once it has one (for messages) */
  void (*named)(void* ctx, const char* name);
};

struct tl_group {
  const struct tl_group_ops* ops;
  void* ctx;
  int rank, size;
  tl_device device;
  char name[32];
  tl_group_stats stats;
  int n_pending; /* requests issued and not yet waited */
};

/* Wraps a backend context (taking ownership: destroyed with the group, or
 * right away when this fails). */
tl_status tl__group_create(const struct tl_group_ops* ops, void* ctx, int rank, int size,
                           tl_device device, const char* name, tl_group** out);

#ifdef __cplusplus
}
#endif

#endif
