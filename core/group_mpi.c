/* group_mpi.c — process groups over MPI communicators, for host buffers.
 *
 * Asynchronous calls use MPI's nonblocking collectives (MPI_Iallreduce, ...)
 * and a request that also remembers what must happen once the data has
 * arrived (divide for avg, move an in-place reduce-scatter's result into
 * place, check a receive's length). Synchronous calls use the blocking
 * collectives, which MPICH tunes separately and which are what a plain MPI
 * program would call — so a synchronous tl_group call costs what raw MPI
 * costs (tests/bench/allreduce_bench.c measures it). Even splits use the
 * _block / plain all-gather forms; uneven ones the v-forms with counts from
 * tl_group_chunk.
 *
 * Waiting. MPICH waits by busy-polling. With more ranks on a node than cores
 * that is ruinous: a rank spinning for its peer holds the core the peer needs,
 * and every message of a collective waits for the scheduler to rotate (about
 * 16 ms per 64 KiB all-reduce among 4 ranks on 2 cores, 80 ms among 8). A
 * group that "yields" therefore issues even synchronous calls as nonblocking
 * ones and polls them with MPI_Test, giving the core away (sched_yield)
 * between polls: the same all-reduce then takes 0.3 ms and 1.7 ms. With a
 * core per rank the two cost the same (the bench above), but spinning stays
 * the default there. TRELLIS_MPI_WAIT chooses; "auto" yields when the node's
 * ranks times their threads outnumber its online cores. A yielding wait
 * whose message or members are late sleeps between polls (wait_yielding). */
#include "core/group_mpi.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "core/env.h"
#include "core/group_impl.h"

struct mpi_ctx {
  MPI_Comm comm;
  int rank, size;
  bool yield; /* poll and yield the core instead of MPI's busy wait */
  bool ssend; /* sends end only when their receive is posted (NCCL's) */
};

struct mpi_req {
  struct tl_group_request base;
  MPI_Request mpi;
  float* avg; /* scale avg_n elements by 1/size once complete */
  size_t avg_n;
  int size;
  char* move_dst; /* then move move_bytes from move_src to move_dst */
  const char* move_src;
  size_t move_bytes;
  int expect; /* recv: elements expected (-1: not a recv) */
  MPI_Datatype dt;
  int peer, tag;
  int* arrays;   /* counts and displacements of a v-collective */
  bool finished; /* completed by test; `result` is its outcome */
  tl_status result;
  char* message;
};

static MPI_Datatype dt_of(tl_dtype d) {
  return d == TL_F32    ? MPI_FLOAT
         : d == TL_I64  ? MPI_INT64_T
         : d == TL_BF16 ? MPI_UINT16_T
                        : MPI_INT;
}

/* bf16 reductions: MPI has no bf16, so its elements travel as 16-bit
 * integers and these ops combine them, each pair in fp32 and rounded back
 * (what a bf16 all-reduce over NCCL does). */
static void bf16_sum(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  const uint16_t* a = in;
  uint16_t* b = inout;
  for (int i = 0; i < *len; i++) b[i] = tl_f32_to_bf16(tl_bf16_to_f32(a[i]) + tl_bf16_to_f32(b[i]));
}

static void bf16_max(void* in, void* inout, int* len, MPI_Datatype* dt) {
  (void)dt;
  const uint16_t* a = in;
  uint16_t* b = inout;
  for (int i = 0; i < *len; i++)
    if (tl_bf16_to_f32(a[i]) > tl_bf16_to_f32(b[i])) b[i] = a[i];
}

static MPI_Op op_of(tl_reduce_op op, tl_dtype d) {
  if (d == TL_BF16) {
    /* created on first use (after MPI_Init); MPI_Finalize frees them */
    static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
    if (sum == MPI_OP_NULL) MPI_Op_create(bf16_sum, 1, &sum);
    if (max == MPI_OP_NULL) MPI_Op_create(bf16_max, 1, &max);
    return op == TL_REDUCE_MAX ? max : sum;
  }
  return op == TL_REDUCE_MAX ? MPI_MAX : MPI_SUM;
}

tl_status tl_mpi_error(int code, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING + 1];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", code);
  msg[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
  int n = (int)strcspn(call, "(");
  return tl__set_error(TL_ERR_MPI, file, line, "%.*s failed: %s", n, call, msg);
}

