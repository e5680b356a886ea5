/* backend.c — emulated GPUs (emul.h): the CPU kernel table behind a queue.
 *
 * Each entry of tl_emul_kernel_ops records its arguments (the host structs
 * a kernel takes by pointer copied, as a launch copies its parameters) and
 * returns; the record runs the CPU kernel when something waits for it. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/env.h"
#include "kernels/cpu/cpu.h"
#include "kernels/emul/emul.h"

/* ---- the device's queue ---- */

enum { LEGACY = 0 }; /* the legacy default stream; compute streams are 1, 2, ... */

struct item {
  struct item* next;
  uint64_t seq; /* 1, 2, ... in issue order */
  int stream;
  void (*run)(struct item*);
  void* host; /* a copy from the host: the staged source, freed after */
  _Alignas(16) unsigned char args[];
};

struct emul_ctx {
  int stream;
  void* cpu; /* the CPU backend's context */
};

static struct {
  struct item *head, *tail;
  int queued;
  int streams;   /* compute streams made */
  uint64_t seq;  /* items issued */
  tl_status err; /* the first queued item that failed, reported at the next wait */
  char msg[512];
} g_q;

static void note(tl_status st) {
  if (st == TL_OK || g_q.err != TL_OK) return;
  g_q.err = st;
  snprintf(g_q.msg, sizeof g_q.msg, "%s", tl_last_error_message());
}

/* Runs the queue's first n items. */
static void run_first(int n) {
  while (n-- > 0 && g_q.head) {
    struct item* it = g_q.head;
    g_q.head = it->next;
    if (!g_q.head) g_q.tail = NULL;
    g_q.queued--;
    it->run(it);
    free(it->host);
    free(it);
  }
}

/* The first error a queued item met, once: a GPU's sticky error at the
 * next wait. */
static tl_status reported(void) {
  if (g_q.err == TL_OK) return TL_OK;
  tl_status st = g_q.err;
  g_q.err = TL_OK;
  return TL_ERRF(st, "on the emulated GPU: %s", g_q.msg);
}

/* Runs everything queued (a wait on every stream of the device). */
static tl_status run_all(void) {
  run_first(g_q.queued);
  return reported();
}

/* Runs the queue through `stream`'s last item: what waiting for that
 * stream waits for (earlier legacy items included, later ones not). */
static tl_status run_stream(int stream) {
  int n = 0, i = 0;
  for (const struct item* it = g_q.head; it; it = it->next) {
    i++;
    if (it->stream == stream) n = i;
  }
  run_first(n);
  return reported();
}

static struct item* new_item(int stream, void (*run)(struct item*), size_t args) {
  struct item* it = calloc(1, sizeof *it + args);
  if (!it) return NULL;
  it->stream = stream;
  it->run = run;
  return it;
}

static tl_status enqueue(struct item* it) {
  if (!it) return TL_ERRF(TL_ERR_NOMEM, "out of host memory queueing an emulated GPU's work");
  it->seq = ++g_q.seq;
  if (g_q.tail)
    g_q.tail->next = it;
  else
    g_q.head = it;
  g_q.tail = it;
  g_q.queued++;
  return TL_OK;
}

int tl_emul_queued(void) {
  return g_q.queued;
}

/* ---- the kernels ---- */

/* FOR_EACH(m, (type, name), ...) applies m to each (type, name) pair. */
#define TL__FE_1(m, x) m x
#define TL__FE_2(m, x, ...) m x TL__FE_1(m, __VA_ARGS__)
#define TL__FE_3(m, x, ...) m x TL__FE_2(m, __VA_ARGS__)
#define TL__FE_4(m, x, ...) m x TL__FE_3(m, __VA_ARGS__)
#define TL__FE_5(m, x, ...) m x TL__FE_4(m, __VA_ARGS__)
#define TL__FE_6(m, x, ...) m x TL__FE_5(m, __VA_ARGS__)
#define TL__FE_7(m, x, ...) m x TL__FE_6(m, __VA_ARGS__)
#define TL__FE_8(m, x, ...) m x TL__FE_7(m, __VA_ARGS__)
#define TL__FE_9(m, x, ...) m x TL__FE_8(m, __VA_ARGS__)
#define TL__FE_10(m, x, ...) m x TL__FE_9(m, __VA_ARGS__)
#define TL__FE_11(m, x, ...) m x TL__FE_10(m, __VA_ARGS__)
#define TL__FE_12(m, x, ...) m x TL__FE_11(m, __VA_ARGS__)
#define TL__FE_13(m, x, ...) m x TL__FE_12(m, __VA_ARGS__)
#define TL__FE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, N, ...) N
#define FOR_EACH(m, ...)                                                                   \
  TL__FE_PICK(__VA_ARGS__, TL__FE_13, TL__FE_12, TL__FE_11, TL__FE_10, TL__FE_9, TL__FE_8, \
              TL__FE_7, TL__FE_6, TL__FE_5, TL__FE_4, TL__FE_3, TL__FE_2, TL__FE_1, )      \
  (m, __VA_ARGS__)

