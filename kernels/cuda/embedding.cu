// embedding.cu — token + position embedding. The backward into wte is a
// scatter with repeated rows; one thread per channel walks the positions in
// order, so no atomics and the same sum every run. A tensor-parallel shard
// holds wte rows [row_begin, row_begin + rows); other tokens add nothing.
#include "kernels/cuda/cuda_impl.h"

__global__ static void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                                const float* wpe, int B, int T, int C,
                                                int row_begin, int rows) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)B * T * C) return;
  int64_t p = i / C;
  int c = (int)(i % C);
  int64_t row = (int64_t)tokens[p] - row_begin;
  float v = row >= 0 && row < rows ? wte[row * C + c] : 0.0f;
  if (wpe) v += wpe[(p % T) * C + c];
  out[i] = v;
}

__global__ static void embedding_dwte_kernel(float* dwte, const float* dout, const int32_t* tokens,
                                             int64_t positions, int C, int row_begin, int rows) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int64_t p = 0; p < positions; p++) {
    int64_t row = (int64_t)tokens[p] - row_begin;
    if (row >= 0 && row < rows) dwte[row * C + c] += dout[p * C + c];
  }
}

__global__ static void embedding_dwpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;  // (t, c)
  if (i >= (int64_t)T * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; b++) s += dout[(int64_t)b * T * C + i];
  dwpe[i] += s;
}

extern "C" tl_status tl__cuda_embedding_forward(void* pctx, float* out, const int32_t* tokens,
                                                const float* wte, const float* wpe, int b, int t,
                                                int c, int row_begin, int rows) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  int64_t n = (int64_t)b * t * c;
  if (n == 0) return TL_OK;
  embedding_forward_kernel<<<tl__cuda_blocks(n, 256), 256, 0, ctx->stream>>>(
      out, tokens, wte, wpe, b, t, c, row_begin, rows);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_embedding_backward(void* pctx, float* dwte, float* dwpe,
                                                 const float* dout, const int32_t* tokens, int b,
                                                 int t, int c, int row_begin, int rows) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  if (dwte) {
    embedding_dwte_kernel<<<tl__cuda_blocks(c, 128), 128, 0, ctx->stream>>>(
        dwte, dout, tokens, (int64_t)b * t, c, row_begin, rows);
    TL_CUDA_LAUNCHED();
  }
  if (dwpe) {
    embedding_dwpe_kernel<<<tl__cuda_blocks((int64_t)t * c, 256), 256, 0, ctx->stream>>>(dwpe, dout,
                                                                                         b, t, c);
    TL_CUDA_LAUNCHED();
  }
  return TL_OK;
}
