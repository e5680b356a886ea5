/* cpu_impl.h — the CPU kernels, one family per file, gathered into
 * tl_cpu_kernel_ops by backend.c. Signatures are those of struct
 * tl_kernel_ops; see kernels/ops.h for shapes and semantics. */
#ifndef TL_KERNELS_CPU_CPU_IMPL_H
#define TL_KERNELS_CPU_CPU_IMPL_H

#include "kernels/ops.h"

/* Loops shorter than this stay on one thread: waking a team costs more. */
#define TL_CPU_PAR_MIN 4096

tl_status tl__cpu_matmul(void* ctx, float* out, const float* a, const float* b, const float* bias,
                         int m, int n, int k, bool trans_a, bool trans_b, bool accumulate);
tl_status tl__cpu_matmul_ld(void* ctx, float* out, int ldo, const float* a, int lda, const float* b,
                            int ldb, const float* bias, int m, int n, int k, bool trans_a,
                            bool trans_b, bool accumulate);
tl_status tl__cpu_matmul_backward(void* ctx, float* da, float* db, float* dbias, const float* dout,
                                  const float* a, const float* b, int m, int n, int k, bool trans_a,
                                  bool trans_b);
tl_status tl__cpu_layernorm_forward(void* ctx, float* out, float* mean, float* rstd,
                                    const float* inp, const float* weight, const float* bias, int n,
                                    int c);
tl_status tl__cpu_layernorm_backward(void* ctx, float* dinp, float* dweight, float* dbias,
                                     const float* dout, const float* inp, const float* weight,
                                     const float* mean, const float* rstd, int n, int c);
tl_status tl__cpu_gelu_forward(void* ctx, float* out, const float* inp, int64_t n);
tl_status tl__cpu_gelu_backward(void* ctx, float* dinp, const float* inp, const float* dout,
                                int64_t n);
tl_status tl__cpu_attention_forward(void* ctx, float* out, float* lse, const float* q,
                                    const float* k, const float* v,
                                    const struct tl_attention_shape* s);
tl_status tl__cpu_attention_backward(void* ctx, float* dq, float* dk, float* dv, const float* dout,
                                     const float* q, const float* k, const float* v,
                                     const float* out, const float* lse,
                                     const struct tl_attention_shape* s);
tl_status tl__cpu_embedding_forward(void* ctx, float* out, const int32_t* tokens, const float* wte,
                                    const float* wpe, int b, int t, int c, int row_begin, int rows,
                                    bool accumulate);
tl_status tl__cpu_embedding_backward(void* ctx, float* dwte, float* dwpe, const float* dout,
                                     const int32_t* tokens, int b, int t, int c, int row_begin,
                                     int rows);
tl_status tl__cpu_crossentropy_forward_backward(void* ctx, float* losses, float* dlogits,
                                                const float* logits, const int32_t* targets,
                                                const float* dlosses, int n, int v, int vp);
tl_status tl__cpu_xent_shard_forward(void* ctx, float* losses, float* stats, const float* logits,
                                     const int32_t* targets, int n, int cols, int v0, int v,
                                     int phase);
tl_status tl__cpu_xent_shard_backward(void* ctx, float* dlogits, const float* logits,
                                      const int32_t* targets, const float* stats,
                                      const float* dlosses, int n, int cols, int v0, int v);
tl_status tl__cpu_copy_2d(void* ctx, float* dst, int64_t ldd, const float* src, int64_t lds,
                          int64_t rows, int64_t cols, bool accumulate);
tl_status tl__cpu_add_forward(void* ctx, float* out, const float* a, const float* b, int64_t n);
tl_status tl__cpu_add_backward(void* ctx, float* da, float* db, const float* dout, int64_t n);
tl_status tl__cpu_scale_forward(void* ctx, float* out, const float* inp, float alpha, int64_t n);
tl_status tl__cpu_scale_backward(void* ctx, float* dinp, const float* dout, float alpha, int64_t n);
tl_status tl__cpu_sumsq(void* ctx, float* out, const float* inp, int64_t n);
tl_status tl__cpu_fixed_add(void* ctx, int64_t* acc, float* x, int64_t n);
tl_status tl__cpu_fixed_to_float(void* ctx, float* out, const int64_t* acc, int64_t n);
tl_status tl__cpu_sumsq_fixed(void* ctx, int64_t* out, const float* x, int64_t n);
tl_status tl__cpu_to_bf16(void* ctx, uint16_t* out, const float* x, int64_t n);
tl_status tl__cpu_from_bf16(void* ctx, float* out, const uint16_t* x, int64_t n);
tl_status tl__cpu_round_bf16(void* ctx, float* out, const float* x, int64_t n);
tl_status tl__cpu_rmsnorm_forward(void* ctx, float* out, float* rstd, const float* inp,
                                  const float* weight, int n, int c, float eps);
tl_status tl__cpu_rmsnorm_backward(void* ctx, float* dinp, float* dweight, const float* dout,
                                   const float* inp, const float* weight, const float* rstd, int n,
                                   int c);
tl_status tl__cpu_rope_forward(void* ctx, float* out, const float* inp, const struct tl_rope* r,
                               int b, int t, int heads);
tl_status tl__cpu_rope_backward(void* ctx, float* dinp, const float* dout, const struct tl_rope* r,
                                int b, int t, int heads);
tl_status tl__cpu_swiglu_forward(void* ctx, float* out, const float* gate, const float* up,
                                 int64_t n);
tl_status tl__cpu_swiglu_backward(void* ctx, float* dgate, float* dup, const float* dout,
                                  const float* gate, const float* up, int64_t n);
tl_status tl__cpu_adamw(void* ctx, float* params, const float* grads, float grad_scale, float* m,
                        float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step);

#endif