#define FIELD(type, name) type name;
#define PARAM(type, name) , type name
#define STORE(type, name) rec_->name = name;
#define ARG(type, name) , rec_->name

/* A queued kernel: its argument record, what runs it (fn) and the table's
 * entry that queues it. */
#define QUEUED_BY(op, fn, ...)                                                     \
  struct op##_args {                                                               \
    void* cpu;                                                                     \
    FOR_EACH(FIELD, __VA_ARGS__)                                                   \
  };                                                                               \
  static void run_##op(struct item* it_) {                                         \
    const struct op##_args* rec_ = (const struct op##_args*)(void*)it_->args;      \
    note(fn(rec_->cpu FOR_EACH(ARG, __VA_ARGS__)));                                \
  }                                                                                \
  static tl_status q_##op(void* ctx FOR_EACH(PARAM, __VA_ARGS__)) {                \
    const struct emul_ctx* ctx_ = (const struct emul_ctx*)ctx;                     \
    struct item* it_ = new_item(ctx_->stream, run_##op, sizeof(struct op##_args)); \
    if (!it_) return enqueue(NULL);                                                \
    struct op##_args* rec_ = (struct op##_args*)(void*)it_->args;                  \
    rec_->cpu = ctx_->cpu;                                                         \
    FOR_EACH(STORE, __VA_ARGS__)                                                   \
    return enqueue(it_);                                                           \
  }

#define QUEUED(op, ...) QUEUED_BY(op, tl_cpu_kernel_ops.op, __VA_ARGS__)

#define F(name) (float*, name)
#define CF(name) (const float*, name)
#define I(name) (int, name)
#define I64(name) (int64_t, name)
#define B(name) (bool, name)
#define FL(name) (float, name)
#define TOK(name) (const int32_t*, name)

QUEUED(matmul, F(out), CF(a), CF(b), CF(bias), I(m), I(n), I(k), B(trans_a), B(trans_b),
       B(accumulate))
QUEUED(matmul_ld, F(out), I(ldo), CF(a), I(lda), CF(b), I(ldb), CF(bias), I(m), I(n), I(k),
       B(trans_a), B(trans_b), B(accumulate))
QUEUED(matmul_backward, F(da), F(db), F(dbias), CF(dout), CF(a), CF(b), I(m), I(n), I(k),
       B(trans_a), B(trans_b))
/* bf16 operands: the GPU multiplies them on tensor cores, here the CPU's
 * matmul does (every product of two bf16 numbers is exact in fp32) */
QUEUED_BY(matmul_bf16, tl_cpu_kernel_ops.matmul, F(out), CF(a), CF(b), CF(bias), I(m), I(n), I(k),
          B(trans_a), B(trans_b), B(accumulate))
QUEUED_BY(matmul_backward_bf16, tl_cpu_kernel_ops.matmul_backward, F(da), F(db), F(dbias), CF(dout),
          CF(a), CF(b), I(m), I(n), I(k), B(trans_a), B(trans_b))
QUEUED_BY(matmul_ld_bf16, tl_cpu_kernel_ops.matmul_ld, F(out), I(ldo), CF(a), I(lda), CF(b), I(ldb),
          CF(bias), I(m), I(n), I(k), B(trans_a), B(trans_b), B(accumulate))
QUEUED(layernorm_forward, F(out), F(mean), F(rstd), CF(inp), CF(weight), CF(bias), I(n), I(c))
QUEUED(layernorm_backward, F(dinp), F(dweight), F(dbias), CF(dout), CF(inp), CF(weight), CF(mean),
       CF(rstd), I(n), I(c))
