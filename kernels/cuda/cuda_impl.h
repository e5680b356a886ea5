/* cuda_impl.h — what the CUDA backend's files share: the device context,
 * the error translation at the CUDA/cuBLAS boundary, and the kernels'
 * declarations (signatures of struct tl_kernel_ops, see kernels/ops.h). */
#ifndef TL_KERNELS_CUDA_CUDA_IMPL_H
#define TL_KERNELS_CUDA_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/alloc.h"
#include "kernels/cuda/cuda.h"

/* cuBLAS's entry points, from the library loaded at the first backend's
 * creation (blas.cu): trellis does not link it, so that a process that uses
 * no GPU never maps it. */
struct tl_cublas_api {
  bool loaded;
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  /* the C entry point (cublas_api.h also declares C++ overloads of it) */
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t);
  decltype(&cublasGetStatusString) status_string;
};
/* Loads cuBLAS once per process (thread-safe); the table, or
 * TL_ERR_CUBLAS naming the library and the loader's reason. */
extern "C" tl_status tl__cuda_blas_load(const struct tl_cublas_api** out);
extern "C" const char* tl__cuda_blas_status(cublasStatus_t s);

struct tl_cuda_ctx {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  const struct tl_cublas_api* blas_api; /* loaded with the first context */
  tl_buffer* workspace;                 /* grown on demand, counted by core's allocator */
};

#define TL_CUDA_CHECK(expr)                                                               \
  do {                                                                                    \
    cudaError_t tl__e = (expr);                                                           \
    if (tl__e != cudaSuccess)                                                             \
      return TL_ERRF(TL_ERR_CUDA, "%s failed: %s (%s)", #expr, cudaGetErrorString(tl__e), \
                     cudaGetErrorName(tl__e));                                            \
  } while (0)

#define TL_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                    \
    cublasStatus_t tl__b = (expr);                                                        \
    if (tl__b != CUBLAS_STATUS_SUCCESS)                                                   \
      return TL_ERRF(TL_ERR_CUBLAS, "%s failed: %s", #expr, tl__cuda_blas_status(tl__b)); \
  } while (0)

/* After a kernel launch: reports a bad launch configuration at once. */
#define TL_CUDA_LAUNCHED() TL_CUDA_CHECK(cudaGetLastError())

#define TL_CUDA_CTX(p) ((struct tl_cuda_ctx*)(p))

/* Blocks of `threads` for n items: at least one, since a launch of no
 * blocks is an error on CUDA (the CPU is fine with no work) — every kernel
 * launched so returns at once for an index past its items. */
static inline unsigned tl__cuda_blocks(int64_t n, int threads) {
  int64_t g = (n + threads - 1) / threads;
  return (unsigned)(g > 0 ? g : 1);
}

/* A scratch area of at least `bytes` in the context's workspace. */
extern "C" tl_status tl__cuda_workspace(struct tl_cuda_ctx* ctx, size_t bytes, void** out);

