/* group.c — the backend-independent half of a process group: argument
 * checks with messages that name the group and the value, call counting,
 * request bookkeeping, and splitting (including the mesh's three groups). */
#include "core/group.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/group_impl.h"
#include "core/log.h"
#include "core/watchdog.h"

static const char* const k_call_names[] = {
#define TL__GROUP_CALL_NAME(name, str) str,
    TL_GROUP_CALL_MAP(TL__GROUP_CALL_NAME)
#undef TL__GROUP_CALL_NAME
};

const char* tl_group_call_name(tl_group_call call) {
  if ((int)call < 0 || call >= TL_GROUP_CALL_COUNT) return "?";
  return k_call_names[call];
}

tl_status tl__group_create(const struct tl_group_ops* ops, void* ctx, int rank, int size,
                           tl_device device, const char* name, tl_group** out) {
  *out = NULL;
  tl_group* g = (tl_group*)calloc(1, sizeof *g);
  if (!g) {
    ops->destroy(ctx);
    return TL_ERRF(TL_ERR_NOMEM, "no memory for process group '%s'", name);
  }
  g->ops = ops;
  g->ctx = ctx;
  g->rank = rank;
  g->size = size;
  g->device = device;
  snprintf(g->name, sizeof g->name, "%s", name ? name : "group");
  if (ops->named) ops->named(ctx, g->name);
  *out = g;
  return TL_OK;
}

int tl_group_rank(const tl_group* g) {
  return g->rank;
}
int tl_group_size(const tl_group* g) {
  return g->size;
}
const char* tl_group_name(const tl_group* g) {
  return g->name;
}
const char* tl_group_backend(const tl_group* g) {
  return g->ops->name;
}
tl_device tl_group_device(const tl_group* g) {
  return g->device;
}
tl_group_stats tl_group_stats_get(const tl_group* g) {
  return g->stats;
}
void tl_group_stats_reset(tl_group* g) {
  memset(&g->stats, 0, sizeof g->stats);
}

void tl_group_chunk(size_t count, int size, int index, size_t* offset, size_t* n) {
  size_t chunk = size > 0 ? (count + (size_t)size - 1) / (size_t)size : 0;
  size_t begin = chunk * (size_t)index, end = begin + chunk;
  if (begin > count) begin = count;
  if (end > count) end = count;
  *offset = begin;
  *n = end - begin;
}

/* ---- argument checks ------------------------------------------------------- */

static tl_status check_call(const tl_group* g, tl_group_call call, size_t count, tl_dtype dtype,
                            int op, const void* a, const void* b) {
  const char* what = k_call_names[call];
  if (dtype != TL_F32 && dtype != TL_BF16 && dtype != TL_I32 && dtype != TL_I64)
    return TL_ERRF(TL_ERR_UNSUPPORTED,
                   "group '%s': %s of %s elements: expected f32, bf16, i32 or i64", g->name, what,
                   tl_dtype_name(dtype));
  if (op >= 0) {
    if (op > TL_REDUCE_MAX)
      return TL_ERRF(TL_ERR_INVALID, "group '%s': %s with reduce op %d: expected sum, avg or max",
                     g->name, what, op);
    if (op == TL_REDUCE_AVG && dtype != TL_F32)
      return TL_ERRF(TL_ERR_UNSUPPORTED,
                     "group '%s': %s with avg of %s elements: avg is f32 only (use sum)", g->name,
                     what, tl_dtype_name(dtype));
  }
  if (count > INT_MAX)
    return TL_ERRF(TL_ERR_UNSUPPORTED,
                   "group '%s': %s of %zu elements: at most %d per call; split the buffer", g->name,
                   what, count, INT_MAX);
  if (count > 0 && (!a || !b))
    return TL_ERRF(TL_ERR_INVALID, "group '%s': %s of %zu elements with a NULL buffer", g->name,
                   what, count);
  return TL_OK;
}

static bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

static tl_status check_peer(const tl_group* g, const char* what, const char* role, int peer) {
  if (peer < 0 || peer >= g->size)
    return TL_ERRF(TL_ERR_INVALID, "group '%s': %s %s = %d: expected a member 0..%d", g->name, what,
                   role, peer, g->size - 1);
  return TL_OK;
}

/* Counts an issued call and adopts its request. */
static tl_status issued(tl_group* g, tl_group_call call, size_t bytes, tl_status st,
                        tl_group_request** req) {
  if (!req) tl_watchdog_leave(); /* a blocking call has returned (WATCH) */
  if (st != TL_OK) {
    if (req) *req = NULL;
    return st;
  }
  g->stats.calls[call]++;
  g->stats.bytes[call] += (int64_t)bytes;
  g->stats.total_calls++;
  g->stats.total_bytes += (int64_t)bytes;
  if (req) {
    (*req)->group = g;
    (*req)->call = (int)call;
    (*req)->bytes = bytes;
    g->n_pending++;
  }
  return TL_OK;
}