QUEUED(gelu_forward, F(out), CF(inp), I64(n))
QUEUED(gelu_backward, F(dinp), CF(inp), CF(dout), I64(n))
QUEUED(embedding_forward, F(out), TOK(tokens), CF(wte), CF(wpe), I(b), I(t), I(c), I(row_begin),
       I(rows), B(accumulate))
QUEUED(embedding_backward, F(dwte), F(dwpe), CF(dout), TOK(tokens), I(b), I(t), I(c), I(row_begin),
       I(rows))
QUEUED(crossentropy_forward_backward, F(losses), F(dlogits), CF(logits), TOK(targets), CF(dlosses),
       I(n), I(v), I(vp))
QUEUED(xent_shard_forward, F(losses), F(stats), CF(logits), TOK(targets), I(n), I(cols), I(v0),
       I(v), I(phase))
QUEUED(xent_shard_backward, F(dlogits), CF(logits), TOK(targets), CF(stats), CF(dlosses), I(n),
       I(cols), I(v0), I(v))
QUEUED(add_forward, F(out), CF(a), CF(b), I64(n))
QUEUED(add_backward, F(da), F(db), CF(dout), I64(n))
QUEUED(scale_forward, F(out), CF(inp), FL(alpha), I64(n))
QUEUED(scale_backward, F(dinp), CF(dout), FL(alpha), I64(n))
QUEUED(sumsq, F(out), CF(inp), I64(n))
QUEUED(adamw, F(params), CF(grads), FL(grad_scale), F(m), F(v), I64(n), FL(lr), FL(beta1),
       FL(beta2), FL(eps), FL(weight_decay), I(step))
QUEUED(to_bf16, (uint16_t*, out), CF(x), I64(n))
QUEUED(from_bf16, F(out), (const uint16_t*, x), I64(n))
QUEUED(round_bf16, F(out), CF(x), I64(n))
QUEUED(rmsnorm_forward, F(out), F(rstd), CF(inp), CF(weight), I(n), I(c), FL(eps))
QUEUED(rmsnorm_backward, F(dinp), F(dweight), CF(dout), CF(inp), CF(weight), CF(rstd), I(n), I(c))
QUEUED(swiglu_forward, F(out), CF(gate), CF(up), I64(n))
QUEUED(swiglu_backward, F(dgate), F(dup), CF(dout), CF(gate), CF(up), I64(n))
QUEUED(copy_2d, F(dst), I64(ldd), CF(src), I64(lds), I64(rows), I64(cols), B(accumulate))

/* The kernels whose arguments include a host struct by pointer: queued
 * with a copy of it, passed by value (the shape or the rotation). */
struct attention_shape_arg {
  struct tl_attention_shape s;
};
struct rope_arg {
  struct tl_rope r;
};
#define SHAPE(name) (struct attention_shape_arg, name)
#define ROPE(name) (struct rope_arg, name)

/* The CPU table's entries the by-value records call. */
static tl_status attention_forward_cpu(void* cpu, float* out, float* lse, const float* q,
                                       const float* k, const float* v,
                                       struct attention_shape_arg s) {
  return tl_cpu_kernel_ops.attention_forward(cpu, out, lse, q, k, v, &s.s);
}
static tl_status attention_backward_cpu(void* cpu, float* dq, float* dk, float* dv,
                                        const float* dout, const float* q, const float* k,
                                        const float* v, const float* out, const float* lse,
                                        struct attention_shape_arg s) {
  return tl_cpu_kernel_ops.attention_backward(cpu, dq, dk, dv, dout, q, k, v, out, lse, &s.s);
}
static tl_status rope_forward_cpu(void* cpu, float* out, const float* inp, struct rope_arg r, int b,
                                  int t, int heads) {
  return tl_cpu_kernel_ops.rope_forward(cpu, out, inp, &r.r, b, t, heads);
}
static tl_status rope_backward_cpu(void* cpu, float* dinp, const float* dout, struct rope_arg r,
                                   int b, int t, int heads) {
  return tl_cpu_kernel_ops.rope_backward(cpu, dinp, dout, &r.r, b, t, heads);
}

QUEUED_BY(attention_forward_v, attention_forward_cpu, F(out), F(lse), CF(q), CF(k), CF(v), SHAPE(s))
QUEUED_BY(attention_backward_v, attention_backward_cpu, F(dq), F(dk), F(dv), CF(dout), CF(q), CF(k),
          CF(v), CF(out), CF(lse), SHAPE(s))