extern "C" {
tl_status tl__cuda_matmul(void* ctx, float* out, const float* a, const float* b, const float* bias,
                          int m, int n, int k, bool trans_a, bool trans_b, bool accumulate);
tl_status tl__cuda_matmul_ld(void* ctx, float* out, int ldo, const float* a, int lda,
                             const float* b, int ldb, const float* bias, int m, int n, int k,
                             bool trans_a, bool trans_b, bool accumulate);
tl_status tl__cuda_matmul_backward(void* ctx, float* da, float* db, float* dbias, const float* dout,
                                   const float* a, const float* b, int m, int n, int k,
                                   bool trans_a, bool trans_b);
tl_status tl__cuda_layernorm_forward(void* ctx, float* out, float* mean, float* rstd,
                                     const float* inp, const float* weight, const float* bias,
                                     int n, int c);
tl_status tl__cuda_layernorm_backward(void* ctx, float* dinp, float* dweight, float* dbias,
                                      const float* dout, const float* inp, const float* weight,
                                      const float* mean, const float* rstd, int n, int c);
tl_status tl__cuda_gelu_forward(void* ctx, float* out, const float* inp, int64_t n);
tl_status tl__cuda_gelu_backward(void* ctx, float* dinp, const float* inp, const float* dout,
                                 int64_t n);
tl_status tl__cuda_attention_forward(void* ctx, float* out, float* lse, const float* q,
                                     const float* k, const float* v,
                                     const struct tl_attention_shape* s);
tl_status tl__cuda_attention_backward(void* ctx, float* dq, float* dk, float* dv, const float* dout,
                                      const float* q, const float* k, const float* v,
                                      const float* out, const float* lse,
                                      const struct tl_attention_shape* s);
tl_status tl__cuda_embedding_forward(void* ctx, float* out, const int32_t* tokens, const float* wte,
                                     const float* wpe, int b, int t, int c, int row_begin, int rows,
                                     bool accumulate);
tl_status tl__cuda_embedding_backward(void* ctx, float* dwte, float* dwpe, const float* dout,
                                      const int32_t* tokens, int b, int t, int c, int row_begin,
                                      int rows);
tl_status tl__cuda_crossentropy_forward_backward(void* ctx, float* losses, float* dlogits,
                                                 const float* logits, const int32_t* targets,
                                                 const float* dlosses, int n, int v, int vp);
tl_status tl__cuda_xent_shard_forward(void* ctx, float* losses, float* stats, const float* logits,
                                      const int32_t* targets, int n, int cols, int v0, int v,
                                      int phase);
tl_status tl__cuda_xent_shard_backward(void* ctx, float* dlogits, const float* logits,
                                       const int32_t* targets, const float* stats,
                                       const float* dlosses, int n, int cols, int v0, int v);
tl_status tl__cuda_copy_2d(void* ctx, float* dst, int64_t ldd, const float* src, int64_t lds,
                           int64_t rows, int64_t cols, bool accumulate);
tl_status tl__cuda_add_forward(void* ctx, float* out, const float* a, const float* b, int64_t n);
tl_status tl__cuda_add_backward(void* ctx, float* da, float* db, const float* dout, int64_t n);
tl_status tl__cuda_scale_forward(void* ctx, float* out, const float* inp, float alpha, int64_t n);
tl_status tl__cuda_scale_backward(void* ctx, float* dinp, const float* dout, float alpha,
                                  int64_t n);
tl_status tl__cuda_sumsq(void* ctx, float* out, const float* inp, int64_t n);
tl_status tl__cuda_to_bf16(void* ctx, uint16_t* out, const float* x, int64_t n);
tl_status tl__cuda_from_bf16(void* ctx, float* out, const uint16_t* x, int64_t n);
tl_status tl__cuda_round_bf16(void* ctx, float* out, const float* x, int64_t n);
/* rows of cols floats, ld apart, narrowed into a dense bf16 image */
tl_status tl__cuda_to_bf16_2d(void* ctx, uint16_t* out, const float* x, int64_t rows, int cols,
                              int ld);
tl_status tl__cuda_matmul_ld_bf16(void* ctx, float* out, int ldo, const float* a, int lda,
                                  const float* b, int ldb, const float* bias, int m, int n, int k,
                                  bool trans_a, bool trans_b, bool accumulate);
tl_status tl__cuda_matmul_bf16(void* ctx, float* out, const float* a, const float* b,
                               const float* bias, int m, int n, int k, bool trans_a, bool trans_b,
                               bool accumulate);
tl_status tl__cuda_rmsnorm_forward(void* ctx, float* out, float* rstd, const float* inp,
                                   const float* weight, int n, int c, float eps);
tl_status tl__cuda_rmsnorm_backward(void* ctx, float* dinp, float* dweight, const float* dout,
                                    const float* inp, const float* weight, const float* rstd, int n,
                                    int c);
tl_status tl__cuda_rope_forward(void* ctx, float* out, const float* inp, const struct tl_rope* r,
                                int b, int t, int heads);
tl_status tl__cuda_rope_backward(void* ctx, float* dinp, const float* dout, const struct tl_rope* r,
                                 int b, int t, int heads);
tl_status tl__cuda_swiglu_forward(void* ctx, float* out, const float* gate, const float* up,
                                  int64_t n);
tl_status tl__cuda_swiglu_backward(void* ctx, float* dgate, float* dup, const float* dout,
                                   const float* gate, const float* up, int64_t n);
tl_status tl__cuda_matmul_backward_bf16(void* ctx, float* da, float* db, float* dbias,
                                        const float* dout, const float* a, const float* b, int m,
                                        int n, int k, bool trans_a, bool trans_b);
tl_status tl__cuda_adamw(void* ctx, float* params, const float* grads, float grad_scale, float* m,
                         float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int step);
}

/* Warp-wide sums and maxima (all 32 lanes get the result). */
__device__ __forceinline__ float tl__warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float tl__warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

#endif
