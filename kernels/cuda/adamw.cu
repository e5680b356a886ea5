// adamw.cu — AdamW, one thread per parameter, the gradient scaled (clipped)
// as it is read; bias corrections computed on the host once per call.
#include "kernels/cuda/cuda_impl.h"

__global__ static void adamw_kernel(float* p, const float* g, float scale, float* m, float* v,
                                    int64_t n, float lr, float b1, float b2, float eps, float wd,
                                    float c1, float c2) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float gi = g[i] * scale;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
  }
}

extern "C" tl_status tl__cuda_adamw(void* pctx, float* params, const float* grads, float grad_scale,
                                    float* m, float* v, int64_t n, float lr, float beta1,
                                    float beta2, float eps, float weight_decay, int step) {
  if (step < 1) return TL_ERRF(TL_ERR_INVALID, "AdamW step %d: steps count from 1", step);
  struct tl_cuda_ctx* ctx = TL_CUDA_CTX(pctx);
  float c1 = 1.0f - powf(beta1, (float)step), c2 = 1.0f - powf(beta2, (float)step);
  int64_t blocks = (n + 255) / 256;
  adamw_kernel<<<(unsigned)(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535), 256, 0,
                 ctx->stream>>>(params, grads, grad_scale, m, v, n, lr, beta1, beta2, eps,
                                weight_decay, c1, c2);
  TL_CUDA_LAUNCHED();
  return TL_OK;
}
