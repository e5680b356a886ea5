// elementwise.cu — GELU, residual add, scale, the bf16 conversions and the full sum. The sum is
// one block striding in double and reducing in a fixed tree, so it is
// deterministic (it is used for losses and norms, not in hot loops).
#include "kernels/cuda/cuda_impl.h"

#define THREADS 256
#define GELU_K 0.7978845608028654f
#define GELU_C 0.044715f

#define FOR_EACH(i, n)                                                      \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t)gridDim.x * blockDim.x)

static unsigned grid_for(int64_t n) {
  int64_t g = (n + THREADS - 1) / THREADS;
  return (unsigned)(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

__global__ static void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  FOR_EACH(i, n) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + GELU_C * x * x * x)));
  }
}

__global__ static void gelu_backward_kernel(float* dinp, const float* inp, const float* dout,
                                            int64_t n) {
  FOR_EACH(i, n) {
    float x = inp[i];
    float th = tanhf(GELU_K * (x + GELU_C * x * x * x));
    float dth = (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    dinp[i] += (0.5f * (1.0f + th) + 0.5f * x * dth) * dout[i];
  }
}

__global__ static void add_forward_kernel(float* out, const float* a, const float* b, int64_t n) {
  FOR_EACH(i, n) out[i] = a[i] + b[i];
}

__global__ static void add_backward_kernel(float* da, float* db, const float* dout, int64_t n) {
  FOR_EACH(i, n) {
    if (da) da[i] += dout[i];
    if (db) db[i] += dout[i];
  }
}

__global__ static void scale_forward_kernel(float* out, const float* inp, float alpha, int64_t n) {
  FOR_EACH(i, n) out[i] = alpha * inp[i];
}

__global__ static void scale_backward_kernel(float* dinp, const float* dout, float alpha,
                                             int64_t n) {
  FOR_EACH(i, n) dinp[i] += alpha * dout[i];
}

/* The sum of squares in two passes of a fixed shape, so that the result
 * does not depend on the launch: SUMSQ_BLOCKS blocks each sum a strided
 * share in double (thread t of block b reads b*1024 + t, then every
 * SUMSQ_BLOCKS*1024 on) and reduce it by a tree into partial[b]; one block
 * then sums the partials by a tree. (One block over the whole gradient
 * used one of the GPU's 100+ multiprocessors.) */
#define SUMSQ_BLOCKS 256
#define SUMSQ_THREADS 1024

__global__ static void sumsq_partial_kernel(double* partial, const float* inp, int64_t n) {
  __shared__ double shared[SUMSQ_THREADS];
  double s = 0.0;
  for (int64_t i = (int64_t)blockIdx.x * SUMSQ_THREADS + threadIdx.x; i < n;
       i += (int64_t)SUMSQ_BLOCKS * SUMSQ_THREADS)
    s += (double)inp[i] * inp[i];
  shared[threadIdx.x] = s;
  __syncthreads();
  for (int stride = SUMSQ_THREADS / 2; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ static void sumsq_final_kernel(float* out, const double* partial) {
  __shared__ double shared[SUMSQ_BLOCKS];
  shared[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (int stride = SUMSQ_BLOCKS / 2; stride > 0; stride >>= 1) {
    if ((int)threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = (float)shared[0];
}

// bf16 storage: the same rounding as core/dtype.c (nearest even, NaN kept).
__device__ static inline uint16_t to_bf16(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__device__ static inline float from_bf16(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

__global__ static void to_bf16_kernel(uint16_t* out, const float* x, int64_t n) {
  FOR_EACH(i, n) out[i] = to_bf16(x[i]);
}

// rows of cols floats, ld apart, into a dense (rows, cols) image
__global__ static void to_bf16_2d_kernel(uint16_t* out, const float* x, int64_t rows, int cols,
                                         int ld) {
  FOR_EACH(i, rows * cols) out[i] = to_bf16(x[(i / cols) * ld + i % cols]);
}

__global__ static void from_bf16_kernel(float* out, const uint16_t* x, int64_t n) {
  FOR_EACH(i, n) out[i] = from_bf16(x[i]);
}

__global__ static void round_bf16_kernel(float* out, const float* x, int64_t n) {
  FOR_EACH(i, n) out[i] = from_bf16(to_bf16(x[i]));
}

#define STREAM TL_CUDA_CTX(ctx)->stream

extern "C" tl_status tl__cuda_to_bf16(void* ctx, uint16_t* out, const float* x, int64_t n) {
  to_bf16_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(out, x, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_to_bf16_2d(void* ctx, uint16_t* out, const float* x, int64_t rows,
                                         int cols, int ld) {
  if (ld == cols) return tl__cuda_to_bf16(ctx, out, x, rows * cols);
  to_bf16_2d_kernel<<<grid_for(rows * cols), THREADS, 0, STREAM>>>(out, x, rows, cols, ld);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_from_bf16(void* ctx, float* out, const uint16_t* x, int64_t n) {
  from_bf16_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(out, x, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_round_bf16(void* ctx, float* out, const float* x, int64_t n) {
  round_bf16_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(out, x, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_gelu_forward(void* ctx, float* out, const float* inp, int64_t n) {
  gelu_forward_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(out, inp, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_gelu_backward(void* ctx, float* dinp, const float* inp,
                                            const float* dout, int64_t n) {
  gelu_backward_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(dinp, inp, dout, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_add_forward(void* ctx, float* out, const float* a, const float* b,
                                          int64_t n) {
  add_forward_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(out, a, b, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_add_backward(void* ctx, float* da, float* db, const float* dout,
                                           int64_t n) {
  add_backward_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(da, db, dout, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_scale_forward(void* ctx, float* out, const float* inp, float alpha,
                                            int64_t n) {
  scale_forward_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(out, inp, alpha, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_scale_backward(void* ctx, float* dinp, const float* dout, float alpha,
                                             int64_t n) {
  scale_backward_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(dinp, dout, alpha, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

extern "C" tl_status tl__cuda_sumsq(void* ctx, float* out, const float* inp, int64_t n) {
  void* partial = NULL;
  TL_CHECK(tl__cuda_workspace(TL_CUDA_CTX(ctx), sizeof(double) * SUMSQ_BLOCKS, &partial));
  sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, STREAM>>>((double*)partial, inp, n);
  TL_CUDA_LAUNCHED();
  sumsq_final_kernel<<<1, SUMSQ_BLOCKS, 0, STREAM>>>(out, (const double*)partial);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}

// dst += src, (rows, cols) with their own row strides
__global__ static void add_2d_kernel(float* dst, int64_t ldd, const float* src, int64_t lds,
                                     int64_t cols, int64_t n) {
  FOR_EACH(i, n) {
    int64_t r = i / cols, c = i % cols;
    dst[r * ldd + c] += src[r * lds + c];
  }
}

extern "C" tl_status tl__cuda_copy_2d(void* ctx, float* dst, int64_t ldd, const float* src,
                                      int64_t lds, int64_t rows, int64_t cols, bool accumulate) {
  if (rows == 0 || cols == 0) return TL_OK;
  if (!accumulate) {
    TL_CUDA_CHECK(cudaMemcpy2DAsync(dst, sizeof(float) * (size_t)ldd, src,
                                    sizeof(float) * (size_t)lds, sizeof(float) * (size_t)cols,
                                    (size_t)rows, cudaMemcpyDeviceToDevice, STREAM));
    return TL_OK;
  }
  int64_t n = rows * cols;
  add_2d_kernel<<<grid_for(n), THREADS, 0, STREAM>>>(dst, ldd, src, lds, cols, n);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
