/* ops.h — the kernel table every device backend fills in.
 *
 * One struct of function pointers per backend (CPU: C + OpenBLAS, CUDA:
 * CUDA C + cuBLAS); the graph's ops dispatch through it and the op suite
 * checks every entry. All tensors are fp32 unless named otherwise, row-major
 * and contiguous, in the backend's device memory; shapes are in the comments.
 *
 * Conventions (llm.c's, so that its reasoning carries over):
 *  - N = B*T rows of C channels; attention's qkv rows are [Q | K | V] with
 *    head h at offset h*C/NH inside each.
 *  - Backward functions ADD into gradients (d* += ...), because a value that
 *    fans out receives several contributions. The fused cross-entropy is the
 *    one exception: it writes dlogits. A NULL gradient pointer skips it.
 *  - Calls are asynchronous with respect to the host on CUDA (ordered on the
 *    backend's stream); tl_kernel_ops.synchronize waits.
 *  - Every entry returns TL_OK or an error with a message; kernels check no
 *    shapes (the graph did), but they do report device failures. */
#ifndef TL_KERNELS_OPS_H
#define TL_KERNELS_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_LAYERNORM_EPS 1e-5f

/* Attention's sizes: b sequences of t tokens; nh query heads and nkv
 * key/value heads (nkv divides nh; equal is multi-head attention, 1
 * multi-query) of hs channels; the row strides of q and of k and v. */
struct tl_attention_shape {
  int b, t, nh, nkv, hs;
  int64_t ldq, ldkv;
  /* One block of a sequence split across ranks (context parallelism's
   * ring, tp/cp_attention.c): t query rows against tk key rows, not the
   * whole sequence. All zero for a whole causal sequence.
   *   tk           keys a sequence (0: t);
   *   q_pos, k_pos the positions of the first query and the first key:
   *                query i sees key j when k_pos + j <= q_pos + i;
   *   bq, bkv, bo  floats between sequences of q (and dq), of k and v (and
   *                dk, dv), of out and dout (0: t or tk rows);
   *   ldlse        floats between the lse rows of (b, h) and (b, h + 1)
   *                (0: t);
   *   merge        the forward folds this block's keys into out and lse,
   *                which hold the earlier blocks' result (a row with lse
   *                -inf has seen none); the backward takes out and lse of
   *                all blocks, and adds this block's share into dq, dk, dv. */
  int tk, q_pos, k_pos;
  int64_t bq, bkv, bo, ldlse;
  bool merge;
};

/* s with its zero block fields made explicit (tk, strides, ldlse). */
static inline struct tl_attention_shape tl_attention_resolve(const struct tl_attention_shape* s) {
  struct tl_attention_shape r = *s;
  if (!r.tk) r.tk = r.t;
  if (!r.bq) r.bq = (int64_t)r.t * r.ldq;
  if (!r.bkv) r.bkv = (int64_t)r.tk * r.ldkv;
  if (!r.bo) r.bo = (int64_t)r.t * r.nh * r.hs;
  if (!r.ldlse) r.ldlse = r.t;
  return r;
}

/* Rotary position embedding (RoPE) of heads of hs channels: channel i
 * pairs with i + hs/2 (transformers' rotate_half), rotated by position
 * p times inv_freq_i = theta^(-2i/hs). factor > 0 rescales the
 * frequencies as Llama 3.1 does (transformers' rope_type "llama3"):
 * wavelengths 2 pi / inv_freq above original_ctx / low_freq_factor are
 * divided by factor, those below original_ctx / high_freq_factor kept,
 * those between interpolated. */
struct tl_rope {
  int hs;
  float theta;
  float factor; /* 0: no scaling */
  float low_freq_factor, high_freq_factor;
  int original_ctx;
  /* a sequence split by context parallelism: the t rows are chunks
   * cp_rank and 2 cp - 1 - cp_rank of it (tl_cp_position); cp 0 or 1:
   * whole sequences */
  int cp, cp_rank;
};

#ifdef __CUDACC__
#define TL__HOST_DEVICE __host__ __device__
#else
#define TL__HOST_DEVICE
#endif

/* The position of row i of the t rows context-parallel rank `rank` of cp
 * holds of a sequence: the load-balanced causal split cuts the sequence in
 * 2 cp chunks of t/2 and gives rank r chunks r and 2 cp - 1 - r, so that
 * every rank has as much causal attention work. cp <= 1: i. */
