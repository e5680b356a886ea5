// attention.cu — causal multi-head attention without the T x T matrix
// (flash attention's algorithm; kernels/cpu/attention.c is the same in C).
// The fallback where no fused kernel serves a shape: correct, race-free and
// bit-reproducible (no atomics), not fast.
//
// Forward: one warp per (b, h, t) query row. Pass 1: each lane keeps an
// online softmax (running max and sum) over the keys it visits; the warp
// combines them into the row's log-sum-exp. Pass 2: keys in chunks of 32,
// each lane one key's probability e^(s - lse) into shared memory, then the
// lanes, one output channel each, sum p v over the chunk.
// Backward, per (b, h):
//   0. per query row:  D_t = dout_t . out_t
//   1. per query row:  dq_t  += scale * sum_t2 p (dout_t . v_t2 - D_t) k_t2
//   2. per key row:    dk_t2 += scale * sum_t  p (dout_t . v_t2 - D_t) q_t
//                      dv_t2 += sum_t p dout_t
// where p = e^(scale q_t . k_t2 - lse_t) is computed again where needed.
#include "kernels/cuda/cuda_impl.h"

#define ROWS_PER_BLOCK 8

// qkv (B,T,3C) offset of row (b, t), part p (0 q, 1 k, 2 v), head h.
__device__ __forceinline__ int64_t qkv_at(int b, int t, int p, int h, int T, int C, int hs) {
  return ((int64_t)b * T + t) * 3 * C + (int64_t)p * C + (int64_t)h * hs;
}

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

__global__ static void attention_forward_kernel(float* out, float* lse, const float* qkv, int B,
                                                int T, int C, int NH, float scale) {
  __shared__ float probs[ROWS_PER_BLOCK][32];
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;  // (b, h, t) flattened
  if (row >= B * NH * T) return;                        // the whole warp leaves together
  int lane = threadIdx.x, hs = C / NH;
  int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const float* q = qkv + qkv_at(b, t, 0, h, T, C, hs);
  // 1. each lane's running max and sum over its keys, then the warp's
  float m = -INFINITY, l = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += 32) {
    float s = scale * dot(q, qkv + qkv_at(b, t2, 1, h, T, C, hs), hs);
    float mn = fmaxf(m, s);
    l = l * expf(m - mn) + expf(s - mn);
    m = mn;
  }
  float mx = tl__warp_max(m);
  float sum = tl__warp_sum(m == -INFINITY ? 0.0f : l * expf(m - mx));
  float row_lse = mx + logf(sum);
  if (lane == 0) lse[row] = row_lse;
  // 2. out = sum_t2 p v, 32 keys at a time
  float* o = out + ((int64_t)b * T + t) * C + (int64_t)h * hs;
  float* p = probs[threadIdx.y];
  for (int i0 = 0; i0 < hs; i0 += 32) {
    int i = i0 + lane;
    float acc = 0.0f;
    for (int c0 = 0; c0 <= t; c0 += 32) {
      int t2 = c0 + lane;
      __syncwarp();
      p[lane] = t2 <= t ? expf(scale * dot(q, qkv + qkv_at(b, t2, 1, h, T, C, hs), hs) - row_lse)
                        : 0.0f;
      __syncwarp();
      if (i < hs)
        for (int j = 0; j < 32 && c0 + j <= t; j++)
          acc += p[j] * qkv[qkv_at(b, c0 + j, 2, h, T, C, hs) + i];
    }
    if (i < hs) o[i] = acc;
  }
}

// 0. D per query row, into the workspace
__global__ static void attention_rowdot_kernel(float* d, const float* dout, const float* out,
                                               int B, int T, int C, int NH) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  int64_t at = ((int64_t)b * T + t) * C + (int64_t)h * hs;
  float s = 0.0f;
  for (int i = lane; i < hs; i += 32) s += dout[at + i] * out[at + i];
  s = tl__warp_sum(s);
  if (lane == 0) d[row] = s;
}

