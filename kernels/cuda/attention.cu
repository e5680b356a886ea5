// attention.cu — causal self-attention, multi-head or grouped-query,
// without the T x T matrix (flash attention's algorithm;
// kernels/cpu/attention.c is the same in C). The fallback where no fused
// kernel serves a shape: correct, race-free and bit-reproducible (no
// atomics), not fast.
//
// q rows are ldq floats apart, k and v rows ldkv (a fused [Q | K | V] row
// or separate tensors); query head h reads key/value head h / (NH / NKV).
// Forward: one warp per (b, h, t) query row. Pass 1: each lane keeps an
// online softmax (running max and sum) over the keys it visits; the warp
// combines them into the row's log-sum-exp. Pass 2: keys in chunks of 32,
// each lane one key's probability e^(s - lse) into shared memory, then the
// lanes, one output channel each, sum p v over the chunk.
// Backward:
//   0. per query row:  D_t = dout_t . out_t
//   1. per query row:  dq_t  += scale * sum_t2 p (dout_t . v_t2 - D_t) k_t2
//   2. per key row of a key/value head, over the query heads that read it
//      in order:       dk_t2 += scale * sum_h,t p (dout_t . v_t2 - D_t) q_t
//                      dv_t2 += sum_h,t p dout_t
// where p = e^(scale q_t . k_t2 - lse_t) is computed again where needed.
//
// A block of a split sequence (struct tl_attention_shape's tk, q_pos,
// k_pos, strides, merge: context parallelism's ring) runs the same
// kernels over its keys; a merging forward combines the block's row
// (lse_b, out_b) with the stored one by their log-sum-exps:
// lse = log(e^lse_a + e^lse_b), out = out_a e^(lse_a - lse) + out_b e^(lse_b - lse).
#include "kernels/cuda/cuda_impl.h"

#define ROWS_PER_BLOCK 8

// struct tl_attention_shape, resolved (tl_attention_resolve)
struct shape {
  int B, T, NH, NKV, hs, TK, q_pos, k_pos;
  int64_t ldq, ldkv, bq, bkv, bo, ldlse;
  bool merge;
};

// row t of sequence b's head h of x: sequences `bs` floats apart, rows `ld`
__device__ __forceinline__ int64_t at(int b, int t, int h, int64_t bs, int64_t ld, int hs) {
  return (int64_t)b * bs + (int64_t)t * ld + (int64_t)h * hs;
}

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

// how many of the block's keys query row t sees (keys 0 .. n-1)
__device__ __forceinline__ int keys_seen(const shape& s, int t) {
  int n = s.q_pos + t - s.k_pos + 1;
  return n < 0 ? 0 : n < s.TK ? n : s.TK;
}

__global__ static void attention_forward_kernel(float* out, float* lse, const float* q,
                                                const float* k, const float* v, shape s,
                                                float scale) {
  __shared__ float probs[ROWS_PER_BLOCK][32];
  const int T = s.T, hs = s.hs;
  const int64_t c = (int64_t)s.NH * hs;
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;  // (b, h, t) flattened
  if (row >= s.B * s.NH * T) return;                    // the whole warp leaves together
  int lane = threadIdx.x;
  int t = row % T, h = (row / T) % s.NH, b = row / (T * s.NH), kh = h / (s.NH / s.NKV);
  const float* qr = q + at(b, t, h, s.bq, s.ldq, hs);
  const int n = keys_seen(s, t);
  float* lr = lse + ((int64_t)b * s.NH + h) * s.ldlse + t;
  const float prev = s.merge ? *lr : -INFINITY;  // the earlier blocks' lse
  // 1. each lane's running max and sum over its keys, then the warp's
  float m = -INFINITY, l = 0.0f;
  for (int t2 = lane; t2 < n; t2 += 32) {
    float sc = scale * dot(qr, k + at(b, t2, kh, s.bkv, s.ldkv, hs), hs);
    float mn = fmaxf(m, sc);
    l = l * expf(m - mn) + expf(sc - mn);
    m = mn;
  }
  float mx = tl__warp_max(m);
  float sum = tl__warp_sum(m == -INFINITY ? 0.0f : l * expf(m - mx));
  const float block_lse = n > 0 ? mx + logf(sum) : -INFINITY;
  float row_lse = block_lse, w_prev = 0.0f, w_block = 1.0f;
  if (prev != -INFINITY) {  // merge: the two parts' weights in the whole
    row_lse = n > 0 ? fmaxf(prev, block_lse) + log1pf(expf(-fabsf(prev - block_lse))) : prev;
    w_prev = expf(prev - row_lse);
    w_block = n > 0 ? expf(block_lse - row_lse) : 0.0f;
  }
  // 2. out = sum_t2 p v, 32 keys at a time
  float* o = out + at(b, t, h, s.bo, c, hs);
  float* p = probs[threadIdx.y];
  for (int i0 = 0; i0 < hs; i0 += 32) {
    int i = i0 + lane;
    float acc = 0.0f;
    for (int c0 = 0; c0 < n; c0 += 32) {
      int t2 = c0 + lane;
      __syncwarp();
      p[lane] = t2 < n ? expf(scale * dot(qr, k + at(b, t2, kh, s.bkv, s.ldkv, hs), hs) - block_lse)
                       : 0.0f;
      __syncwarp();
      if (i < hs)
        for (int j = 0; j < 32 && c0 + j < n; j++)
          acc += p[j] * v[at(b, c0 + j, kh, s.bkv, s.ldkv, hs) + i];
    }
    if (i < hs) o[i] = prev != -INFINITY ? o[i] * w_prev + acc * w_block : acc;
  }
  __syncwarp();
  if (lane == 0) *lr = row_lse;
}

