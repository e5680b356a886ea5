// backend.cu — the CUDA kernel table, the device context (stream, cuBLAS
// handle, workspace) and CUDA memory for core's counted allocator.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "kernels/cuda/cuda_impl.h"

static tl_status cuda_alloc(int index, size_t bytes, void** out) {
  TL_CUDA_CHECK(cudaSetDevice(index));
  cudaError_t e = cudaMalloc(out, bytes);
  if (e != cudaSuccess) {
    *out = NULL;
    return TL_ERRF(e == cudaErrorMemoryAllocation ? TL_ERR_NOMEM : TL_ERR_CUDA,
                   "cudaMalloc of %zu bytes on cuda:%d failed: %s", bytes, index,
                   cudaGetErrorString(e));
  }
  return TL_OK;
}

static void cuda_free(int index, void* ptr) {
  if (cudaSetDevice(index) == cudaSuccess) cudaFree(ptr);
}

static tl_status cuda_to_host(int index, void* dst, const void* src, size_t bytes) {
  TL_CUDA_CHECK(cudaSetDevice(index));
  TL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  return TL_OK;
}

/* Copies and zeroing run on the legacy default stream, ordered after the
 * compute stream's earlier work (a blocking stream) and before its later
 * work, and return before they are done: a device-to-device cudaMemcpy at
 * once, one from the host once the source is staged (below), cudaMemset
 * at once. NCCL's stream, which is ordered with neither, waits
 * for them on the GPU: each group operation first waits for an event
 * recorded on the legacy stream (core/group_nccl.c). */

/* Copies from the host of up to STAGE_BYTES (a micro-batch's tokens, a
 * scalar) go through a ring of pinned buffers per device: the source is
 * copied into a slot and the slot DMA'd asynchronously on the legacy
 * stream. From pageable memory cudaMemcpy waits for the device's queued
 * work before it starts, which stopped the host once a micro-batch; a slot
 * is reused once the event recorded after its copy has passed. Larger
 * copies (checkpoints) go from pageable memory as before. The slots live
 * as long as the process. */
#define STAGE_SLOTS 8
#define STAGE_BYTES ((size_t)1 << 20)
#define MAX_DEVICES 64

static struct stage_ring {
  void* slot[STAGE_SLOTS];
  cudaEvent_t done[STAGE_SLOTS];
  int next;
} g_stage[MAX_DEVICES];

static tl_status stage_slot(int index, void** slot) {
  struct stage_ring* r = &g_stage[index];
  const int k = r->next;
  if (!r->slot[k]) {
    TL_CUDA_CHECK(cudaHostAlloc(&r->slot[k], STAGE_BYTES, cudaHostAllocDefault));
    TL_CUDA_CHECK(cudaEventCreateWithFlags(&r->done[k], cudaEventDisableTiming));
  } else {
    TL_CUDA_CHECK(cudaEventSynchronize(r->done[k])); /* its last copy has left */
  }
  *slot = r->slot[k];
  return TL_OK;
}

static tl_status cuda_from_host(int index, void* dst, const void* src, size_t bytes) {
  TL_CUDA_CHECK(cudaSetDevice(index));
  if (bytes > STAGE_BYTES || index < 0 || index >= MAX_DEVICES) {
    TL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return TL_OK;
  }
  struct stage_ring* r = &g_stage[index];
  void* slot = NULL;
  TL_CHECK(stage_slot(index, &slot));
  memcpy(slot, src, bytes);
  TL_CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy));
  TL_CUDA_CHECK(cudaEventRecord(r->done[r->next], cudaStreamLegacy));
  r->next = (r->next + 1) % STAGE_SLOTS;
  return TL_OK;
}

static tl_status cuda_on_device(int index, void* dst, const void* src, size_t bytes) {
  TL_CUDA_CHECK(cudaSetDevice(index));
  TL_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  return TL_OK;
}

static tl_status cuda_zero(int index, void* dst, size_t bytes) {
  TL_CUDA_CHECK(cudaSetDevice(index));
  TL_CUDA_CHECK(cudaMemset(dst, 0, bytes));
  return TL_OK;
}

static const struct tl_memory_ops k_cuda_memory = {
    cuda_alloc, cuda_free, cuda_to_host, cuda_from_host, cuda_on_device, cuda_zero,
};

/* tl_cuda_absent_why's words, with the driver's and runtime's versions,
 * in a buffer of this thread's that lives until its next call. */
static const char* absent_why(bool no_device) {
  static thread_local char buf[256];
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return tl_cuda_absent_why(no_device, driver, runtime, buf, sizeof buf);
}

extern "C" int tl__cuda_device_count(const char** why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* Without a driver the runtime says "driver version is insufficient",
     * which misleads on a machine that simply has no GPU; an old driver is
     * named with its version and the runtime's. */
    if (why)
      *why = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                 ? absent_why(e == cudaErrorNoDevice)
                 : cudaGetErrorString(e);
    cudaGetLastError(); /* clear the error so later calls start clean */
    return 0;
  }
  if (n == 0 && why) *why = absent_why(true);
  return n;
}

extern "C" tl_status tl__cuda_device_info(int index, char* name, size_t name_size,
                                          double* memory_bytes, double* free_bytes) {
  if (name_size) name[0] = 0;
  *memory_bytes = *free_bytes = 0;
  const char* why = NULL;
  int n = tl__cuda_device_count(&why);
  if (n == 0) return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d is not available: %s", index, why);
  if (index < 0 || index >= n)
    return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d does not exist: this machine has %d CUDA device%s",
                   index, n, n == 1 ? "" : "s");
  cudaDeviceProp prop;
  TL_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  if (name_size) snprintf(name, name_size, "%s", prop.name);
  int current = 0;
  TL_CUDA_CHECK(cudaGetDevice(&current));
  size_t free_now = 0, total = 0;
  TL_CUDA_CHECK(cudaSetDevice(index));
  cudaError_t e = cudaMemGetInfo(&free_now, &total);
  cudaSetDevice(current);
  TL_CUDA_CHECK(e);
  *memory_bytes = (double)total;
  *free_bytes = (double)free_now;
  return TL_OK;
}