/* A request on the heap for an asynchronous call, else the caller's stack one. */
static tl_status begin(struct mpi_ctx* c, tl_group_request** out, struct mpi_req* stack,
                       struct mpi_req** r) {
  struct mpi_req* p = stack;
  if (out) {
    p = (struct mpi_req*)malloc(sizeof *p);
    if (!p) return TL_ERRF(TL_ERR_NOMEM, "no memory for an MPI request");
  }
  memset(p, 0, sizeof *p);
  p->mpi = MPI_REQUEST_NULL;
  p->size = c->size;
  p->expect = -1;
  *r = p;
  return TL_OK;
}

/* What happens once the data is there. */
static tl_status finish(struct mpi_req* r, MPI_Status* status) {
  tl_status st = TL_OK;
  if (r->move_bytes) memmove(r->move_dst, r->move_src, r->move_bytes);
  if (r->avg) {
    float scale = 1.0f / (float)r->size;
    for (size_t i = 0; i < r->avg_n; i++) r->avg[i] *= scale;
  }
  if (r->expect >= 0) {
    int n = -1;
    MPI_Get_count(status, r->dt, &n);
    if (n != r->expect)
      st = TL_ERRF(TL_ERR_INVALID, "recv from member %d (tag %d): got %d elements, expected %d",
                   r->peer, r->tag, n, r->expect);
  }
  free(r->arrays);
  r->arrays = NULL;
  return st;
}

/* A yielding wait goes to sleep between polls, from 1 us doubling to
 * SLEEP_MAX_US: a receive once WAIT_YIELDS polls have not found its
 * message, anything else once it has yielded for WAIT_YIELD_S. */
#define WAIT_YIELDS 16
#define WAIT_YIELD_S 2e-3
#define SLEEP_MAX_US 256

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* MPI_Wait, giving the core away between polls. A rank that polls and
 * yields stays on the run queue and still takes a share of the cores; one
 * that sleeps leaves it, and the ranks with work get whole cores. So a
 * receive that is not there after a few polls sleeps (a pipeline stage
 * waiting out its bubble), and so does a collective whose members are
 * late by more than a few milliseconds (a stage that finished its
 * backward first, waiting in the step's gradient-norm all-reduce for the
 * others to finish theirs). A collective whose members are close keeps
 * yielding: they progress it only while they poll, and sleeping at once
 * made the tensor-parallel meshes, a few collectives per layer, several
 * times slower. On 2 cores (tests/bench/plan_bench): an 8-stage pipeline
 * of 8 ranks steps in 49 ms against 65 ms yielding, a 4-stage one of 4
 * ranks with one micro-batch in 58 ms against 72 (the planner's 58), the
 * tensor-parallel meshes as before. */
static int wait_yielding(MPI_Request* req, MPI_Status* status, bool recv) {
  int flag = 0, rc, polls = 0;
  long sleep_us = 1;
  double start = 0;
  while ((rc = MPI_Test(req, &flag, status)) == MPI_SUCCESS && !flag) {
    if (polls == 0) start = now_s();
    if (polls < WAIT_YIELDS) polls++;
    if (polls < WAIT_YIELDS || (!recv && now_s() - start < WAIT_YIELD_S)) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, sleep_us * 1000};
    nanosleep(&ts, NULL);
    if (sleep_us < SLEEP_MAX_US) sleep_us *= 2;
  }
  return rc;
}

/* Whether a call is issued nonblocking: asynchronous ones, and every call of
 * a yielding group (then completed here by polling). */
static bool nonblocking(const struct mpi_ctx* c, tl_group_request** out) {
  return out || c->yield;
}

/* After the MPI call: complete now (synchronous) or hand the request out. */
static tl_status issued(const struct mpi_ctx* c, struct mpi_req* r, int rc, const char* call,
                        MPI_Status* status, tl_group_request** out) {
  if (rc == MPI_SUCCESS && !out && c->yield) {
    rc = wait_yielding(&r->mpi, status, r->expect >= 0);
    /* a failed wait may leave the request active: its counts stay (leaked) */
    if (rc != MPI_SUCCESS) return tl_mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
  }
  if (rc != MPI_SUCCESS) {
    free(r->arrays);
    if (out) free(r);
    return tl_mpi_error(rc, call, __FILE__, __LINE__);
  }
  if (!out) return finish(r, status);
  *out = &r->base;
  return TL_OK;
}

