// matmul.cu — GEMM through cuBLAS. cuBLAS is column-major, so the row-major
// product out = op(a) op(b) is computed as out^T = op(b)^T op(a)^T, which
// is the same memory read column-major: swap the operands, keep the flags.
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/cuda_impl.h"

__global__ static void bias_rows_kernel(float* out, int ldo, const float* bias, int m, int n,
                                        int overwrite) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)m * n) return;
  float b = bias[i % n];
  float* o = out + (i / n) * ldo + i % n;
  *o = overwrite ? b : *o + b;
}

// One thread per column walks the rows in order: a fixed summation order.
// x's element (i, j), for the bias gradient's column sums (colsum.cuh)
struct matrix_at {
  const float* x;
  int cols;
  __device__ void operator()(int i, int j, float* v) const { v[0] = x[(int64_t)i * cols + j]; }
};

// The bias, written (or added) before the GEMM, which then accumulates onto
// it: *beta is the GEMM's factor on what out holds.
static tl_status bias_first(struct tl_cuda_ctx* ctx, float* out, int ldo, const float* bias, int m,
                            int n, bool accumulate, float* beta) {
  *beta = accumulate ? 1.0f : 0.0f;
  if (!bias) return TL_OK;
  bias_rows_kernel<<<tl__cuda_blocks((int64_t)m * n, 256), 256, 0, ctx->stream>>>(out, ldo, bias, m,
                                                                                  n, !accumulate);
  TL_CUDA_LAUNCHED();
  *beta = 1.0f;
  return TL_OK;
}

extern "C" tl_status tl__cuda_matmul_ld(void* pctx, float* out, int ldo, const float* a, int lda,
                                        const float* b, int ldb, const float* bias, int m, int n,
                                        int k, bool trans_a, bool trans_b, bool accumulate) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  float alpha = 1.0f, beta = 0.0f;
  TL_CHECK(bias_first(ctx, out, ldo, bias, m, n, accumulate, &beta));
  TL_CUBLAS_CHECK(ctx->blas_api->sgemm(ctx->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                       trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                                       a, lda, &beta, out, ldo));
  return TL_OK;
}

extern "C" tl_status tl__cuda_matmul(void* pctx, float* out, const float* a, const float* b,
                                     const float* bias, int m, int n, int k, bool trans_a,
                                     bool trans_b, bool accumulate) {
  return tl__cuda_matmul_ld(pctx, out, n, a, trans_a ? m : k, b, trans_b ? k : n, bias, m, n, k,
                            trans_a, trans_b, accumulate);
}

static tl_status colsum_add(void* pctx, float* out, const float* x, int rows, int cols) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  return tl__colsum<1>(ctx, tl_colsum_outs<1>{{out}}, matrix_at{x, cols}, rows, cols);
}

extern "C" tl_status tl__cuda_matmul_backward(void* ctx, float* da, float* db, float* dbias,
                                              const float* dout, const float* a, const float* b,
                                              int m, int n, int k, bool trans_a, bool trans_b) {
  return tl__matmul_backward_by_matmul(&tl_cuda_kernel_ops, ctx, da, db, dbias, dout, a, b, m, n, k,
                                       trans_a, trans_b, colsum_add);
}

// bf16 operands held in fp32 (kernels/ops.h's matmul_bf16): narrowed into
// the workspace (exact: they are bf16 numbers) and multiplied by
// cublasGemmEx in bf16 with fp32 accumulation and an fp32 result, on the
// tensor cores.
extern "C" tl_status tl__cuda_matmul_ld_bf16(void* pctx, float* out, int ldo, const float* a,
                                             int lda, const float* b, int ldb, const float* bias,
                                             int m, int n, int k, bool trans_a, bool trans_b,
                                             bool accumulate) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  /* b's image 128-byte aligned, as the tensor-core kernels want it */
  const size_t na = ((size_t)m * k + 63) / 64 * 64, nb = (size_t)k * n;
  void* ws = NULL;
  TL_CHECK(tl__cuda_workspace(ctx, sizeof(uint16_t) * (na + nb), &ws));
  uint16_t *a16 = (uint16_t*)ws, *b16 = a16 + na;
  /* the images dense: a stored (M,K) or (K,M), b (K,N) or (N,K) */
  TL_CHECK(tl__cuda_to_bf16_2d(pctx, a16, a, trans_a ? k : m, trans_a ? m : k, lda));
  TL_CHECK(tl__cuda_to_bf16_2d(pctx, b16, b, trans_b ? n : k, trans_b ? k : n, ldb));
  float alpha = 1.0f, beta = 0.0f;
  TL_CHECK(bias_first(ctx, out, ldo, bias, m, n, accumulate, &beta));
  TL_CUBLAS_CHECK(ctx->blas_api->gemm_ex(
      ctx->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
      &alpha, b16, CUDA_R_16BF, trans_b ? k : n, a16, CUDA_R_16BF, trans_a ? m : k, &beta, out,
      CUDA_R_32F, ldo, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return TL_OK;
}

extern "C" tl_status tl__cuda_matmul_bf16(void* pctx, float* out, const float* a, const float* b,
                                          const float* bias, int m, int n, int k, bool trans_a,
                                          bool trans_b, bool accumulate) {
  return tl__cuda_matmul_ld_bf16(pctx, out, n, a, trans_a ? m : k, b, trans_b ? k : n, bias, m, n,
                                 k, trans_a, trans_b, accumulate);
}

// The backward's three products through the bf16 GEMM: dout is a bf16
// gradient there too (the graph calls this only when every float input is).
static struct tl_kernel_ops make_bf16_ops(void) {
  struct tl_kernel_ops ops = tl_cuda_kernel_ops;
  ops.matmul = tl__cuda_matmul_bf16;
  return ops;
}

static const struct tl_kernel_ops* bf16_ops(void) {
  static const struct tl_kernel_ops ops = make_bf16_ops(); /* C++: made once, thread-safely */
  return &ops;
}

extern "C" tl_status tl__cuda_matmul_backward_bf16(void* ctx, float* da, float* db, float* dbias,
                                                   const float* dout, const float* a,
                                                   const float* b, int m, int n, int k,
                                                   bool trans_a, bool trans_b) {
  return tl__matmul_backward_by_matmul(bf16_ops(), ctx, da, db, dbias, dout, a, b, m, n, k, trans_a,
                                       trans_b, colsum_add);
}
