// embedding.cu — token + position embedding. The backward into wte is a
// scatter with repeated rows: the positions are sorted by token (CUB's
// radix sort, stable: each token's positions stay in order), and a block
// per token adds its positions' rows in that order — no atomics, the CPU's
// order of additions, the same sum every run, and as many blocks as the
// batch has distinct tokens (one thread per channel walking every position
// left the GPU nearly idle). A tensor-parallel shard holds wte rows
// [row_begin, row_begin + rows); other tokens add nothing.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_impl.h"

__global__ static void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                                const float* wpe, int B, int T, int C,
                                                int row_begin, int rows, int accumulate) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int64_t)B * T * C) return;
  int64_t p = i / C;
  int c = (int)(i % C);
  int64_t row = (int64_t)tokens[p] - row_begin;
  float v = row >= 0 && row < rows ? wte[row * C + c] : 0.0f;
  if (wpe) v += wpe[(p % T) * C + c];
  out[i] = accumulate ? out[i] + v : v;
}

__global__ static void iota_kernel(int32_t* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = i;
}

// Block i: if sorted position i starts a token's run, dwte's row of that
// token += the run's dout rows, in position order.
__global__ static void embedding_dwte_runs_kernel(float* dwte, const float* dout,
                                                  const int32_t* token, const int32_t* position,
                                                  int n, int C, int row_begin, int rows) {
  const int i = blockIdx.x;
  if (i >= n || (i > 0 && token[i] == token[i - 1])) return;
  const int64_t row = (int64_t)token[i] - row_begin;
  if (row < 0 || row >= rows) return;
  int end = i + 1;
  while (end < n && token[end] == token[i]) end++;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = dwte[row * C + c];
    for (int k = i; k < end; k++) s += dout[(int64_t)position[k] * C + c];
    dwte[row * C + c] = s;
  }
}

// Sorts the n positions by token into the workspace, then adds the runs.
static tl_status embedding_dwte(struct tl_cuda_ctx* ctx, float* dwte, const float* dout,
                                const int32_t* tokens, int n, int c, int row_begin, int rows) {
  size_t temp = 0;
  cudaError_t e =
      cub::DeviceRadixSort::SortPairs(NULL, temp, (const int32_t*)NULL, (int32_t*)NULL,
                                      (const int32_t*)NULL, (int32_t*)NULL, n, 0, 32, ctx->stream);
  TL_CUDA_CHECK(e);
  const size_t ints = ((size_t)n + 63) / 64 * 64; /* each array 256-byte aligned */
  void* ws = NULL;
  TL_CHECK(tl__cuda_workspace(ctx, sizeof(int32_t) * 3 * ints + temp, &ws));
  int32_t *sorted = (int32_t*)ws, *order = sorted + ints, *position = order + ints;
  void* scratch = position + ints;
  iota_kernel<<<tl__cuda_blocks(n, 256), 256, 0, ctx->stream>>>(order, n);
  TL_CUDA_LAUNCHED();
  TL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch, temp, tokens, sorted, order, position, n,
                                                0, 32, ctx->stream));
  embedding_dwte_runs_kernel<<<(unsigned)n, 128, 0, ctx->stream>>>(dwte, dout, sorted, position, n,
                                                                   c, row_begin, rows);
  TL_CUDA_LAUNCHED();
  return TL_OK;
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
                                                int c, int row_begin, int rows, bool accumulate) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  int64_t n = (int64_t)b * t * c;
  if (n == 0) return TL_OK;
  embedding_forward_kernel<<<tl__cuda_blocks(n, 256), 256, 0, ctx->stream>>>(
      out, tokens, wte, wpe, b, t, c, row_begin, rows, accumulate);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_embedding_backward(void* pctx, float* dwte, float* dwpe,
                                                 const float* dout, const int32_t* tokens, int b,
                                                 int t, int c, int row_begin, int rows) {
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  const int64_t n = (int64_t)b * t;
  if (n == 0 || c == 0) return TL_OK;
  if (n > INT32_MAX)
    return TL_ERRF(TL_ERR_UNSUPPORTED,
                   "embedding backward: %lld positions; the CUDA kernel takes %d", (long long)n,
                   INT32_MAX);
  if (dwte) TL_CHECK(embedding_dwte(ctx, dwte, dout, tokens, (int)n, c, row_begin, rows));
  if (dwpe) {
    embedding_dwpe_kernel<<<tl__cuda_blocks((int64_t)t * c, 256), 256, 0, ctx->stream>>>(dwpe, dout,
                                                                                         b, t, c);
    TL_CUDA_LAUNCHED();
  }
  return TL_OK;
}