// 0. D per query row, into the workspace
__global__ static void attention_rowdot_kernel(float* d, const float* dout, const float* out,
                                               shape s) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= s.B * s.NH * s.T) return;
  int lane = threadIdx.x, T = s.T, hs = s.hs;
  int t = row % T, h = (row / T) % s.NH, b = row / (T * s.NH);
  int64_t a = at(b, t, h, s.bo, (int64_t)s.NH * hs, hs);
  float sum = 0.0f;
  for (int i = lane; i < hs; i += 32) sum += dout[a + i] * out[a + i];
  sum = tl__warp_sum(sum);
  if (lane == 0) d[row] = sum;
}

// 1. dq per query row
__global__ static void attention_dq_kernel(float* dq, const float* dout, const float* q,
                                           const float* k, const float* v, const float* lse,
                                           const float* d, shape s, float scale) {
  __shared__ float grads[ROWS_PER_BLOCK][32];
  const int T = s.T, hs = s.hs;
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= s.B * s.NH * T) return;
  int lane = threadIdx.x;
  int t = row % T, h = (row / T) % s.NH, b = row / (T * s.NH), kh = h / (s.NH / s.NKV);
  const float* qr = q + at(b, t, h, s.bq, s.ldq, hs);
  const float* dy = dout + at(b, t, h, s.bo, (int64_t)s.NH * hs, hs);
  float* dqr = dq + at(b, t, h, s.bq, s.ldq, hs);
  const float row_lse = lse[((int64_t)b * s.NH + h) * s.ldlse + t];
  const int n = keys_seen(s, t);
  float* g = grads[threadIdx.y];
  for (int i0 = 0; i0 < hs; i0 += 32) {
    int i = i0 + lane;
    float acc = 0.0f;
    for (int c0 = 0; c0 < n; c0 += 32) {
      int t2 = c0 + lane;
      __syncwarp();
      float ds = 0.0f;
      if (t2 < n) {
        float p = expf(scale * dot(qr, k + at(b, t2, kh, s.bkv, s.ldkv, hs), hs) - row_lse);
        ds = p * (dot(dy, v + at(b, t2, kh, s.bkv, s.ldkv, hs), hs) - d[row]) * scale;
      }
      g[lane] = ds;
      __syncwarp();
      if (i < hs)
        for (int j = 0; j < 32 && c0 + j < n; j++)
          acc += g[j] * k[at(b, c0 + j, kh, s.bkv, s.ldkv, hs) + i];
    }
    if (i < hs) dqr[i] += acc;
  }
}

