/* group_emul.c — NCCL's ordering over MPI (group_emul.h).
 *
 * Each operation is a queued record of its arguments. `drive` hands the
 * queue's first operation to an inner MPI group (synchronous sends), and
 * once MPI has completed it, the next: one at a time, in issue order, as a
 * stream runs them. Waits, tests and blocking calls drive the queue; a
 * caller that waits on a later operation waits for every one before it,
 * and meanwhile the watchdog is told which operation the queue is stuck
 * on. */
#include "core/group_emul.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/group_impl.h"
#include "core/group_mpi.h"
#include "core/watchdog.h"

struct eop {
  struct tl_group_request base; /* the caller's request, when asynchronous */
  tl_group_call call;
  const void* send;
  void* recv;
  size_t count;
  tl_dtype dtype;
  tl_reduce_op op;
  int peer; /* broadcast: the root */
  int tag;
  tl_group_request* inner; /* once handed to MPI */
  uint64_t mark;           /* the device's work issued before it (alloc.h) */
  bool posted, done;
  tl_status result;
  char message[512];
  struct eop* next;
};

struct emul_ctx {
  tl_group* inner;  /* MPI, over the same members, synchronous sends */
  tl_device device; /* the buffers': an emulated GPU's work runs before each operation */
  struct eop *head, *tail;
  char name[32]; /* the group's, for the watchdog */
  struct emul_ctx *prev_live, *next_live;
};

/* Every group of the process: each is a stream of its own, which the GPU
 * runs whatever the host waits for, so a wait moves all of them along
 * (groups are used from one thread: group.h). */
static struct emul_ctx* g_live;

static void named(void* ctx, const char* name) {
  struct emul_ctx* c = (struct emul_ctx*)ctx;
  snprintf(c->name, sizeof c->name, "%s", name);
}

static tl_status post(struct emul_ctx* c, struct eop* o) {
  tl_group* g = c->inner;
  tl_group_request** r = &o->inner;
  switch (o->call) {
    case TL_GROUP_ALL_REDUCE:
      return tl_group_all_reduce(g, o->send, o->recv, o->count, o->dtype, o->op, r);
    case TL_GROUP_REDUCE_SCATTER:
      return tl_group_reduce_scatter(g, o->send, o->recv, o->count, o->dtype, o->op, r);
    case TL_GROUP_ALL_GATHER:
      return tl_group_all_gather(g, o->send, o->recv, o->count, o->dtype, r);
    case TL_GROUP_BROADCAST:
      return tl_group_broadcast(g, o->recv, o->count, o->dtype, o->peer, r);
    case TL_GROUP_SEND:
      return tl_group_send(g, o->send, o->count, o->dtype, o->peer, o->tag, r);
    case TL_GROUP_RECV:
      return tl_group_recv(g, o->recv, o->count, o->dtype, o->peer, o->tag, r);
    case TL_GROUP_BARRIER:
      return tl_group_barrier(g, r);
    default:
      return TL_ERRF(TL_ERR_INTERNAL, "an emulated group cannot run call %d", (int)o->call);
  }
}

/* Ends o with `st`: its outcome kept for its waiter. */
static void retire(struct emul_ctx* c, struct eop* o, tl_status st) {
  o->done = true;
  o->result = st;
  if (st != TL_OK) snprintf(o->message, sizeof o->message, "%s", tl_last_error());
  c->head = o->next;
  if (!c->head) c->tail = NULL;
  o->next = NULL;
}