static tl_status mpi_all_reduce(void* ctx, const void* send, void* recv, size_t count,
                                tl_dtype dtype, tl_reduce_op op, tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  const void* sb = send == recv ? MPI_IN_PLACE : send;
  if (!out && !c->yield) { /* the hot path of data parallelism: nothing between us and MPI */
    TL_MPI_CHECK(MPI_Allreduce(sb, recv, (int)count, dt_of(dtype), op_of(op, dtype), c->comm));
    if (op == TL_REDUCE_AVG) {
      float scale = 1.0f / (float)c->size, *x = (float*)recv;
      for (size_t i = 0; i < count; i++) x[i] *= scale;
    }
    return TL_OK;
  }
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  if (op == TL_REDUCE_AVG) r->avg = (float*)recv, r->avg_n = count;
  int rc = MPI_Iallreduce(sb, recv, (int)count, dt_of(dtype), op_of(op, dtype), c->comm, &r->mpi);
  return issued(c, r, rc, "MPI_Iallreduce", MPI_STATUS_IGNORE, out);
}

/* counts[i], displs[i] of the chunks of `count` (v-collectives). */
static tl_status chunk_arrays(int size, size_t count, int** arrays) {
  int* a = (int*)malloc(2 * (size_t)size * sizeof(int));
  if (!a) return TL_ERRF(TL_ERR_NOMEM, "no memory for %d chunk counts", size);
  for (int i = 0; i < size; i++) {
    size_t off, n;
    tl_group_chunk(count, size, i, &off, &n);
    a[i] = (int)n;
    a[size + i] = (int)off;
  }
  *arrays = a;
  return TL_OK;
}

static tl_status mpi_reduce_scatter(void* ctx, const void* send, void* recv, size_t count,
                                    tl_dtype dtype, tl_reduce_op op, tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  size_t es = tl_dtype_size(dtype), off, n;
  tl_group_chunk(count, c->size, c->rank, &off, &n);
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  bool in_place = (const char*)recv == (const char*)send + off * es;
  /* MPI's in-place form reads the whole input from recvbuf and leaves this
   * rank's result at its start; finish() moves it to its chunk's place. */
  const void* sb = in_place ? MPI_IN_PLACE : send;
  void* rb = in_place ? (void*)send : recv;
  if (in_place && off > 0 && n > 0)
    r->move_dst = (char*)recv, r->move_src = (const char*)send, r->move_bytes = n * es;
  if (op == TL_REDUCE_AVG) r->avg = (float*)recv, r->avg_n = n;
  const bool nb = nonblocking(c, out);
  int rc;
  const char* call;
  if (count % (size_t)c->size == 0) {
    int block = (int)(count / (size_t)c->size);
    call = nb ? "MPI_Ireduce_scatter_block" : "MPI_Reduce_scatter_block";
    rc = nb ? MPI_Ireduce_scatter_block(sb, rb, block, dt_of(dtype), op_of(op, dtype), c->comm,
                                        &r->mpi)
            : MPI_Reduce_scatter_block(sb, rb, block, dt_of(dtype), op_of(op, dtype), c->comm);
  } else {
    tl_status st = chunk_arrays(c->size, count, &r->arrays);
    if (st != TL_OK) {
      if (out) free(r);
      return st;
    }
    call = nb ? "MPI_Ireduce_scatter" : "MPI_Reduce_scatter";
    rc = nb ? MPI_Ireduce_scatter(sb, rb, r->arrays, dt_of(dtype), op_of(op, dtype), c->comm,
                                  &r->mpi)
            : MPI_Reduce_scatter(sb, rb, r->arrays, dt_of(dtype), op_of(op, dtype), c->comm);
  }
  return issued(c, r, rc, call, MPI_STATUS_IGNORE, out);
}

static tl_status mpi_all_gather(void* ctx, const void* send, void* recv, size_t count,
                                tl_dtype dtype, tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  size_t es = tl_dtype_size(dtype), off, n;
  tl_group_chunk(count, c->size, c->rank, &off, &n);
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  const void* sb = (const char*)send == (const char*)recv + off * es ? MPI_IN_PLACE : send;
  MPI_Datatype dt = dt_of(dtype);
  const bool nb = nonblocking(c, out);
  int rc;
  const char* call;
  if (count % (size_t)c->size == 0) {
    int block = (int)(count / (size_t)c->size);
    call = nb ? "MPI_Iallgather" : "MPI_Allgather";
    rc = nb ? MPI_Iallgather(sb, block, dt, recv, block, dt, c->comm, &r->mpi)
            : MPI_Allgather(sb, block, dt, recv, block, dt, c->comm);
  } else {
    tl_status st = chunk_arrays(c->size, count, &r->arrays);
    if (st != TL_OK) {
      if (out) free(r);
      return st;
    }
    int* counts = r->arrays;
    int* displs = r->arrays + c->size;
    call = nb ? "MPI_Iallgatherv" : "MPI_Allgatherv";
    rc = nb ? MPI_Iallgatherv(sb, (int)n, dt, recv, counts, displs, dt, c->comm, &r->mpi)
            : MPI_Allgatherv(sb, (int)n, dt, recv, counts, displs, dt, c->comm);
  }
  return issued(c, r, rc, call, MPI_STATUS_IGNORE, out);
}