extern "C" tl_status tl__cuda_workspace(struct tl_cuda_ctx* ctx, size_t bytes, void** out) {
  if (!ctx->workspace || ctx->workspace->bytes < bytes) {
    TL_CUDA_CHECK(cudaStreamSynchronize(ctx->stream)); /* the old one may be in use */
    tl_buffer_destroy(ctx->workspace);
    ctx->workspace = NULL;
    TL_CHECK(tl_buffer_create(tl_cuda(ctx->device), bytes, &ctx->workspace));
  }
  *out = ctx->workspace->data;
  return TL_OK;
}

static tl_status cuda_synchronize(void* ctx) {
  TL_CUDA_CHECK(cudaStreamSynchronize(TL_CUDA_CTX(ctx)->stream));
  return TL_OK;
}

extern "C" tl_status tl_cuda_backend_init(int index, void** out) {
  *out = NULL;
  const char* why = NULL;
  int n = tl__cuda_device_count(&why);
  if (n == 0) return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d is not available: %s", index, why);
  if (index < 0 || index >= n || index >= TL_MAX_CUDA_DEVICES)
    return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d does not exist: this machine has %d CUDA device%s",
                   index, n, n == 1 ? "" : "s");
  tl_memory_register(TL_DEVICE_CUDA, &k_cuda_memory);
  struct tl_cuda_ctx* ctx = (struct tl_cuda_ctx*)calloc(1, sizeof *ctx);
  if (!ctx) return TL_ERRF(TL_ERR_NOMEM, "out of host memory for a CUDA context");
  ctx->device = index;
  cudaError_t e = cudaSetDevice(index);
  if (e == cudaSuccess) e = cudaStreamCreate(&ctx->stream);
  if (e != cudaSuccess) {
    free(ctx);
    return TL_ERRF(TL_ERR_CUDA, "cannot start cuda:%d: %s", index, cudaGetErrorString(e));
  }
  if (tl__cuda_blas_load(&ctx->blas_api) != TL_OK) {
    cudaStreamDestroy(ctx->stream);
    free(ctx);
    return TL_ERR_CUBLAS; /* the loader's message stands */
  }
  const struct tl_cublas_api* api = ctx->blas_api;
  cublasStatus_t b = api->create(&ctx->blas);
  if (b == CUBLAS_STATUS_SUCCESS) b = api->set_stream(ctx->blas, ctx->stream);
  /* Plain fp32 GEMM (no TF32): a parallel run must equal the single-device run. */
  if (b == CUBLAS_STATUS_SUCCESS) b = api->set_math_mode(ctx->blas, CUBLAS_PEDANTIC_MATH);
  if (b != CUBLAS_STATUS_SUCCESS) {
    if (ctx->blas) api->destroy(ctx->blas);
    cudaStreamDestroy(ctx->stream);
    free(ctx);
    return TL_ERRF(TL_ERR_CUBLAS, "cannot create a cuBLAS handle on cuda:%d: %s", index,
                   api->status_string(b));
  }
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess)
    TL_LOG_DEBUG("cuda:%d is %s (sm_%d%d, %.1f GiB)", index, prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / (1 << 30));
  *out = ctx;
  return TL_OK;
}

extern "C" void tl_cuda_backend_free(void* p) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(p);
  if (!ctx) return;
  cudaSetDevice(ctx->device);
  cudaStreamSynchronize(ctx->stream);
  tl_buffer_destroy(ctx->workspace);
  if (ctx->blas) ctx->blas_api->destroy(ctx->blas);
  cudaStreamDestroy(ctx->stream);
  free(ctx);
}

extern "C" const struct tl_kernel_ops tl_cuda_kernel_ops = {
    "cuda",
    cuda_synchronize,
    tl__cuda_matmul,
    tl__cuda_matmul_ld,
    tl__cuda_matmul_backward,
    tl__cuda_layernorm_forward,
    tl__cuda_layernorm_backward,
    tl__cuda_gelu_forward,
    tl__cuda_gelu_backward,
    tl__cuda_attention_forward,
    tl__cuda_attention_backward,
    tl__cuda_embedding_forward,
    tl__cuda_embedding_backward,
    tl__cuda_crossentropy_forward_backward,
    tl__cuda_xent_shard_forward,
    tl__cuda_xent_shard_backward,
    tl__cuda_add_forward,
    tl__cuda_add_backward,
    tl__cuda_scale_forward,
    tl__cuda_scale_backward,
    tl__cuda_sumsq,
    tl__cuda_adamw,
    NULL, /* fixed_add: the deterministic mode is CPU-only */
    NULL, /* fixed_to_float */
    NULL, /* sumsq_fixed */
    tl__cuda_to_bf16,
    tl__cuda_from_bf16,
    tl__cuda_round_bf16,
    tl__cuda_matmul_bf16,
    tl__cuda_matmul_backward_bf16,
    tl__cuda_matmul_ld_bf16,
    tl__cuda_rmsnorm_forward,
    tl__cuda_rmsnorm_backward,
    tl__cuda_rope_forward,
    tl__cuda_rope_backward,
    tl__cuda_swiglu_forward,
    tl__cuda_swiglu_backward,
    tl__cuda_copy_2d,
};