QUEUED_BY(rope_forward_v, rope_forward_cpu, F(out), CF(inp), ROPE(r), I(b), I(t), I(heads))
QUEUED_BY(rope_backward_v, rope_backward_cpu, F(dinp), CF(dout), ROPE(r), I(b), I(t), I(heads))

static tl_status q_attention_forward(void* ctx, float* out, float* lse, const float* q,
                                     const float* k, const float* v,
                                     const struct tl_attention_shape* s) {
  return q_attention_forward_v(ctx, out, lse, q, k, v, (struct attention_shape_arg){*s});
}
static tl_status q_attention_backward(void* ctx, float* dq, float* dk, float* dv, const float* dout,
                                      const float* q, const float* k, const float* v,
                                      const float* out, const float* lse,
                                      const struct tl_attention_shape* s) {
  return q_attention_backward_v(ctx, dq, dk, dv, dout, q, k, v, out, lse,
                                (struct attention_shape_arg){*s});
}
static tl_status q_rope_forward(void* ctx, float* out, const float* inp, const struct tl_rope* r,
                                int b, int t, int heads) {
  return q_rope_forward_v(ctx, out, inp, (struct rope_arg){*r}, b, t, heads);
}
static tl_status q_rope_backward(void* ctx, float* dinp, const float* dout, const struct tl_rope* r,
                                 int b, int t, int heads) {
  return q_rope_backward_v(ctx, dinp, dout, (struct rope_arg){*r}, b, t, heads);
}

static tl_status emul_synchronize(void* ctx) {
  return run_stream(((const struct emul_ctx*)ctx)->stream);
}

/* ---- the device's memory ---- */

static tl_status e_alloc(int index, size_t bytes, void** out) {
  (void)index;
  *out = NULL;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = aligned_alloc(64, rounded ? rounded : 64);
  if (!p) return TL_ERRF(TL_ERR_NOMEM, "out of memory on the emulated GPU (%zu bytes)", bytes);
  *out = p;
  return TL_OK;
}

static void e_free(int index, void* ptr) {
  (void)index;
  run_first(g_q.queued); /* cudaFree waits for the device (an error stays for the next wait) */
  free(ptr);
}

struct copy_args {
  void* dst;
  const void* src; /* NULL: zeros */
  size_t bytes;
};

static void run_copy(struct item* it) {
  const struct copy_args* a = (const struct copy_args*)(void*)it->args;
  if (a->src)
    memmove(a->dst, it->host ? it->host : a->src, a->bytes);
  else
    memset(a->dst, 0, a->bytes);
}

/* A copy or zeroing on the legacy stream, queued as the CUDA backend
 * leaves it: a device-to-device cudaMemcpy and cudaMemset return at once;
 * a copy from the host of up to STAGE_BYTES is staged (in pinned memory
 * there) and returns at once, a larger one from pageable memory waits for
 * every earlier work first (kernels/cuda/backend.cu). */
#define STAGE_BYTES ((size_t)1 << 20)

static tl_status legacy_copy(void* dst, const void* src, size_t bytes, bool from_host) {
  if (from_host && bytes > STAGE_BYTES) TL_CHECK(run_all());
  struct item* it = new_item(LEGACY, run_copy, sizeof(struct copy_args));
  if (!it) return enqueue(NULL);
  struct copy_args* a = (struct copy_args*)(void*)it->args;
  a->dst = dst, a->src = src, a->bytes = bytes;
  if (from_host) {
    it->host = malloc(bytes);
    if (!it->host) {
      free(it);
      return enqueue(NULL);
    }
    memcpy(it->host, src, bytes);
  }
  return enqueue(it);
}

static tl_status e_to_host(int index, void* dst, const void* src, size_t bytes) {
  (void)index;
  TL_CHECK(run_all()); /* cudaMemcpy to the host waits for every blocking stream */
  memmove(dst, src, bytes);
  return TL_OK;
}

static tl_status e_from_host(int index, void* dst, const void* src, size_t bytes) {
  (void)index;
  return legacy_copy(dst, src, bytes, true);
}

static tl_status e_on_device(int index, void* dst, const void* src, size_t bytes) {
  (void)index;
  return legacy_copy(dst, src, bytes, false);
}