static tl_status mpi_broadcast(void* ctx, void* buf, size_t count, tl_dtype dtype, int root,
                               tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  const bool nb = nonblocking(c, out);
  int rc = nb ? MPI_Ibcast(buf, (int)count, dt_of(dtype), root, c->comm, &r->mpi)
              : MPI_Bcast(buf, (int)count, dt_of(dtype), root, c->comm);
  return issued(c, r, rc, nb ? "MPI_Ibcast" : "MPI_Bcast", MPI_STATUS_IGNORE, out);
}

static tl_status mpi_send(void* ctx, const void* buf, size_t count, tl_dtype dtype, int peer,
                          int tag, tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  const bool nb = nonblocking(c, out);
  int rc;
  if (c->ssend)
    rc = nb ? MPI_Issend(buf, (int)count, dt_of(dtype), peer, tag, c->comm, &r->mpi)
            : MPI_Ssend(buf, (int)count, dt_of(dtype), peer, tag, c->comm);
  else
    rc = nb ? MPI_Isend(buf, (int)count, dt_of(dtype), peer, tag, c->comm, &r->mpi)
            : MPI_Send(buf, (int)count, dt_of(dtype), peer, tag, c->comm);
  return issued(
      c, r, rc,
      nb ? (c->ssend ? "MPI_Issend" : "MPI_Isend") : (c->ssend ? "MPI_Ssend" : "MPI_Send"),
      MPI_STATUS_IGNORE, out);
}

static tl_status mpi_recv(void* ctx, void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                          tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  r->expect = (int)count;
  r->dt = dt_of(dtype);
  r->peer = peer;
  r->tag = tag;
  MPI_Status status;
  const bool nb = nonblocking(c, out);
  int rc = nb ? MPI_Irecv(buf, (int)count, r->dt, peer, tag, c->comm, &r->mpi)
              : MPI_Recv(buf, (int)count, r->dt, peer, tag, c->comm, &status);
  return issued(c, r, rc, nb ? "MPI_Irecv" : "MPI_Recv", &status, out);
}

static tl_status mpi_barrier(void* ctx, tl_group_request** out) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  struct mpi_req stack, *r;
  TL_CHECK(begin(c, out, &stack, &r));
  const bool nb = nonblocking(c, out);
  int rc = nb ? MPI_Ibarrier(c->comm, &r->mpi) : MPI_Barrier(c->comm);
  return issued(c, r, rc, nb ? "MPI_Ibarrier" : "MPI_Barrier", MPI_STATUS_IGNORE, out);
}

static tl_status mpi_test(void* ctx, tl_group_request* req, bool* done) {
  (void)ctx;
  struct mpi_req* r = (struct mpi_req*)req;
  if (r->finished) return *done = true, r->result;
  MPI_Status status;
  int flag = 0;
  TL_MPI_CHECK(MPI_Test(&r->mpi, &flag, &status));
  *done = flag != 0;
  if (!flag) return TL_OK;
  /* MPI has released its request: finish now and keep the outcome for wait. */
  r->finished = true;
  r->result = finish(r, &status);
  if (r->result != TL_OK) r->message = strdup(tl_last_error());
  return r->result;
}

static tl_status mpi_wait(void* ctx, tl_group_request* req) {
  const struct mpi_ctx* c = (const struct mpi_ctx*)ctx;
  struct mpi_req* r = (struct mpi_req*)req;
  tl_status st;
  if (r->finished) {
    st = r->result;
    if (st != TL_OK) TL_ERRF(st, "%s", r->message ? r->message : "request failed");
  } else {
    MPI_Status status;
    int rc =
        c->yield ? wait_yielding(&r->mpi, &status, r->expect >= 0) : MPI_Wait(&r->mpi, &status);
    if (rc != MPI_SUCCESS) { /* the request may still be active: its counts stay (leaked) */
      st = tl_mpi_error(rc, c->yield ? "MPI_Test" : "MPI_Wait", __FILE__, __LINE__);
    } else {
      st = finish(r, &status);
    }
  }
  free(r->message);
  free(r);
  return st;
}

