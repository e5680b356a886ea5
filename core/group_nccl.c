/* group_nccl.c — process groups over NCCL communicators, for device buffers.
 *
 * One ncclComm and one CUDA stream per group. NCCL's reduce-scatter and
 * all-gather want equal chunks; for counts that do not divide the group,
 * the same result comes from one grouped call per member (ncclReduce to
 * that member's chunk, ncclBroadcast from it) inside ncclGroupStart/End.
 * NCCL has no tags: send/recv between a pair match in issue order.
 *
 * libnccl is loaded when the first NCCL group is made, not linked: a
 * `trellis` that plans, checks or trains on CPUs must start where no CUDA
 * library is installed. It comes from the toolkit trellis was built against
 * (TL_CUDA_LIB_DIR), else from the loader's path (LD_LIBRARY_PATH: a bundle
 * carried to another machine, a PyTorch wheel's NCCL). */
#include "core/group_nccl.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/dynlib.h"
#include "core/env.h"
#include "core/group_impl.h"
#include "core/group_mpi.h"

#define TL_NCCL_CHECK(call)                                                        \
  do {                                                                             \
    ncclResult_t tl__r = (call);                                                   \
    if (tl__r != ncclSuccess) return nccl_error(tl__r, #call, __FILE__, __LINE__); \
  } while (0)

#define TL_CUDA_CHECK(call)                                                             \
  do {                                                                                  \
    cudaError_t tl__e = (call);                                                         \
    if (tl__e != cudaSuccess)                                                           \
      return tl__set_error(TL_ERR_CUDA, __FILE__, __LINE__, "%.*s failed: %s",          \
                           (int)strcspn(#call, "("), #call, cudaGetErrorString(tl__e)); \
  } while (0)

struct nccl_ctx {
  MPI_Comm comm; /* the same members: splits, barriers, the id broadcast */
  ncclComm_t nccl;
  cudaStream_t stream;
  cudaEvent_t issued; /* the device's work before an operation (after_device) */
  int device, rank, size;
};

struct nccl_req {
  struct tl_group_request base;
  cudaEvent_t done;
};

#ifndef TL_CUDA_LIB_DIR
#define TL_CUDA_LIB_DIR ""
#endif
#define TL_STR2(x) #x
#define TL_STR(x) TL_STR2(x)
#define NCCL_SONAME "libnccl.so." TL_STR(NCCL_MAJOR)

/* The NCCL functions trellis calls, found in the library once loaded. */
static struct {
  const char* (*GetLastError)(ncclComm_t);
  const char* (*GetErrorString)(ncclResult_t);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  bool loaded;
} nccl;
static char g_load_error[512];
static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;

static void load_nccl(void) {
  void* h = tl_dynlib_open(NCCL_SONAME, TL_CUDA_LIB_DIR, g_load_error, sizeof g_load_error);
  if (!h) return;
  const char* missing = NULL;
#define TL_SYM(field) \
  if (!missing && !(*(void**)& nccl.field = dlsym(h, "nccl" #field))) missing = "nccl" #field;
  TL_SYM(GetLastError)
  TL_SYM(GetErrorString)
  TL_SYM(GetUniqueId)
  TL_SYM(CommInitRank)
  TL_SYM(CommDestroy)
  TL_SYM(CommGetAsyncError)
  TL_SYM(AllReduce)
  TL_SYM(ReduceScatter)
  TL_SYM(AllGather)
  TL_SYM(Reduce)
  TL_SYM(Broadcast)
  TL_SYM(Send)
  TL_SYM(Recv)
  TL_SYM(GroupStart)
  TL_SYM(GroupEnd)
#undef TL_SYM
  if (missing) {
    snprintf(g_load_error, sizeof g_load_error, "%s has no %s", NCCL_SONAME, missing);
    dlclose(h);
    return;
  }
  nccl.loaded = true;
}

/* `call` is the source text ("nccl.AllReduce(...)", named as NCCL names
 * it: ncclAllReduce) or a name. */
static tl_status nccl_error(ncclResult_t r, const char* call, const char* file, int line) {
  const char* detail = nccl.GetLastError(NULL);
  const char* prefix = "";
  if (strncmp(call, "nccl.", 5) == 0) call += 5, prefix = "nccl";
  return tl__set_error(TL_ERR_NCCL, file, line, "%s%.*s failed: %s%s%s", prefix,
                       (int)strcspn(call, "("), call, nccl.GetErrorString(r),
                       detail && *detail ? ": " : "", detail ? detail : "");
}

static ncclDataType_t dt_of(tl_dtype d) {
  return d == TL_F32    ? ncclFloat32
         : d == TL_I64  ? ncclInt64
         : d == TL_BF16 ? ncclBfloat16
                        : ncclInt32;
}

static ncclRedOp_t op_of(tl_reduce_op op) {
  return op == TL_REDUCE_MAX ? ncclMax : op == TL_REDUCE_AVG ? ncclAvg : ncclSum;
}

/* Before an operation goes on NCCL's stream: the stream waits, on the
 * GPU, for everything issued to the device before it. An event recorded on
 * the legacy default stream follows every blocking stream's earlier work
 * (the compute streams') and the copies and zeroing queued there itself;
 * NCCL's non-blocking stream would otherwise wait for neither. So the host
 * need not synchronize before a collective, a send or a receive, and a
 * receive or gather does not overwrite what queued kernels still read. */
static tl_status after_device(struct nccl_ctx* c) {
  if (tl_fault_on(TL_FAULT_COLLECTIVES_UNORDERED)) return TL_OK; /* a deliberate bug */
  TL_CUDA_CHECK(cudaEventRecord(c->issued, cudaStreamLegacy));
  TL_CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->issued, 0));
  return TL_OK;
}

/* After the operation is on the stream: wait for it, or hand out an event. */
static tl_status enqueued(struct nccl_ctx* c, tl_group_request** out) {
  if (!out) {
    TL_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return TL_OK;
  }
  struct nccl_req* r = (struct nccl_req*)calloc(1, sizeof *r);
  if (!r) return TL_ERRF(TL_ERR_NOMEM, "no memory for an NCCL request");
  cudaError_t e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(r->done, c->stream);
  if (e != cudaSuccess) {
    if (r->done) cudaEventDestroy(r->done);
    free(r);
    return TL_ERRF(TL_ERR_CUDA, "cannot record an NCCL request's event: %s", cudaGetErrorString(e));
  }
  *out = &r->base;
  return TL_OK;
}

static tl_status nccl_all_reduce(void* ctx, const void* send, void* recv, size_t count,
                                 tl_dtype dtype, tl_reduce_op op, tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CHECK(after_device(c));
  TL_NCCL_CHECK(nccl.AllReduce(send, recv, count, dt_of(dtype), op_of(op), c->nccl, c->stream));
  return enqueued(c, out);
}

static tl_status nccl_reduce_scatter(void* ctx, const void* send, void* recv, size_t count,
                                     tl_dtype dtype, tl_reduce_op op, tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CHECK(after_device(c));
  if (count % (size_t)c->size == 0) {
    TL_NCCL_CHECK(nccl.ReduceScatter(send, recv, count / (size_t)c->size, dt_of(dtype), op_of(op),
                                     c->nccl, c->stream));
    return enqueued(c, out);
  }
  size_t es = tl_dtype_size(dtype);
  TL_NCCL_CHECK(nccl.GroupStart());
  for (int r = 0; r < c->size; r++) {
    size_t off, n;
    tl_group_chunk(count, c->size, r, &off, &n);
    if (n == 0) continue;
    ncclResult_t e = nccl.Reduce((const char*)send + off * es, recv, n, dt_of(dtype), op_of(op), r,
                                 c->nccl, c->stream);
    if (e != ncclSuccess) {
      nccl.GroupEnd();
      return nccl_error(e, "ncclReduce", __FILE__, __LINE__);
    }
  }
  TL_NCCL_CHECK(nccl.GroupEnd());
  return enqueued(c, out);
}

static tl_status nccl_all_gather(void* ctx, const void* send, void* recv, size_t count,
                                 tl_dtype dtype, tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CHECK(after_device(c));
  if (count % (size_t)c->size == 0) {
    TL_NCCL_CHECK(
        nccl.AllGather(send, recv, count / (size_t)c->size, dt_of(dtype), c->nccl, c->stream));
    return enqueued(c, out);
  }
  size_t es = tl_dtype_size(dtype);
  TL_NCCL_CHECK(nccl.GroupStart());
  for (int r = 0; r < c->size; r++) {
    size_t off, n;
    tl_group_chunk(count, c->size, r, &off, &n);
    if (n == 0) continue;
    ncclResult_t e =
        nccl.Broadcast(send, (char*)recv + off * es, n, dt_of(dtype), r, c->nccl, c->stream);
    if (e != ncclSuccess) {
      nccl.GroupEnd();
      return nccl_error(e, "ncclBroadcast", __FILE__, __LINE__);
    }
  }
  TL_NCCL_CHECK(nccl.GroupEnd());
  return enqueued(c, out);
}

static tl_status nccl_broadcast(void* ctx, void* buf, size_t count, tl_dtype dtype, int root,
                                tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CHECK(after_device(c));
  TL_NCCL_CHECK(nccl.Broadcast(buf, buf, count, dt_of(dtype), root, c->nccl, c->stream));
  return enqueued(c, out);
}

static tl_status nccl_send(void* ctx, const void* buf, size_t count, tl_dtype dtype, int peer,
                           int tag, tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  (void)tag; /* NCCL matches a pair's messages in issue order */
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CHECK(after_device(c));
  TL_NCCL_CHECK(nccl.Send(buf, count, dt_of(dtype), peer, c->nccl, c->stream));
  return enqueued(c, out);
}

static tl_status nccl_recv(void* ctx, void* buf, size_t count, tl_dtype dtype, int peer, int tag,
                           tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  (void)tag;
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CHECK(after_device(c));
  TL_NCCL_CHECK(nccl.Recv(buf, count, dt_of(dtype), peer, c->nccl, c->stream));
  return enqueued(c, out);
}

/* NCCL has no barrier: finish this member's work, then meet over MPI. The
 * barrier is complete when it returns, whether or not a request was asked for. */
static tl_status nccl_barrier(void* ctx, tl_group_request** out) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  TL_CUDA_CHECK(cudaSetDevice(c->device));
  TL_CUDA_CHECK(cudaStreamSynchronize(c->stream));
  TL_MPI_CHECK(MPI_Barrier(c->comm));
  return enqueued(c, out);
}

static tl_status check_async(struct nccl_ctx* c) {
  ncclResult_t async = ncclSuccess;
  TL_NCCL_CHECK(nccl.CommGetAsyncError(c->nccl, &async));
  if (async != ncclSuccess) return nccl_error(async, "NCCL operation", __FILE__, __LINE__);
  return TL_OK;
}

static tl_status nccl_test(void* ctx, tl_group_request* req, bool* done) {
  struct nccl_req* r = (struct nccl_req*)req;
  cudaError_t e = cudaEventQuery(r->done);
  if (e == cudaErrorNotReady) return *done = false, check_async((struct nccl_ctx*)ctx);
  *done = true;
  TL_CUDA_CHECK(e);
  return TL_OK;
}

static tl_status nccl_wait(void* ctx, tl_group_request* req) {
  struct nccl_req* r = (struct nccl_req*)req;
  cudaError_t e = cudaEventSynchronize(r->done);
  cudaEventDestroy(r->done);
  free(r);
  TL_CUDA_CHECK(e);
  return check_async((struct nccl_ctx*)ctx);
}

static void nccl_destroy(void* ctx) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  if (!c) return;
  cudaSetDevice(c->device);
  if (c->stream) cudaStreamSynchronize(c->stream);
  if (c->nccl) nccl.CommDestroy(c->nccl);
  if (c->stream) cudaStreamDestroy(c->stream);
  if (c->issued) cudaEventDestroy(c->issued);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  free(c);
}

/* Collective over `comm` (taken over): one NCCL communicator on `device`. */
static tl_status join(MPI_Comm comm, int device, struct nccl_ctx** out) {
  *out = NULL;
  struct nccl_ctx* c = (struct nccl_ctx*)calloc(1, sizeof *c);
  if (!c) {
    MPI_Comm_free(&comm);
    return TL_ERRF(TL_ERR_NOMEM, "no memory for an NCCL group");
  }
  c->comm = comm;
  c->device = device;
  tl_status st = TL_OK;
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, &c->size);
  if (rc != MPI_SUCCESS) {
    st = tl_mpi_error(rc, "MPI_Comm_rank", __FILE__, __LINE__);
    goto fail;
  }
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    st = TL_ERRF(TL_ERR_CUDA, "cannot use cuda:%d: %s", device, cudaGetErrorString(e));
    goto fail;
  }
  /* 1. rank 0 makes the id; its outcome travels with it so no rank waits
   *    for an id that will never come. */
  struct {
    int ok;
    ncclUniqueId id;
  } msg;
  memset(&msg, 0, sizeof msg);
  if (c->rank == 0) msg.ok = nccl.GetUniqueId(&msg.id) == ncclSuccess;
  rc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, comm);
  if (rc != MPI_SUCCESS) {
    st = tl_mpi_error(rc, "MPI_Bcast", __FILE__, __LINE__);
    goto fail;
  }
  if (!msg.ok) {
    st = TL_ERRF(TL_ERR_NCCL, "NCCL could not make a unique id on rank 0 of the group");
    goto fail;
  }
  /* 2. everyone joins */
  ncclResult_t r = nccl.CommInitRank(&c->nccl, c->size, msg.id, c->rank);
  if (r != ncclSuccess) {
    c->nccl = NULL;
    st = nccl_error(r, "ncclCommInitRank", __FILE__, __LINE__);
    goto fail;
  }
  e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    c->stream = NULL;
    st = TL_ERRF(TL_ERR_CUDA, "cannot create a stream on cuda:%d: %s", device,
                 cudaGetErrorString(e));
    goto fail;
  }
  e = cudaEventCreateWithFlags(&c->issued, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    c->issued = NULL;
    st = TL_ERRF(TL_ERR_CUDA, "cannot create an event on cuda:%d: %s", device,
                 cudaGetErrorString(e));
    goto fail;
  }
  *out = c;
  return TL_OK;
