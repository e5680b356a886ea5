// crossentropy.cu — fused softmax + cross-entropy, one block per row of
// logits; block reductions go through shared memory in a fixed tree order.
// A target outside [0, V) makes that row's loss NaN, so it cannot pass
// unnoticed (the CPU backend reports it as an error).
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