// 2. dk and dv per key row of a key/value head
__global__ static void attention_dkv_kernel(float* dk, float* dv, const float* dout, const float* q,
                                            const float* k, const float* v, const float* lse,
                                            const float* d, shape s, float scale) {
  __shared__ float probs[ROWS_PER_BLOCK][32], grads[ROWS_PER_BLOCK][32];
  const int T = s.T, TK = s.TK, hs = s.hs, group = s.NH / s.NKV;
  const int64_t c = (int64_t)s.NH * hs;
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;  // (b, kh, t2): a key/value row
  if (row >= s.B * s.NKV * TK) return;
  int lane = threadIdx.x;
  int t2 = row % TK, kh = (row / TK) % s.NKV, b = row / (TK * s.NKV);
  const float* kr = k + at(b, t2, kh, s.bkv, s.ldkv, hs);
  const float* vr = v + at(b, t2, kh, s.bkv, s.ldkv, hs);
  // the first query row that sees key t2
  int first = s.k_pos + t2 - s.q_pos;
  first = first < 0 ? 0 : first;
  float* p = probs[threadIdx.y];
  float* g = grads[threadIdx.y];
  for (int i0 = 0; i0 < hs; i0 += 32) {
    int i = i0 + lane;
    float sk = 0.0f, sv = 0.0f;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
      const float* row_lse = lse + ((int64_t)b * s.NH + h) * s.ldlse;
      const float* row_d = d + ((int64_t)b * s.NH + h) * T;  // D of (b, h)'s first query row
      for (int c0 = first; c0 < T; c0 += 32) {
        int t = c0 + lane;  // a query row that sees key t2
        __syncwarp();
        float pt = 0.0f, ds = 0.0f;
        if (t < T) {
          const float* dy = dout + at(b, t, h, s.bo, c, hs);
          pt = expf(scale * dot(q + at(b, t, h, s.bq, s.ldq, hs), kr, hs) - row_lse[t]);
          ds = pt * (dot(dy, vr, hs) - row_d[t]) * scale;
        }
        p[lane] = pt, g[lane] = ds;
        __syncwarp();
        if (i < hs)
          for (int j = 0; j < 32 && c0 + j < T; j++) {
            sk += g[j] * q[at(b, c0 + j, h, s.bq, s.ldq, hs) + i];
            sv += p[j] * dout[at(b, c0 + j, h, s.bo, c, hs) + i];
          }
      }
    }
    if (i < hs) {
      dk[at(b, t2, kh, s.bkv, s.ldkv, hs) + i] += sk;
      dv[at(b, t2, kh, s.bkv, s.ldkv, hs) + i] += sv;
    }
  }
}

static shape shape_of(const struct tl_attention_shape* a) {
  const struct tl_attention_shape r = tl_attention_resolve(a);
  shape s = {r.b,   r.t,    r.nh, r.nkv, r.hs, r.tk,    r.q_pos, r.k_pos,
             r.ldq, r.ldkv, r.bq, r.bkv, r.bo, r.ldlse, r.merge};
  return s;
}

extern "C" tl_status tl__cuda_attention_forward(void* pctx, float* out, float* lse, const float* q,
                                                const float* k, const float* v,
                                                const struct tl_attention_shape* a) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  shape s = shape_of(a);
  int rows = s.B * s.NH * s.T;
  dim3 block(32, ROWS_PER_BLOCK);
  attention_forward_kernel<<<tl__cuda_blocks(rows, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
      out, lse, q, k, v, s, 1.0f / sqrtf((float)s.hs));
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_attention_backward(void* pctx, float* dq, float* dk, float* dv,
                                                 const float* dout, const float* q, const float* k,
                                                 const float* v, const float* out, const float* lse,
                                                 const struct tl_attention_shape* a) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  shape s = shape_of(a);
  int rows = s.B * s.NH * s.T, kv_rows = s.B * s.NKV * s.TK;
  void* scratch = NULL;
  TL_CHECK(tl__cuda_workspace(ctx, sizeof(float) * (size_t)rows, &scratch));
  float* d = (float*)scratch;  // one number per query row: linear in T
  const float scale = 1.0f / sqrtf((float)s.hs);
  dim3 block(32, ROWS_PER_BLOCK);
  unsigned grid = tl__cuda_blocks(rows, ROWS_PER_BLOCK);
  attention_rowdot_kernel<<<grid, block, 0, ctx->stream>>>(d, dout, out, s);
  TL_CUDA_LAUNCHED();
  attention_dq_kernel<<<grid, block, 0, ctx->stream>>>(dq, dout, q, k, v, lse, d, s, scale);
  TL_CUDA_LAUNCHED();
  attention_dkv_kernel<<<tl__cuda_blocks(kv_rows, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
      dk, dv, dout, q, k, v, lse, d, s, scale);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