static inline TL__HOST_DEVICE int tl_cp_position(int i, int t, int cp, int rank) {
  if (cp <= 1) return i;
  const int h = t / 2;
  return i < h ? rank * h + i : (2 * cp - 1 - rank) * h + (i - h);
}

/* inv_freq[i], i < hs/2, as transformers computes them in fp32 (kernels
 * of every backend rotate by these). */
void tl_rope_inv_freq(const struct tl_rope* r, float* inv_freq);

struct tl_kernel_ops {
  const char* name; /* "cpu", "cuda" */

  tl_status (*synchronize)(void* ctx);

  /* out (M,N) = op(a) op(b) [+ bias (N)], or out += ... when accumulate.
   * op(a) is (M,K): a is stored (M,K), or (K,M) when trans_a.
   * op(b) is (K,N): b is stored (K,N), or (N,K) when trans_b.
   * A linear layer y = x W^T + b with W (out,in) is trans_b = true. */
  tl_status (*matmul)(void* ctx, float* out, const float* a, const float* b, const float* bias,
                      int m, int n, int k, bool trans_a, bool trans_b, bool accumulate);
  /* matmul on strided matrices: out's rows ldo floats apart, a's stored
   * rows lda apart and b's ldb apart (matmul is ld = the stored row
   * length); everything else as matmul. A piece of a matrix's rows or
   * columns is read and written in place, with no packed copy. */
  tl_status (*matmul_ld)(void* ctx, float* out, int ldo, const float* a, int lda, const float* b,
                         int ldb, const float* bias, int m, int n, int k, bool trans_a,
                         bool trans_b, bool accumulate);
  /* da, db (stored shapes) += gradients of sum(dout * out); dbias (N) += column sums of dout. */
  tl_status (*matmul_backward)(void* ctx, float* da, float* db, float* dbias, const float* dout,
                               const float* a, const float* b, int m, int n, int k, bool trans_a,
                               bool trans_b);

  /* out (N,C) = (inp - mean) * rstd * weight + bias; also writes mean (N), rstd (N). */
  tl_status (*layernorm_forward)(void* ctx, float* out, float* mean, float* rstd, const float* inp,
                                 const float* weight, const float* bias, int n, int c);
  tl_status (*layernorm_backward)(void* ctx, float* dinp, float* dweight, float* dbias,
                                  const float* dout, const float* inp, const float* weight,
                                  const float* mean, const float* rstd, int n, int c);

  /* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); n elements. */
  tl_status (*gelu_forward)(void* ctx, float* out, const float* inp, int64_t n);
  tl_status (*gelu_backward)(void* ctx, float* dinp, const float* inp, const float* dout,
                             int64_t n);

  /* Causal self-attention without the T x T probabilities (flash
   * attention's algorithm), multi-head or grouped-query (struct
   * tl_attention_shape). q (B,T,NH,hs), k and v (B,T,NKV,hs), each row
   * `ldq` or `ldkv` floats from the next (a fused [Q | K | V] row of 3C
   * is ldq = ldkv = 3C with k = q + C, v = q + 2C) -> out (B,T,NH*hs),
   * dense; lse (B,NH,T) keeps each query row's log-sum-exp of its scores,
   * which with q, k, v and out is all the backward needs. Query head j
   * reads key/value head j / (NH / NKV); scores are scaled by 1/sqrt(hs).
   * The backward's dq, dk, dv have q's, k's and v's strides (they may be
   * one fused buffer too). */
  tl_status (*attention_forward)(void* ctx, float* out, float* lse, const float* q, const float* k,
                                 const float* v, const struct tl_attention_shape* s);
  tl_status (*attention_backward)(void* ctx, float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v, const float* out,
                                  const float* lse, const struct tl_attention_shape* s);

  /* out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens are int32 in [0, V).
   * wte holds rows [row_begin, row_begin + rows) of the vocabulary (a
   * tensor-parallel shard; the whole table is row_begin 0, rows V): a token
   * outside them contributes zeros. wpe may be NULL (no position term).
   * accumulate: out += the same (a piece of the table's rows added in
   * place, the tokens outside it left as they are). */
  tl_status (*embedding_forward)(void* ctx, float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int b, int t, int c, int row_begin, int rows,
                                 bool accumulate);
  tl_status (*embedding_backward)(void* ctx, float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int b, int t, int c, int row_begin,
                                  int rows);