// 1. dq per query row
__global__ static void attention_dq_kernel(float* dqkv, const float* dout, const float* qkv,
                                           const float* lse, const float* d, int B, int T, int C,
                                           int NH, float scale) {
  __shared__ float grads[ROWS_PER_BLOCK][32];
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t = row % T, h = (row / T) % NH, b = row / (T * NH);
  const float* q = qkv + qkv_at(b, t, 0, h, T, C, hs);
  const float* dy = dout + ((int64_t)b * T + t) * C + (int64_t)h * hs;
  float* dq = dqkv + qkv_at(b, t, 0, h, T, C, hs);
  float* g = grads[threadIdx.y];
  for (int i0 = 0; i0 < hs; i0 += 32) {
    int i = i0 + lane;
    float acc = 0.0f;
    for (int c0 = 0; c0 <= t; c0 += 32) {
      int t2 = c0 + lane;
      __syncwarp();
      float ds = 0.0f;
      if (t2 <= t) {
        float p = expf(scale * dot(q, qkv + qkv_at(b, t2, 1, h, T, C, hs), hs) - lse[row]);
        ds = p * (dot(dy, qkv + qkv_at(b, t2, 2, h, T, C, hs), hs) - d[row]) * scale;
      }
      g[lane] = ds;
      __syncwarp();
      if (i < hs)
        for (int j = 0; j < 32 && c0 + j <= t; j++)
          acc += g[j] * qkv[qkv_at(b, c0 + j, 1, h, T, C, hs) + i];
    }
    if (i < hs) dq[i] += acc;
  }
}

// 2. dk and dv per key row
__global__ static void attention_dkv_kernel(float* dqkv, const float* dout, const float* qkv,
                                            const float* lse, const float* d, int B, int T, int C,
                                            int NH, float scale) {
  __shared__ float probs[ROWS_PER_BLOCK][32], grads[ROWS_PER_BLOCK][32];
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;  // (b, h, t2): a key/value row
  if (row >= B * NH * T) return;
  int lane = threadIdx.x, hs = C / NH;
  int t2 = row % T, h = (row / T) % NH, b = row / (T * NH);
  int64_t base = ((int64_t)b * NH + h) * T;  // lse and D of (b, h)'s first query row
  const float* k = qkv + qkv_at(b, t2, 1, h, T, C, hs);
  const float* v = qkv + qkv_at(b, t2, 2, h, T, C, hs);
  float* dk = dqkv + qkv_at(b, t2, 1, h, T, C, hs);
  float* dv = dqkv + qkv_at(b, t2, 2, h, T, C, hs);
  float* p = probs[threadIdx.y];
  float* g = grads[threadIdx.y];
  for (int i0 = 0; i0 < hs; i0 += 32) {
    int i = i0 + lane;
    float sk = 0.0f, sv = 0.0f;
    for (int c0 = t2; c0 < T; c0 += 32) {
      int t = c0 + lane;  // a query row that sees key t2
      __syncwarp();
      float pt = 0.0f, ds = 0.0f;
      if (t < T) {
        const float* dy = dout + ((int64_t)b * T + t) * C + (int64_t)h * hs;
        pt = expf(scale * dot(qkv + qkv_at(b, t, 0, h, T, C, hs), k, hs) - lse[base + t]);
        ds = pt * (dot(dy, v, hs) - d[base + t]) * scale;
      }
      p[lane] = pt, g[lane] = ds;
      __syncwarp();
      if (i < hs)
        for (int j = 0; j < 32 && c0 + j < T; j++) {
          sk += g[j] * qkv[qkv_at(b, c0 + j, 0, h, T, C, hs) + i];
          sv += p[j] * dout[((int64_t)b * T + c0 + j) * C + (int64_t)h * hs + i];
        }
    }
    if (i < hs) {
      dk[i] += sk;
      dv[i] += sv;
    }
  }
}

extern "C" tl_status tl__cuda_attention_forward(void* pctx, float* out, float* lse,
                                                const float* qkv, int b, int t, int c, int nh) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  int rows = b * nh * t;
  dim3 block(32, ROWS_PER_BLOCK);
  attention_forward_kernel<<<tl__cuda_blocks(rows, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
      out, lse, qkv, b, t, c, nh, 1.0f / sqrtf((float)(c / nh)));
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_attention_backward(void* pctx, float* dqkv, const float* dout,
                                                 const float* qkv, const float* out,
                                                 const float* lse, int b, int t, int c, int nh) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  int rows = b * nh * t;
  void* scratch = NULL;
  TL_CHECK(tl__cuda_workspace(ctx, sizeof(float) * (size_t)rows, &scratch));
  float* d = (float*)scratch;  // one number per query row: linear in T
  const float scale = 1.0f / sqrtf((float)(c / nh));
  dim3 block(32, ROWS_PER_BLOCK);
  unsigned grid = tl__cuda_blocks(rows, ROWS_PER_BLOCK);
  attention_rowdot_kernel<<<grid, block, 0, ctx->stream>>>(d, dout, out, b, t, c, nh);
  TL_CUDA_LAUNCHED();
  attention_dq_kernel<<<grid, block, 0, ctx->stream>>>(dqkv, dout, qkv, lse, d, b, t, c, nh, scale);
  TL_CUDA_LAUNCHED();
  attention_dkv_kernel<<<grid, block, 0, ctx->stream>>>(dqkv, dout, qkv, lse, d, b, t, c, nh,
                                                        scale);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
