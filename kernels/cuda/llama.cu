// llama.cu — RMSNorm, rotary position embeddings and SwiGLU's gate
// (kernels/cpu/llama.c is the same in C). RMSNorm: one warp per row; its
// weight gradient one thread per column walking the rows in order, so
// results do not depend on scheduling. RoPE: one thread per (row, head,
// pair), the frequencies computed on the host as transformers computes
// them (kernels/rope.c) and passed by value. SwiGLU: one thread per element.
#include "kernels/cuda/colsum.cuh"
#include "kernels/cuda/cuda_impl.h"

#define ROWS_PER_BLOCK 8
#define THREADS 256
#define MAX_HALF 512  // heads of up to 1024 channels

#define FOR_EACH(i, n)                                                      \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

static unsigned grid_for(int64_t n) {
  int64_t g = (n + THREADS - 1) / THREADS;
  return (unsigned)(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

__global__ static void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp,
                                              const float* w, int n, int c, float eps) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= n) return;
  int lane = threadIdx.x;
  const float* x = inp + (int64_t)row * c;
  float s = 0.0f;
  for (int j = lane; j < c; j += 32) s += x[j] * x[j];
  float r = 1.0f / sqrtf(tl__warp_sum(s) / c + eps);
  float* o = out + (int64_t)row * c;
  for (int j = lane; j < c; j += 32) o[j] = (x[j] * r) * w[j];
  if (lane == 0) rstd[row] = r;
}

__global__ static void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp,
                                           const float* w, const float* rstd, int n, int c) {
  int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.y;
  if (row >= n) return;
  int lane = threadIdx.x;
  const float* x = inp + (int64_t)row * c;
  const float* dy = dout + (int64_t)row * c;
  float r = rstd[row], dot = 0.0f;
  for (int j = lane; j < c; j += 32) dot += w[j] * dy[j] * x[j];
  float k = tl__warp_sum(dot) * r * r * r / c;
  float* dx = dinp + (int64_t)row * c;
  for (int j = lane; j < c; j += 32) dx[j] += r * w[j] * dy[j] - k * x[j];
}

// a row's term of the weight's gradient (colsum.cuh): dout x rstd
struct rmsnorm_dweight {
  const float *dout, *inp, *rstd;
  int c;
  __device__ void operator()(int i, int j, float* v) const {
    v[0] = dout[(int64_t)i * c + j] * inp[(int64_t)i * c + j] * rstd[i];
  }
};

struct freqs {
  float inv[MAX_HALF];
};

// y = R(sign * position) x per head; accumulate adds into y
__global__ static void rope_kernel(float* y, const float* x, freqs f, int t, int heads, int hs,
                                   int cp, int cp_rank, float sign, int64_t pairs,
                                   bool accumulate) {
  const int half = hs / 2;
  FOR_EACH(p, pairs) {
    int i = (int)(p % half);
    int64_t rh = p / half;  // (row, head)
    int64_t row = rh / heads;
    float angle = f.inv[i] * (float)tl_cp_position((int)(row % t), t, cp, cp_rank);
    float cs = cosf(angle), sn = sign * sinf(angle);
    int64_t a = rh * hs + i;
    float x1 = x[a], x2 = x[a + half];
    float y1 = x1 * cs - x2 * sn, y2 = x2 * cs + x1 * sn;
    if (accumulate) {
      y[a] += y1;
      y[a + half] += y2;
    } else {
      y[a] = y1;
      y[a + half] = y2;
    }
  }
}

__global__ static void swiglu_forward_kernel(float* out, const float* gate, const float* up,
                                             int64_t n) {
  FOR_EACH(i, n) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ static void swiglu_backward_kernel(float* dgate, float* dup, const float* dout,
                                              const float* gate, const float* up, int64_t n) {
  FOR_EACH(i, n) {
    float g = gate[i], sig = 1.0f / (1.0f + expf(-g));
    if (dgate) dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    if (dup) dup[i] += dout[i] * g * sig;
  }
}

extern "C" tl_status tl__cuda_rmsnorm_forward(void* pctx, float* out, float* rstd, const float* inp,
                                              const float* weight, int n, int c, float eps) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  dim3 block(32, ROWS_PER_BLOCK);
  rmsnorm_forward_kernel<<<tl__cuda_blocks(n, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
      out, rstd, inp, weight, n, c, eps);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_rmsnorm_backward(void* pctx, float* dinp, float* dweight,
                                               const float* dout, const float* inp,
                                               const float* weight, const float* rstd, int n,
                                               int c) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  if (dinp) {
    dim3 block(32, ROWS_PER_BLOCK);
    rmsnorm_dinp_kernel<<<tl__cuda_blocks(n, ROWS_PER_BLOCK), block, 0, ctx->stream>>>(
        dinp, dout, inp, weight, rstd, n, c);
    TL_CUDA_LAUNCHED();
  }
  if (dweight) {
    TL_CHECK(tl__colsum<1>(ctx, tl_colsum_outs<1>{{dweight}}, rmsnorm_dweight{dout, inp, rstd, c},
                           n, c));
  }
  return TL_OK;
}

static tl_status rope(struct tl_cuda_ctx* ctx, float* y, const float* x, const struct tl_rope* r,
                      int b, int t, int heads, float sign, bool accumulate) {
  if (r->hs / 2 > MAX_HALF)
    return TL_ERRF(TL_ERR_UNSUPPORTED, "rope: heads of %d channels; the CUDA kernel takes up to %d",
                   r->hs, 2 * MAX_HALF);
  freqs f;
  tl_rope_inv_freq(r, f.inv);
  int64_t pairs = (int64_t)b * t * heads * (r->hs / 2);
  rope_kernel<<<grid_for(pairs), THREADS, 0, ctx->stream>>>(y, x, f, t, heads, r->hs, r->cp,
                                                            r->cp_rank, sign, pairs, accumulate);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_rope_forward(void* pctx, float* out, const float* inp,
                                           const struct tl_rope* r, int b, int t, int heads) {
  return rope(TL_CUDA_CTX(pctx), out, inp, r, b, t, heads, 1.0f, false);
}

extern "C" tl_status tl__cuda_rope_backward(void* pctx, float* dinp, const float* dout,
                                            const struct tl_rope* r, int b, int t, int heads) {
  return rope(TL_CUDA_CTX(pctx), dinp, dout, r, b, t, heads, -1.0f, true);
}

extern "C" tl_status tl__cuda_swiglu_forward(void* pctx, float* out, const float* gate,
                                             const float* up, int64_t n) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  swiglu_forward_kernel<<<grid_for(n), THREADS, 0, ctx->stream>>>(out, gate, up, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_swiglu_backward(void* pctx, float* dgate, float* dup,
                                              const float* dout, const float* gate, const float* up,
                                              int64_t n) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  swiglu_backward_kernel<<<grid_for(n), THREADS, 0, ctx->stream>>>(dgate, dup, dout, gate, up, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