/* Moves the queue along as far as it goes now. */
static void drive(struct emul_ctx* c) {
  while (c->head) {
    struct eop* o = c->head;
    if (!o->posted) {
      o->posted = true;
      /* on an emulated GPU, what was issued to the device before it runs
       * first, as NCCL's stream waits for the CUDA groups' event */
      tl_status st = tl_device_run_to(c->device, o->mark);
      if (st == TL_OK) st = post(c, o);
      if (st != TL_OK) {
        retire(c, o, st);
        continue;
      }
    }
    bool done = false;
    tl_group* g = c->inner;
    tl_status st = g->ops->test(g->ctx, o->inner, &done);
    if (st == TL_OK && !done) return;
    /* the inner request's own wait frees it (at once: it is complete), past
     * group.c, whose wait would tell the watchdog that nothing waits */
    tl_status w = g->ops->wait(g->ctx, o->inner);
    g->n_pending--;
    o->inner = NULL;
    retire(c, o, st != TL_OK ? st : w);
  }
}

/* Waits until o is done (driving every queue), telling the watchdog what
 * o's queue waits on whenever that changes. */
static void finish(struct emul_ctx* c, struct eop* o) {
  const struct eop* told = NULL;
  long sleep_us = 1;
  for (int polls = 0;; polls++) {
    for (struct emul_ctx* x = g_live; x; x = x->next_live) drive(x);
    if (o->done) break;
    if (c->head != told && c->head) {
      told = c->head;
      tl_watchdog_enter(c->name, tl_group_call_name(told->call),
                        told->count * tl_dtype_size(told->dtype));
      sleep_us = 1, polls = 0;
    }
    if (polls < 64) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, sleep_us * 1000};
    nanosleep(&ts, NULL);
    if (sleep_us < 256) sleep_us *= 2;
  }
}

static tl_status outcome(struct eop* o) {
  tl_status st = o->result;
  if (st != TL_OK) TL_ERRF(st, "%s", o->message);
  free(o);
  return st;
}

/* Queues o; a blocking call (out NULL) waits for it, else *out is o. */
static tl_status issue(struct emul_ctx* c, struct eop* o, tl_group_request** out) {
  o->mark = tl_device_mark(c->device);
  if (c->tail)
    c->tail->next = o;
  else
    c->head = o;
  c->tail = o;
  drive(c);
  if (out) {
    *out = &o->base;
    return TL_OK;
  }
  finish(c, o);
  return outcome(o);
}

static struct eop* new_op(tl_group_call call, const void* send, void* recv, size_t count,
                          tl_dtype dtype) {
  struct eop* o = (struct eop*)calloc(1, sizeof *o);
  if (!o) return NULL;
  o->call = call, o->send = send, o->recv = recv, o->count = count, o->dtype = dtype;
  return o;
}

#define NEW_OP(o, ...)                 \
  struct eop* o = new_op(__VA_ARGS__); \
  if (!o) return TL_ERRF(TL_ERR_NOMEM, "no memory for an operation of an emulated group")

