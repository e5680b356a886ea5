// crossentropy.cu — fused softmax + cross-entropy, one block per row of
// logits; block reductions go through shared memory in a fixed tree order.
// A target outside [0, V) makes that row's loss NaN, so it cannot pass
// unnoticed (the CPU backend reports it as an error).
#include <float.h>

#include "kernels/cuda/cuda_impl.h"

#define THREADS 256

__device__ static float block_reduce(float x, float* shared, bool is_max) {
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = is_max ? tl__warp_max(x) : tl__warp_sum(x);
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  float y = lane < THREADS / 32 ? shared[lane] : (is_max ? -INFINITY : 0.0f);
  y = is_max ? tl__warp_max(y) : tl__warp_sum(y);
  __syncthreads();
  return y;
}

__global__ static void crossentropy_kernel(float* losses, float* dlogits, const float* logits,
                                           const int32_t* targets, const float* dlosses, int v,
                                           int vp) {
  __shared__ float shared[THREADS / 32];
  int64_t row = blockIdx.x;
  const float* x = logits + row * vp;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < v; j += THREADS) mx = fmaxf(mx, x[j]);
  mx = block_reduce(mx, shared, true);
  float s = 0.0f;
  for (int j = threadIdx.x; j < v; j += THREADS) s += expf(x[j] - mx);
  s = block_reduce(s, shared, false);
  int target = targets[row];
  bool valid = target >= 0 && target < v;
  if (threadIdx.x == 0) losses[row] = valid ? logf(s) + mx - x[target] : NAN;
  if (dlosses) {
    float inv = 1.0f / s, dl = dlosses[row];
    float* dx = dlogits + row * vp;
    for (int j = threadIdx.x; j < vp; j += THREADS)
      dx[j] = j < v ? (expf(x[j] - mx) * inv - (j == target ? 1.0f : 0.0f)) * dl : 0.0f;
  }
}

extern "C" tl_status tl__cuda_crossentropy_forward_backward(void* pctx, float* losses,
                                                            float* dlogits, const float* logits,
                                                            const int32_t* targets,
                                                            const float* dlosses, int n, int v,
                                                            int vp) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  if (n == 0) return TL_OK;
  crossentropy_kernel<<<n, THREADS, 0, ctx->stream>>>(losses, dlogits, logits, targets, dlosses, v,
                                                      vp);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

// ---- vocabulary-parallel: this rank's columns [v0, v0 + cols) -----------
// One block per row, like the fused kernel; the group combines the stats
// between phases (see ops.h).

__global__ static void xent_shard_kernel(float* losses, float* stats, const float* logits,
                                         const int32_t* targets, int n, int cols, int v0, int real,
                                         int v, int phase) {
  __shared__ float shared[THREADS / 32];
  int64_t row = blockIdx.x;
  const float* x = logits + row * cols;
  float *mx = stats, *sum = stats + n, *tgt = stats + 2 * (int64_t)n;
  if (phase == 0) {
    float m = -FLT_MAX;
    for (int j = threadIdx.x; j < real; j += THREADS) m = fmaxf(m, x[j]);
    m = block_reduce(m, shared, true);
    if (threadIdx.x == 0) mx[row] = m;
  } else if (phase == 1) {
    float s = 0.0f, m = mx[row];
    for (int j = threadIdx.x; j < real; j += THREADS) s += expf(x[j] - m);
    s = block_reduce(s, shared, false);
    if (threadIdx.x == 0) {
      int target = targets[row], local = target - v0;
      sum[row] = s;
      tgt[row] = target < 0 || target >= v ? NAN : local >= 0 && local < real ? x[local] : 0.0f;
    }
  } else if (threadIdx.x == 0) {
    losses[row] = logf(sum[row]) + mx[row] - tgt[row];
  }
}

__global__ static void xent_shard_backward_kernel(float* dlogits, const float* logits,
                                                  const int32_t* targets, const float* stats,
                                                  const float* dlosses, int n, int cols, int v0,
                                                  int real) {
  int64_t row = blockIdx.x;
  const float* x = logits + row * cols;
  float* dx = dlogits + row * cols;
  float m = stats[row], inv = 1.0f / stats[n + row], dl = dlosses[row];
  int local = targets[row] - v0;
  for (int j = threadIdx.x; j < cols; j += THREADS)
    dx[j] = j < real ? (expf(x[j] - m) * inv - (j == local ? 1.0f : 0.0f)) * dl : 0.0f;
}

static int shard_real(int cols, int v0, int v) {
  int real = v - v0;
  return real < 0 ? 0 : real > cols ? cols : real;
}

extern "C" tl_status tl__cuda_xent_shard_forward(void* pctx, float* losses, float* stats,
                                                 const float* logits, const int32_t* targets, int n,
                                                 int cols, int v0, int v, int phase) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  if (n == 0) return TL_OK;
  xent_shard_kernel<<<n, THREADS, 0, ctx->stream>>>(losses, stats, logits, targets, n, cols, v0,
                                                    shard_real(cols, v0, v), v, phase);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_xent_shard_backward(void* pctx, float* dlogits, const float* logits,
                                                  const int32_t* targets, const float* stats,
                                                  const float* dlosses, int n, int cols, int v0,
                                                  int v) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  if (n == 0) return TL_OK;
  xent_shard_backward_kernel<<<n, THREADS, 0, ctx->stream>>>(
      dlogits, logits, targets, stats, dlosses, n, cols, v0, shard_real(cols, v0, v));
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
