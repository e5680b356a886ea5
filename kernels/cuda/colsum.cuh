/* colsum.cuh — column sums over many rows, spread over the whole GPU.
 *
 * A parameter's gradient that sums over every token row (a bias, a norm's
 * weight) was one thread per column walking all n rows: a few dozen blocks
 * for a GPU of 100+ multiprocessors. Here the rows are cut into
 * COLSUM_CHUNKS chunks and the columns into tiles of 32: block (tile,
 * chunk) sums its rows for its 32 columns (a warp per row lane, reading
 * 32 consecutive floats of a row), into partial[chunk][k][column]; a
 * second pass adds the chunks in order into the outputs. The shape is fixed
 * (not the GPU's), so the sums are the same in every run.
 *
 * F is a functor: f(i, j, v) writes the K terms of row i, column j. */
#ifndef TL_KERNELS_CUDA_COLSUM_CUH
#define TL_KERNELS_CUDA_COLSUM_CUH

#include "kernels/cuda/cuda_impl.h"

#define COLSUM_TILE 32
#define COLSUM_LANES 8
#define COLSUM_CHUNKS 32

template <int K>
struct tl_colsum_outs {
  float* out[K]; /* += each column's sum; NULL: not wanted */
};

template <int K, class F>
__global__ static void tl__colsum_partial_kernel(float* partial, F f, int n, int c) {
  __shared__ float sh[K][COLSUM_LANES][COLSUM_TILE + 1];
  const int j = blockIdx.x * COLSUM_TILE + threadIdx.x;
  const int per = (n + COLSUM_CHUNKS - 1) / COLSUM_CHUNKS;
  const int i0 = blockIdx.y * per, i1 = min(n, i0 + per);
  float s[K];
  for (int k = 0; k < K; k++) s[k] = 0.0f;
  if (j < c)
    for (int i = i0 + threadIdx.y; i < i1; i += COLSUM_LANES) {
      float v[K];
      f(i, j, v);
      for (int k = 0; k < K; k++) s[k] += v[k];
    }
  for (int k = 0; k < K; k++) sh[k][threadIdx.y][threadIdx.x] = s[k];
  __syncthreads();
  if (threadIdx.y == 0 && j < c)
    for (int k = 0; k < K; k++) {
      float t = 0.0f;
      for (int y = 0; y < COLSUM_LANES; y++) t += sh[k][y][threadIdx.x];
      partial[((int64_t)blockIdx.y * K + k) * c + j] = t;
    }
}

template <int K>
__global__ static void tl__colsum_final_kernel(tl_colsum_outs<K> outs, const float* partial,
                                               int c) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= c) return;
  for (int k = 0; k < K; k++) {
    if (!outs.out[k]) continue;
    float t = 0.0f;
    for (int q = 0; q < COLSUM_CHUNKS; q++) t += partial[((int64_t)q * K + k) * c + j];
    outs.out[k][j] += t;
  }
}

/* outs.out[k][j] += sum over rows i < n of f(i, j)[k], for columns j < c. */
template <int K, class F>
static tl_status tl__colsum(struct tl_cuda_ctx* ctx, tl_colsum_outs<K> outs, F f, int n, int c) {
  if (n <= 0 || c <= 0) return TL_OK;
  void* ws = NULL;
  TL_CHECK(tl__cuda_workspace(ctx, sizeof(float) * (size_t)COLSUM_CHUNKS * K * (size_t)c, &ws));
  float* partial = (float*)ws;
  dim3 grid(tl__cuda_blocks(c, COLSUM_TILE), COLSUM_CHUNKS), block(COLSUM_TILE, COLSUM_LANES);
  tl__colsum_partial_kernel<K, F><<<grid, block, 0, ctx->stream>>>(partial, f, n, c);
  TL_CUDA_LAUNCHED();
  tl__colsum_final_kernel<K><<<tl__cuda_blocks(c, 256), 256, 0, ctx->stream>>>(outs, partial, c);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

#endif