/* A blocking call about to wait: the watchdog knows what (watchdog.h). */
#define WATCH(g, call, bytes, req) \
  ((req) ? (void)0 : tl_watchdog_enter((g)->name, k_call_names[call], (bytes)))

/* ---- calls ------------------------------------------------------------------ */

tl_status tl_group_all_reduce(tl_group* g, const void* send, void* recv, size_t count,
                              tl_dtype dtype, tl_reduce_op op, tl_group_request** req) {
  if (req) *req = NULL;
  TL_CHECK(check_call(g, TL_GROUP_ALL_REDUCE, count, dtype, (int)op, send, recv));
  size_t bytes = count * tl_dtype_size(dtype);
  if (send != recv && overlap(send, bytes, recv, bytes))
    return TL_ERRF(TL_ERR_INVALID,
                   "group '%s': all_reduce buffers overlap without being the same (in place "
                   "means send == recv)",
                   g->name);
  WATCH(g, TL_GROUP_ALL_REDUCE, bytes, req);
  return issued(g, TL_GROUP_ALL_REDUCE, bytes,
                g->ops->all_reduce(g->ctx, send, recv, count, dtype, op, req), req);
}

tl_status tl_group_reduce_scatter(tl_group* g, const void* send, void* recv, size_t count,
                                  tl_dtype dtype, tl_reduce_op op, tl_group_request** req) {
  if (req) *req = NULL;
  TL_CHECK(check_call(g, TL_GROUP_REDUCE_SCATTER, count, dtype, (int)op, send, recv));
  size_t es = tl_dtype_size(dtype), off, n;
  tl_group_chunk(count, g->size, g->rank, &off, &n);
  bool in_place = (const char*)recv == (const char*)send + off * es;
  if (!in_place && overlap(send, count * es, recv, n * es))
    return TL_ERRF(TL_ERR_INVALID,
                   "group '%s': reduce_scatter buffers overlap (in place means recv == send + "
                   "this member's offset, %zu elements)",
                   g->name, off);
  WATCH(g, TL_GROUP_REDUCE_SCATTER, count * es, req);
  return issued(g, TL_GROUP_REDUCE_SCATTER, count * es,
                g->ops->reduce_scatter(g->ctx, send, recv, count, dtype, op, req), req);
}

tl_status tl_group_all_gather(tl_group* g, const void* send, void* recv, size_t count,
                              tl_dtype dtype, tl_group_request** req) {
  if (req) *req = NULL;
  TL_CHECK(check_call(g, TL_GROUP_ALL_GATHER, count, dtype, -1, send, recv));
  size_t es = tl_dtype_size(dtype), off, n;
  tl_group_chunk(count, g->size, g->rank, &off, &n);
  bool in_place = (const char*)send == (const char*)recv + off * es;
  if (!in_place && overlap(send, n * es, recv, count * es))
    return TL_ERRF(TL_ERR_INVALID,
                   "group '%s': all_gather buffers overlap (in place means send == recv + this "
                   "member's offset, %zu elements)",
                   g->name, off);
  WATCH(g, TL_GROUP_ALL_GATHER, count * es, req);
  return issued(g, TL_GROUP_ALL_GATHER, count * es,
                g->ops->all_gather(g->ctx, send, recv, count, dtype, req), req);
}

tl_status tl_group_broadcast(tl_group* g, void* buf, size_t count, tl_dtype dtype, int root,
                             tl_group_request** req) {
  if (req) *req = NULL;
  TL_CHECK(check_call(g, TL_GROUP_BROADCAST, count, dtype, -1, buf, buf));
  TL_CHECK(check_peer(g, "broadcast", "root", root));
  WATCH(g, TL_GROUP_BROADCAST, count * tl_dtype_size(dtype), req);
  return issued(g, TL_GROUP_BROADCAST, count * tl_dtype_size(dtype),
                g->ops->broadcast(g->ctx, buf, count, dtype, root, req), req);
}

static tl_status check_tag(const tl_group* g, const char* what, int tag) {
  if (tag < 0 || tag > TL_GROUP_TAG_MAX)
    return TL_ERRF(TL_ERR_INVALID, "group '%s': %s tag = %d: expected 0..%d", g->name, what, tag,
                   TL_GROUP_TAG_MAX);
  return TL_OK;
}

tl_status tl_group_send(tl_group* g, const void* buf, size_t count, tl_dtype dtype, int peer,
                        int tag, tl_group_request** req) {
  if (req) *req = NULL;
  TL_CHECK(check_call(g, TL_GROUP_SEND, count, dtype, -1, buf, buf));
  TL_CHECK(check_peer(g, "send", "peer", peer));
  TL_CHECK(check_tag(g, "send", tag));
  WATCH(g, TL_GROUP_SEND, count * tl_dtype_size(dtype), req);
  return issued(g, TL_GROUP_SEND, count * tl_dtype_size(dtype),
                g->ops->send(g->ctx, buf, count, dtype, peer, tag, req), req);
}

