// attention.cu — causal multi-head attention with the probabilities kept.
// Forward: one warp per (b, h, t) query row. Backward in three race-free
// passes instead of atomics, so gradients are bit-reproducible:
//   1. per query row:  dpre[t, t2] = att * (dout_t . v_t2 - sum) * scale
//   2. per query row:  dq_t  += sum_t2 dpre[t, t2] k_t2
//   3. per key row:    dk_t2 += sum_t dpre[t, t2] q_t;  dv_t2 += sum_t att[t, t2] dout_t
#include "kernels/cuda/cuda_impl.h"

#define ROWS_PER_BLOCK 8

// qkv (B,T,3C) offset of row (b, t), part p (0 q, 1 k, 2 v), head h.
__device__ __forceinline__ int64_t qkv_at(int b, int t, int p, int h, int T, int C, int hs) {
  return ((int64_t)b * T + t) * 3 * C + (int64_t)p * C + (int64_t)h * hs;
}

__global__ static void attention_forward_kernel(float* out, float* att, const float* qkv, int B,
                                                int T, int C, int NH, float scale) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;  // (b, h, t) flattened
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  float* a = att + (int64_t)row * T;
  const float* q = qkv + qkv_at(b, t, 0, h, T, C, hs);
  float mx = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const float* k = qkv + qkv_at(b, t2, 1, h, T, C, hs);
    float s = 0.0f;
    for (int i = 0; i < hs; i++) s += q[i] * k[i];
    a[t2] = s * scale;
    mx = fmaxf(mx, a[t2]);
  }
  mx = tl__warp_max(mx);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) sum += (a[t2] = expf(a[t2] - mx));
  float inv = 1.0f / tl__warp_sum(sum);
  for (int t2 = lane; t2 < T; t2 += 32) a[t2] = t2 <= t ? a[t2] * inv : 0.0f;
  __syncwarp();
  float* o = out + ((int64_t)b * T + t) * C + (int64_t)h * hs;
  for (int i = lane; i < hs; i += 32) {
    float s = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) s += a[t2] * qkv[qkv_at(b, t2, 2, h, T, C, hs) + i];
    o[i] = s;
  }
}

__global__ static void attention_dpre_kernel(float* dpre, const float* dout, const float* qkv,
                                             const float* att, int B, int T, int C, int NH,
                                             float scale) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const float* a = att + (int64_t)row * T;
  float* d = dpre + (int64_t)row * T;
  const float* dy = dout + ((int64_t)b * T + t) * C + (int64_t)h * hs;
  float dot = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    const float* v = qkv + qkv_at(b, t2, 2, h, T, C, hs);
    float s = 0.0f;
    for (int i = 0; i < hs; i++) s += dy[i] * v[i];
    d[t2] = s;  // d probabilities, for now
    dot += a[t2] * s;
  }
  dot = tl__warp_sum(dot);
  for (int t2 = lane; t2 < T; t2 += 32) d[t2] = t2 <= t ? a[t2] * (d[t2] - dot) * scale : 0.0f;
}

__global__ static void attention_dq_kernel(float* dqkv, const float* dpre, const float* qkv, int B,
                                           int T, int C, int NH) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const float* d = dpre + (int64_t)row * T;
  float* dq = dqkv + qkv_at(b, t, 0, h, T, C, hs);
  for (int i = lane; i < hs; i += 32) {
    float s = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) s += d[t2] * qkv[qkv_at(b, t2, 1, h, T, C, hs) + i];
    dq[i] += s;
  }
}

__global__ static void attention_dkv_kernel(float* dqkv, const float* dpre, const float* att,
                                            const float* dout, const float* qkv, int B, int T,
                                            int C, int NH) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;  // (b, h, t2): a key/value row
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t2 = row % T, h = (row / T) % NH, b = row / (T * NH);
  int64_t base = ((int64_t)b * NH + h) * T;  // first query row of (b, h)
  float* dk = dqkv + qkv_at(b, t2, 1, h, T, C, hs);
  float* dv = dqkv + qkv_at(b, t2, 2, h, T, C, hs);
  for (int i = lane; i < hs; i += 32) {
    float sk = 0.0f, sv = 0.0f;
    for (int t = t2; t < T; t++) {
      sk += dpre[(base + t) * T + t2] * qkv[qkv_at(b, t, 0, h, T, C, hs) + i];
      sv += att[(base + t) * T + t2] * dout[((int64_t)b * T + t) * C + (int64_t)h * hs + i];
    }
    dk[i] += sk;
    dv[i] += sv;
  }
}

extern "C" tl_status tl__cuda_attention_forward(void* pctx, float* out, float* att,
                                                const float* qkv, int b, int t, int c, int nh) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  int rows = b * nh * t;
  dim3 block(32, ROWS_PER_BLOCK);
  attention_forward_kernel<<<tl__cuda_blocks(rows, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
      out, att, qkv, b, t, c, nh, 1.0f / sqrtf((float)(c / nh)));
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_attention_backward(void* pctx, float* dqkv, const float* dout,
                                                 const float* qkv, const float* att, int b, int t,
                                                 int c, int nh) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  int rows = b * nh * t;
  void* scratch = NULL;
  TL_CHECK(tl__cuda_workspace(ctx, sizeof(float) * (size_t)rows * (size_t)t, &scratch));
  float* dpre = (float*)scratch;
  dim3 block(32, ROWS_PER_BLOCK);
  unsigned grid = tl__cuda_blocks(rows, ROWS_PER_BLOCK);
  attention_dpre_kernel<<<grid, block, 0, ctx->stream>>>(dpre, dout, qkv, att, b, t, c, nh,
                                                         1.0f / sqrtf((float)(c / nh)));
  TL_CUDA_LAUNCHED();
  attention_dq_kernel<<<grid, block, 0, ctx->stream>>>(dqkv, dpre, qkv, b, t, c, nh);
  TL_CUDA_LAUNCHED();
  attention_dkv_kernel<<<grid, block, 0, ctx->stream>>>(dqkv, dpre, att, dout, qkv, b, t, c, nh);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