static void mpi_destroy(void* ctx) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  if (!c) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  free(c);
}

/* Wraps `comm` (taken over) in a context with errors returned. */
static tl_status wrap(MPI_Comm comm, struct mpi_ctx** out) {
  *out = NULL;
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  struct mpi_ctx* c = rc == MPI_SUCCESS ? (struct mpi_ctx*)calloc(1, sizeof *c) : NULL;
  if (!c) {
    MPI_Comm_free(&comm);
    if (rc != MPI_SUCCESS) return tl_mpi_error(rc, "MPI_Comm_set_errhandler", __FILE__, __LINE__);
    return TL_ERRF(TL_ERR_NOMEM, "no memory for an MPI group");
  }
  c->comm = comm;
  MPI_Comm_rank(comm, &c->rank);
  MPI_Comm_size(comm, &c->size);
  *out = c;
  return TL_OK;
}

static tl_status mpi_split(void* ctx, int color, int key, void** child, int* rank, int* size) {
  struct mpi_ctx* c = (struct mpi_ctx*)ctx;
  *child = NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  TL_MPI_CHECK(
      MPI_Comm_split(c->comm, color == TL_GROUP_UNDEFINED ? MPI_UNDEFINED : color, key, &comm));
  if (comm == MPI_COMM_NULL) return TL_OK;
  struct mpi_ctx* cc;
  TL_CHECK(wrap(comm, &cc));
  cc->yield = c->yield;
  cc->ssend = c->ssend;
  *child = cc;
  *rank = cc->rank;
  *size = cc->size;
  return TL_OK;
}

static const struct tl_group_ops k_mpi_ops = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .wait = mpi_wait,
    .split = mpi_split,
    .destroy = mpi_destroy,
};

/* TRELLIS_MPI_WAIT: spin, yield, or auto — yield when this node's members of
 * `comm` times their threads outnumber its online cores. Collective, and the
 * members agree: one that yields issues nonblocking collectives, which must
 * not meet blocking ones on the same communicator, so if any member yields
 * (another node more crowded, another setting) they all do. */
static tl_status should_yield(MPI_Comm comm, bool* yield) {
  tl_mpi_wait mode = tl_env()->mpi_wait;
  MPI_Comm node = MPI_COMM_NULL;
  TL_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 1;
  int rc = MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return tl_mpi_error(rc, "MPI_Comm_size", __FILE__, __LINE__);
  long cores = tl_cpu_cores();
  if (cores < 1) cores = 1;
  int threads = tl_env()->num_threads;
  if (threads < 1) threads = (int)(cores / local > 0 ? cores / local : 1); /* the automatic count */
  int mine =
      mode == TL_MPI_WAIT_YIELD || (mode == TL_MPI_WAIT_AUTO && (long)local * threads > cores);
  int any = mine;
  TL_MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm));
  *yield = any != 0;
  return TL_OK;
}

tl_status tl_group_mpi_create(MPI_Comm comm, const char* name, tl_group** out) {
  *out = NULL;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return TL_ERRF(TL_ERR_INVALID, "process group '%s': MPI is not initialised (call MPI_Init)",
                   name ? name : "group");
  MPI_Comm dup = MPI_COMM_NULL;
  TL_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  struct mpi_ctx* c;
  TL_CHECK(wrap(dup, &c));
  tl_status st = should_yield(dup, &c->yield);
  if (st != TL_OK) {
    mpi_destroy(c);
    return st;
  }
  return tl__group_create(&k_mpi_ops, c, c->rank, c->size, tl_cpu(), name, out);
}

void tl_group_mpi_synchronous_sends(tl_group* g) {
  if (g->ops == &k_mpi_ops) ((struct mpi_ctx*)g->ctx)->ssend = true;
}

bool tl_group_mpi_yields(const tl_group* g) {
  return g->ops == &k_mpi_ops && ((const struct mpi_ctx*)g->ctx)->yield;
}

MPI_Comm tl_group_mpi_comm(const tl_group* g) {
  if (g->ops != &k_mpi_ops) return MPI_COMM_NULL;
  return ((const struct mpi_ctx*)g->ctx)->comm;
}
