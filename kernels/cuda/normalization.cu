// normalization.cu — layernorm. One warp per row; the
// layernorm parameter gradients use one thread per column walking the rows
// in order, so results do not depend on scheduling.
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/cuda_impl.h"

#define ROWS_PER_BLOCK 8

__global__ static void layernorm_forward_kernel(float* out, float* mean, float* rstd,
                                                const float* inp, const float* w, const float* b,
                                                int n, int c) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= n) return;
  int lane = threadIdx.x;
  const float* x = inp + (int64_t)row * c;
  float s = 0.0f;
  for (int j = lane; j < c; j += 32) s += x[j];
  float m = tl__warp_sum(s) / c;
  float v = 0.0f;
  for (int j = lane; j < c; j += 32) v += (x[j] - m) * (x[j] - m);
  /* 1 / sqrt, each correctly rounded, as the CPU computes it (rsqrtf is
   * approximate to 2 ulp) */
  float r = 1.0f / sqrtf(tl__warp_sum(v) / c + TL_LAYERNORM_EPS);
  float* o = out + (int64_t)row * c;
  for (int j = lane; j < c; j += 32) o[j] = (x[j] - m) * r * w[j] + b[j];
  if (lane == 0) mean[row] = m, rstd[row] = r;
}

__global__ static void layernorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                             const float* w, const float* mean, const float* rstd,
                                             int n, int c) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= n) return;
  int lane = threadIdx.x;
  const float* x = inp + (int64_t)row * c;
  const float* dy = dout + (int64_t)row * c;
  float m = mean[row], r = rstd[row];
  float a = 0.0f, bsum = 0.0f;
  for (int j = lane; j < c; j += 32) {
    float dn = w[j] * dy[j];
    a += dn;
    bsum += dn * (x[j] - m) * r;
  }
  a = tl__warp_sum(a) / c;
  bsum = tl__warp_sum(bsum) / c;
  float* dx = dinp + (int64_t)row * c;
  for (int j = lane; j < c; j += 32) dx[j] += (w[j] * dy[j] - a - (x[j] - m) * r * bsum) * r;
}

// a row's terms of the weight's and the bias's gradients (colsum.cuh):
// dout x-hat and dout
struct layernorm_dparams {
  const float *dout, *inp, *mean, *rstd;
  int c;
  __device__ void operator()(int i, int j, float* v) const {
    const float dy = dout[(int64_t)i * c + j];
    v[0] = (inp[(int64_t)i * c + j] - mean[i]) * rstd[i] * dy;
    v[1] = dy;
  }
};

extern "C" tl_status tl__cuda_layernorm_forward(void* pctx, float* out, float* mean, float* rstd,
                                                const float* inp, const float* weight,
                                                const float* bias, int n, int c) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  dim3 block(32, ROWS_PER_BLOCK);
  layernorm_forward_kernel<<<tl__cuda_blocks(n, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
      out, mean, rstd, inp, weight, bias, n, c);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_layernorm_backward(void* pctx, float* dinp, float* dweight,
                                                 float* dbias, const float* dout, const float* inp,
                                                 const float* weight, const float* mean,
                                                 const float* rstd, int n, int c) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  if (dinp) {
    dim3 block(32, ROWS_PER_BLOCK);
    layernorm_dinp_kernel<<<tl__cuda_blocks(n, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
        dinp, dout, inp, weight, mean, rstd, n, c);
    TL_CUDA_LAUNCHED();
  }
  if (dweight || dbias) {
    TL_CHECK(tl__colsum<2>(ctx, tl_colsum_outs<2>{{dweight, dbias}},
                           layernorm_dparams{dout, inp, mean, rstd, c}, n, c));
  }
  return TL_OK;
}