static tl_status e_all_reduce(void* ctx, const void* send, void* recv, size_t count, tl_dtype dtype,
                              tl_reduce_op op, tl_group_request** out) {
  NEW_OP(o, TL_GROUP_ALL_REDUCE, send, recv, count, dtype);
  o->op = op;
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_reduce_scatter(void* ctx, const void* send, void* recv, size_t count,
                                  tl_dtype dtype, tl_reduce_op op, tl_group_request** out) {
  NEW_OP(o, TL_GROUP_REDUCE_SCATTER, send, recv, count, dtype);
  o->op = op;
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_all_gather(void* ctx, const void* send, void* recv, size_t count, tl_dtype dtype,
                              tl_group_request** out) {
  NEW_OP(o, TL_GROUP_ALL_GATHER, send, recv, count, dtype);
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_broadcast(void* ctx, void* buf, size_t count, tl_dtype dtype, int root,
                             tl_group_request** out) {
  NEW_OP(o, TL_GROUP_BROADCAST, buf, buf, count, dtype);
  o->peer = root;
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_send(void* ctx, const void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                        tl_group_request** out) {
  NEW_OP(o, TL_GROUP_SEND, buf, NULL, count, dtype);
  o->peer = peer, o->tag = tag;
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_recv(void* ctx, void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                        tl_group_request** out) {
  NEW_OP(o, TL_GROUP_RECV, NULL, buf, count, dtype);
  o->peer = peer, o->tag = tag;
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_barrier(void* ctx, tl_group_request** out) {
  NEW_OP(o, TL_GROUP_BARRIER, NULL, NULL, 0, TL_F32);
  return issue((struct emul_ctx*)ctx, o, out);
}

static tl_status e_test(void* ctx, tl_group_request* req, bool* done) {
  struct emul_ctx* c = (struct emul_ctx*)ctx;
  struct eop* o = (struct eop*)req;
  drive(c);
  *done = o->done;
  return o->done ? o->result : TL_OK;
}

static tl_status e_wait(void* ctx, tl_group_request* req) {
  struct emul_ctx* c = (struct emul_ctx*)ctx;
  struct eop* o = (struct eop*)req;
  finish(c, o);
  return outcome(o);
}

static void e_destroy(void* ctx) {
  struct emul_ctx* c = (struct emul_ctx*)ctx;
  if (!c) return;
  /* operations never waited for: their inner requests went with the queue */
  for (struct eop* o = c->head; o;) {
    struct eop* next = o->next;
    free(o);
    o = next;
  }
  tl_group_destroy(c->inner);
  if (c->prev_live)
    c->prev_live->next_live = c->next_live;
  else
    g_live = c->next_live;
  if (c->next_live) c->next_live->prev_live = c->prev_live;
  free(c);
}

static tl_status wrap(tl_group* inner, tl_device device, struct emul_ctx** out) {
  struct emul_ctx* c = (struct emul_ctx*)calloc(1, sizeof *c);
  if (!c) {
    tl_group_destroy(inner);
    return TL_ERRF(TL_ERR_NOMEM, "no memory for an emulated group");
  }
  c->inner = inner;
  c->device = device;
  tl_group_mpi_synchronous_sends(inner);
  c->next_live = g_live;
  if (g_live) g_live->prev_live = c;
  g_live = c;
  *out = c;
  return TL_OK;
}

static tl_status e_split(void* ctx, int color, int key, void** child, int* rank, int* size) {
  struct emul_ctx* c = (struct emul_ctx*)ctx;
  *child = NULL;
  tl_group* inner = NULL;
  TL_CHECK(tl_group_split(c->inner, color, key, c->name, &inner));
  if (!inner) return TL_OK;
  struct emul_ctx* cc = NULL;
  TL_CHECK(wrap(inner, c->device, &cc));
  *child = cc;
  *rank = tl_group_rank(inner);
  *size = tl_group_size(inner);
  return TL_OK;
}

static const struct tl_group_ops k_emul_ops = {
    .name = "mpi (NCCL's ordering)",
    .all_reduce = e_all_reduce,
    .reduce_scatter = e_reduce_scatter,
    .all_gather = e_all_gather,
    .broadcast = e_broadcast,
    .send = e_send,
    .recv = e_recv,
    .barrier = e_barrier,
    .test = e_test,
    .wait = e_wait,
    .split = e_split,
    .destroy = e_destroy,
    .named = named,
};

tl_status tl_group_emul_create(tl_group* mpi_group, tl_device device, const char* name,
                               tl_group** out) {
  *out = NULL;
  name = name ? name : "group";
  MPI_Comm comm = tl_group_mpi_comm(mpi_group);
  if (comm == MPI_COMM_NULL)
    return TL_ERRF(TL_ERR_INVALID,
                   "emulated NCCL group '%s': needs an MPI group to start from, got '%s'", name,
                   tl_group_backend(mpi_group));
  tl_group* inner = NULL;
  TL_CHECK(tl_group_mpi_create(comm, name, &inner));
  struct emul_ctx* c = NULL;
  TL_CHECK(wrap(inner, device, &c));
  return tl__group_create(&k_emul_ops, c, tl_group_rank(inner), tl_group_size(inner), device, name,
                          out);
}