  /* Fused softmax + cross-entropy over logits (N,Vp) whose first V columns are
   * real: losses (N) = -log softmax(logits[i, :V])[targets[i]]. When dlosses
   * (N) is not NULL, also WRITES dlogits (N,Vp) = (softmax - onehot) *
   * dlosses[i], zero in the padded columns — in the same pass. */
  tl_status (*crossentropy_forward_backward)(void* ctx, float* losses, float* dlogits,
                                             const float* logits, const int32_t* targets,
                                             const float* dlosses, int n, int v, int vp);

  /* Vocabulary-parallel cross-entropy. This rank holds columns [v0, v0 +
   * cols) of the padded vocabulary's logits (N, cols); global columns >= v
   * are padding. stats (3, N) hold per row: the max, the sum of
   * exponentials and the target's logit, each combined over the group
   * between phases by the caller:
   *   phase 0: stats[0] = max over this rank's real columns (-FLT_MAX if none);
   *   phase 1: stats[1] = sum of exp(logit - stats[0]) over them, stats[2] =
   *            the target's logit when this rank holds it, else 0;
   *   phase 2: losses = log(stats[1]) + stats[0] - stats[2].
   * The backward WRITES dlogits (N, cols) = (exp(logit - max) / sum -
   * onehot) * dlosses[i], zero in padded columns. */
  tl_status (*xent_shard_forward)(void* ctx, float* losses, float* stats, const float* logits,
                                  const int32_t* targets, int n, int cols, int v0, int v,
                                  int phase);
  tl_status (*xent_shard_backward)(void* ctx, float* dlogits, const float* logits,
                                   const int32_t* targets, const float* stats, const float* dlosses,
                                   int n, int cols, int v0, int v);

  /* out = a + b (n); backward: da += dout, db += dout. */
  tl_status (*add_forward)(void* ctx, float* out, const float* a, const float* b, int64_t n);
  tl_status (*add_backward)(void* ctx, float* da, float* db, const float* dout, int64_t n);

  /* out = alpha * inp (n); backward: dinp += alpha * dout. out may be inp. */
  tl_status (*scale_forward)(void* ctx, float* out, const float* inp, float alpha, int64_t n);
  tl_status (*scale_backward)(void* ctx, float* dinp, const float* dout, float alpha, int64_t n);

  /* out[0] = sum(inp^2) (one float): the squared global gradient norm.
   * Accumulates in double, in fixed chunks on the CPU and a fixed-order tree
   * on the GPU, so the result is deterministic. */
  tl_status (*sumsq)(void* ctx, float* out, const float* inp, int64_t n);

  /* One AdamW step on n parameters, in place (decoupled weight decay, bias
   * correction; step counts from 1), the gradients read scaled (clipping,
   * in the same pass: g = grads[i] * grad_scale, the float product a
   * separate scaling pass would have stored):
   *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
   *   p -= lr * (m/(1-b1^step) / (sqrt(v/(1-b2^step)) + eps) + wd * p) */
  tl_status (*adamw)(void* ctx, float* params, const float* grads, float grad_scale, float* m,
                     float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int step);

  /* The deterministic mode's exact sums (parallel.deterministic): integers
   * add in any order to the same result. NULL where a backend lacks them.
   *   fixed_add:      acc[i] += round(x[i] * 2^TL_FIXED_SHIFT), then x[i] = 0;
   *                   TL_ERR_INVALID when |x[i]| >= 2^(62 - TL_FIXED_SHIFT)
   *                   or x[i] is not finite
   *   fixed_to_float: out[i] = acc[i] * 2^-TL_FIXED_SHIFT
   *   sumsq_fixed:    out[0] (high 64 bits), out[1] (low 64 bits) = the sum
   *                   of round(x[i]^2 * 2^TL_FIXED_SQ_SHIFT), a 128-bit
   *                   integer; TL_ERR_INVALID past 2^126 */
  tl_status (*fixed_add)(void* ctx, int64_t* acc, float* x, int64_t n);
  tl_status (*fixed_to_float)(void* ctx, float* out, const int64_t* acc, int64_t n);
  tl_status (*sumsq_fixed)(void* ctx, int64_t* out, const float* x, int64_t n);