static tl_status e_zero(int index, void* dst, size_t bytes) {
  (void)index;
  return legacy_copy(dst, NULL, bytes, false);
}

static uint64_t e_mark(int index) {
  (void)index;
  return g_q.seq;
}

/* What a GPU group's operation waits for before it runs: the items issued
 * before it (the CUDA groups' event on the legacy stream, which follows
 * every blocking stream). Under TRELLIS_FAULT=copies_unordered only through
 * the last compute kernel among them (an event on the compute stream: the
 * copies and zeros queued after it on the legacy stream stay behind), and
 * under collectives_unordered none. */
static tl_status e_run_to(int index, uint64_t mark) {
  (void)index;
  if (tl_fault_on(TL_FAULT_COLLECTIVES_UNORDERED)) return TL_OK;
  const bool compute_only = tl_fault_on(TL_FAULT_COPIES_UNORDERED);
  int n = 0, i = 0;
  for (const struct item* it = g_q.head; it && it->seq <= mark; it = it->next) {
    i++;
    if (!compute_only || it->stream != LEGACY) n = i;
  }
  run_first(n);
  return reported();
}

static const struct tl_memory_ops k_emul_memory = {
    e_alloc, e_free, e_to_host, e_from_host, e_on_device, e_zero, e_mark, e_run_to,
};

/* ---- the backend ---- */

tl_status tl_emul_backend_init(int index, void** ctx) {
  *ctx = NULL;
  if (index < 0 || index >= TL_EMUL_DEVICES)
    return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d is not one of the %d emulated GPUs", index,
                   TL_EMUL_DEVICES);
  struct emul_ctx* c = calloc(1, sizeof *c);
  if (!c) return TL_ERRF(TL_ERR_NOMEM, "out of host memory for an emulated GPU's stream");
  tl_status st = tl_cpu_backend_init(&c->cpu);
  if (st != TL_OK) {
    free(c);
    return st;
  }
  c->stream = ++g_q.streams;
  tl_memory_register(TL_DEVICE_CUDA, &k_emul_memory);
  *ctx = c;
  return TL_OK;
}

void tl_emul_backend_free(void* ctx) {
  struct emul_ctx* c = (struct emul_ctx*)ctx;
  if (!c) return;
  (void)run_stream(c->stream); /* cudaStreamDestroy lets the stream's work finish */
  tl_cpu_backend_free(c->cpu);
  free(c);
}

const struct tl_kernel_ops tl_emul_kernel_ops = {
    .name = "cuda (emulated)",
    .synchronize = emul_synchronize,
    .matmul = q_matmul,
    .matmul_ld = q_matmul_ld,
    .matmul_backward = q_matmul_backward,
    .layernorm_forward = q_layernorm_forward,
    .layernorm_backward = q_layernorm_backward,
    .gelu_forward = q_gelu_forward,
    .gelu_backward = q_gelu_backward,
    .attention_forward = q_attention_forward,
    .attention_backward = q_attention_backward,
    .embedding_forward = q_embedding_forward,
    .embedding_backward = q_embedding_backward,
    .crossentropy_forward_backward = q_crossentropy_forward_backward,
    .xent_shard_forward = q_xent_shard_forward,
    .xent_shard_backward = q_xent_shard_backward,
    .add_forward = q_add_forward,
    .add_backward = q_add_backward,
    .scale_forward = q_scale_forward,
    .scale_backward = q_scale_backward,
    .sumsq = q_sumsq,
    .adamw = q_adamw,
    /* fixed_add, fixed_to_float, sumsq_fixed: NULL, as the CUDA table's
     * (the deterministic mode runs on the CPU backend only) */
    .to_bf16 = q_to_bf16,
    .from_bf16 = q_from_bf16,
    .round_bf16 = q_round_bf16,
    .matmul_bf16 = q_matmul_bf16,
    .matmul_backward_bf16 = q_matmul_backward_bf16,
    .matmul_ld_bf16 = q_matmul_ld_bf16,
    .rmsnorm_forward = q_rmsnorm_forward,
    .rmsnorm_backward = q_rmsnorm_backward,
    .rope_forward = q_rope_forward,
    .rope_backward = q_rope_backward,
    .swiglu_forward = q_swiglu_forward,
    .swiglu_backward = q_swiglu_backward,
    .copy_2d = q_copy_2d,
};