tl_status tl_group_recv(tl_group* g, void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                        tl_group_request** req) {
  if (req) *req = NULL;
  TL_CHECK(check_call(g, TL_GROUP_RECV, count, dtype, -1, buf, buf));
  TL_CHECK(check_peer(g, "recv", "peer", peer));
  TL_CHECK(check_tag(g, "recv", tag));
  WATCH(g, TL_GROUP_RECV, count * tl_dtype_size(dtype), req);
  return issued(g, TL_GROUP_RECV, count * tl_dtype_size(dtype),
                g->ops->recv(g->ctx, buf, count, dtype, peer, tag, req), req);
}

tl_status tl_group_barrier(tl_group* g, tl_group_request** req) {
  if (req) *req = NULL;
  WATCH(g, TL_GROUP_BARRIER, 0, req);
  return issued(g, TL_GROUP_BARRIER, 0, g->ops->barrier(g->ctx, req), req);
}

/* ---- completion ------------------------------------------------------------- */

tl_status tl_group_wait(tl_group_request* req) {
  if (!req) return TL_OK;
  tl_group* g = req->group;
  g->n_pending--;
  tl_watchdog_enter(g->name, k_call_names[req->call], req->bytes);
  tl_status st = g->ops->wait(g->ctx, req);
  tl_watchdog_leave();
  return st;
}

tl_status tl_group_wait_all(int n, tl_group_request** reqs) {
  tl_status first = TL_OK;
  char message[1024] = "";
  for (int i = 0; i < n; i++) {
    tl_status st = tl_group_wait(reqs[i]);
    reqs[i] = NULL;
    if (st != TL_OK && first == TL_OK) {
      first = st;
      snprintf(message, sizeof message, "%s", tl_last_error());
    }
  }
  if (first != TL_OK) return TL_ERRF(first, "%s", message);
  return TL_OK;
}

tl_status tl_group_test(tl_group_request* req, bool* done) {
  *done = true;
  if (!req) return TL_OK;
  *done = false;
  return req->group->ops->test(req->group->ctx, req, done);
}

/* ---- groups of groups -------------------------------------------------------- */

tl_status tl_group_split(tl_group* parent, int color, int key, const char* name, tl_group** out) {
  *out = NULL;
  if (color < 0 && color != TL_GROUP_UNDEFINED)
    return TL_ERRF(TL_ERR_INVALID,
                   "group '%s': split colour %d: expected >= 0 or TL_GROUP_UNDEFINED", parent->name,
                   color);
  void* child = NULL;
  int rank = -1, size = 0;
  TL_CHECK(parent->ops->split(parent->ctx, color, key, &child, &rank, &size));
  if (!child) return TL_OK;
  return tl__group_create(parent->ops, child, rank, size, parent->device, name, out);
}

tl_status tl_group_split_mesh(tl_group* world, const tl_mesh* mesh, tl_group* out[TL_MESH_GROUPS]) {
  for (int a = 0; a < TL_MESH_GROUPS; a++) out[a] = NULL;
  if (world->size != mesh->n_ranks)
    return TL_ERRF(TL_ERR_INVALID,
                   "group '%s' has %d ranks but the mesh dp * tp * pp * cp = %d * %d * %d * %d "
                   "= %d",
                   world->name, world->size, mesh->size[TL_AXIS_DP], mesh->size[TL_AXIS_TP],
                   mesh->size[TL_AXIS_PP], mesh->size[TL_AXIS_CP], mesh->n_ranks);
  int coord[TL_N_AXES];
  tl_mesh_coords(mesh, world->rank, coord);
  tl_status st = TL_OK;
  for (int a = 0; a < TL_N_AXES && st == TL_OK; a++)
    st = tl_group_split(world, tl_mesh_group_id(mesh, world->rank, (tl_axis)a), coord[a],
                        tl_axis_name((tl_axis)a), &out[a]);
  if (st == TL_OK && mesh->size[TL_AXIS_CP] > 1)
    st = tl_group_split(world, tl_mesh_data_group_id(mesh, world->rank),
                        tl_mesh_data_index(mesh, world->rank), "data", &out[TL_MESH_DATA]);
  else if (st == TL_OK)
    out[TL_MESH_DATA] = out[TL_AXIS_DP];
  if (st != TL_OK) tl_group_destroy_mesh(out);
  return st;
}

void tl_group_destroy_mesh(tl_group* groups[TL_MESH_GROUPS]) {
  if (groups[TL_MESH_DATA] != groups[TL_AXIS_DP]) tl_group_destroy(groups[TL_MESH_DATA]);
  for (int a = 0; a < TL_MESH_GROUPS; a++) {
    if (a != TL_MESH_DATA) tl_group_destroy(groups[a]);
    groups[a] = NULL;
  }
}

void tl_group_destroy(tl_group* g) {
  if (!g) return;
  if (g->n_pending)
    TL_LOG_WARN("process group '%s' destroyed with %d request%s not waited for", g->name,
                g->n_pending, g->n_pending == 1 ? "" : "s");
  g->ops->destroy(g->ctx);
  free(g);
}