  /* bf16 storage (train.precision "bf16"): the executor keeps activations
   * in bf16 and hands kernels fp32 copies (graph/exec.h).
   *   to_bf16:    out[i] = x[i] rounded to the nearest bf16, ties to even
   *               (core/dtype.h's tl_f32_to_bf16, NaN kept a NaN)
   *   from_bf16:  out[i] = x[i] widened to fp32 (exact)
   *   round_bf16: out[i] = x[i] rounded to bf16 precision, kept in fp32 (how
   *               an fp32 master weight is read by bf16 arithmetic); out may
   *               be x */
  tl_status (*to_bf16)(void* ctx, uint16_t* out, const float* x, int64_t n);
  tl_status (*from_bf16)(void* ctx, float* out, const uint16_t* x, int64_t n);
  tl_status (*round_bf16)(void* ctx, float* out, const float* x, int64_t n);

  /* matmul and matmul_backward (same arguments and semantics) for operands
   * that are bf16 numbers held in fp32 — a bf16 graph's copies, where every
   * float input of the node is stored in bf16 or is a parameter read
   * rounded to bf16: a backend may multiply them in bf16 with fp32
   * accumulation (tensor cores), where every product is exact and only the
   * order of the sums can differ from matmul's. NULL: the graph calls
   * matmul / matmul_backward (the CPU's). */
  tl_status (*matmul_bf16)(void* ctx, float* out, const float* a, const float* b, const float* bias,
                           int m, int n, int k, bool trans_a, bool trans_b, bool accumulate);
  tl_status (*matmul_backward_bf16)(void* ctx, float* da, float* db, float* dbias,
                                    const float* dout, const float* a, const float* b, int m, int n,
                                    int k, bool trans_a, bool trans_b);
  /* matmul_ld for such operands (NULL where matmul_bf16 is: matmul_ld) */
  tl_status (*matmul_ld_bf16)(void* ctx, float* out, int ldo, const float* a, int lda,
                              const float* b, int ldb, const float* bias, int m, int n, int k,
                              bool trans_a, bool trans_b, bool accumulate);

  /* RMSNorm as transformers' LlamaRMSNorm computes it: rstd (N) = 1 /
   * sqrt(mean over the row of x^2 + eps), out (N,C) = (x * rstd) * weight
   * (C); rstd is kept for the backward. */
  tl_status (*rmsnorm_forward)(void* ctx, float* out, float* rstd, const float* inp,
                               const float* weight, int n, int c, float eps);
  tl_status (*rmsnorm_backward)(void* ctx, float* dinp, float* dweight, const float* dout,
                                const float* inp, const float* weight, const float* rstd, int n,
                                int c);

  /* RoPE (struct tl_rope) on x (B,T,heads,hs), dense: out at position t
   * is x rotated by t inv_freq, per head. The backward rotates back:
   * dinp += R(-t) dout. */
  tl_status (*rope_forward)(void* ctx, float* out, const float* inp, const struct tl_rope* r, int b,
                            int t, int heads);
  tl_status (*rope_backward)(void* ctx, float* dinp, const float* dout, const struct tl_rope* r,
                             int b, int t, int heads);

  /* SwiGLU's gate: out (n) = silu(gate) * up, silu(g) = g / (1 + e^-g);
   * backward: dgate += dout * up * silu'(gate), dup += dout * silu(gate). */
  tl_status (*swiglu_forward)(void* ctx, float* out, const float* gate, const float* up, int64_t n);
  tl_status (*swiglu_backward)(void* ctx, float* dgate, float* dup, const float* dout,
                               const float* gate, const float* up, int64_t n);

  /* dst (rows, cols), rows ldd floats apart, = src (rows, cols), rows lds
   * apart; accumulate: dst += src. Packs strided columns (a fused
   * [Q | K | V] row's K and V) into a dense block and back. */
  tl_status (*copy_2d)(void* ctx, float* dst, int64_t ldd, const float* src, int64_t lds,
                       int64_t rows, int64_t cols, bool accumulate);
};

/* Fixed-point units of the exact sums: gradients in 2^-48 (|g| < 2^14,
 * exact for |g| >= 2^-25), squares in 2^-64. */
#define TL_FIXED_SHIFT 48
#define TL_FIXED_SQ_SHIFT 64

/* The backward of matmul expressed as three matmuls and a column sum; shared
 * by backends whose GEMM already handles every transpose. `colsum_add`
 * adds the column sums of x (rows, cols) into out (cols). */
tl_status tl__matmul_backward_by_matmul(
    const struct tl_kernel_ops* ops, void* ctx, float* da, float* db, float* dbias,
    const float* dout, const float* a, const float* b, int m, int n, int k, bool trans_a,
    bool trans_b,
    tl_status (*colsum_add)(void* ctx, float* out, const float* x, int rows, int cols));

#ifdef __cplusplus
}
#endif

#endif