fail:
  nccl_destroy(c);
  return st;
}

static tl_status nccl_split(void* ctx, int color, int key, void** child, int* rank, int* size) {
  struct nccl_ctx* c = (struct nccl_ctx*)ctx;
  *child = NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  TL_MPI_CHECK(
      MPI_Comm_split(c->comm, color == TL_GROUP_UNDEFINED ? MPI_UNDEFINED : color, key, &comm));
  if (comm == MPI_COMM_NULL) return TL_OK;
  struct nccl_ctx* cc;
  TL_CHECK(join(comm, c->device, &cc));
  *child = cc;
  *rank = cc->rank;
  *size = cc->size;
  return TL_OK;
}

static const struct tl_group_ops k_nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .test = nccl_test,
    .wait = nccl_wait,
    .split = nccl_split,
    .destroy = nccl_destroy,
};

bool tl_group_nccl_built(void) {
  return true;
}

tl_status tl_group_nccl_check(void) {
  pthread_once(&g_load_once, load_nccl);
  return nccl.loaded ? TL_OK : TL_ERRF(TL_ERR_NCCL, "%s", g_load_error);
}

tl_status tl_group_nccl_create(tl_group* mpi_group, int device, const char* name, tl_group** out) {
  *out = NULL;
  name = name ? name : "group";
  MPI_Comm parent = tl_group_mpi_comm(mpi_group);
  if (parent == MPI_COMM_NULL)
    return TL_ERRF(TL_ERR_INVALID, "NCCL group '%s': needs an MPI group to start from, got '%s'",
                   name, tl_group_backend(mpi_group));
  /* 1. fail before any collective when this rank has no such GPU */
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    char buf[256];
    const char* why =
        e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || n == 0
            ? tl_cuda_absent_why(e != cudaErrorInsufficientDriver, driver, runtime, buf, sizeof buf)
            : cudaGetErrorString(e);
    return TL_ERRF(TL_ERR_NO_DEVICE, "NCCL group '%s' on cuda:%d: %s", name, device, why);
  }
  if (device < 0 || device >= n)
    return TL_ERRF(TL_ERR_NO_DEVICE,
                   "NCCL group '%s' on cuda:%d: this machine has %d CUDA device%s (one per rank "
                   "on a node: run at most %d ranks per node)",
                   name, device, n, n == 1 ? "" : "s", n);
  /* 2. the library, on first use */
  if (tl_group_nccl_check() != TL_OK)
    return TL_ERRF(TL_ERR_NCCL, "NCCL group '%s': %s", name, g_load_error);
  /* 3. its own communicator, then the NCCL one over it */
  MPI_Comm comm = MPI_COMM_NULL;
  TL_MPI_CHECK(MPI_Comm_dup(parent, &comm));
  struct nccl_ctx* c;
  TL_CHECK(join(comm, device, &c));
  return tl__group_create(&k_nccl_ops, c, c->rank, c->size, tl_cuda(device), name, out);
}
