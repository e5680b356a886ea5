/* model.c — parameter layouts, initialisation and graph builders for gpt,
 * llama and mlp. */
#include "graph/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/rng.h"
#include "graph/op.h"

static void add_tensor(tl_model* m, const char* name, int n_dims, const int64_t* shape, bool decay,
                       tl_init_kind init, float std) {
  struct tl_param_tensor* t = &m->tensors[m->n_tensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->n_dims = n_dims;
  memcpy(t->shape, shape, sizeof(int64_t) * (size_t)n_dims);
  t->numel = 1;
  for (int i = 0; i < n_dims; i++) t->numel *= shape[i];
  t->offset = m->n_params;
  t->decay = decay;
  t->init = init;
  t->init_std = std;
  t->init_rows = shape[0];
  m->n_params += t->numel;
}

static tl_status gpt_layout(tl_model* m) {
  const struct tl_model_config* c = &m->cfg;
  int64_t L = c->n_layers, C = c->n_embd, Vp = m->padded_vocab, T = c->max_seq_len;
  if (L < 1 || C < 1 || c->n_heads < 1 || T < 1)
    return TL_ERRF(
        TL_ERR_CONFIG,
        "gpt needs n_layers, n_heads, n_embd and max_seq_len >= 1 (got %lld, %d, %lld, %lld)",
        (long long)L, c->n_heads, (long long)C, (long long)T);
  if (C % c->n_heads != 0)
    return TL_ERRF(TL_ERR_CONFIG, "model.n_embd=%lld is not divisible by model.n_heads=%d",
                   (long long)C, c->n_heads);
  const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
  /* llm.c's order; shapes stacked over layers */
  add_tensor(m, "wte", 2, (int64_t[]){Vp, C}, true, TL_INIT_NORMAL, std);
  m->tensors[0].init_rows = m->vocab; /* padded rows stay zero, as in llm.c's files */
  add_tensor(m, "wpe", 2, (int64_t[]){T, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "ln1w", 2, (int64_t[]){L, C}, false, TL_INIT_ONES, 0);
  add_tensor(m, "ln1b", 2, (int64_t[]){L, C}, false, TL_INIT_ZEROS, 0);
  add_tensor(m, "qkvw", 3, (int64_t[]){L, 3 * C, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "qkvb", 2, (int64_t[]){L, 3 * C}, false, TL_INIT_ZEROS, 0);
  add_tensor(m, "attprojw", 3, (int64_t[]){L, C, C}, true, TL_INIT_NORMAL, proj_std);
  add_tensor(m, "attprojb", 2, (int64_t[]){L, C}, false, TL_INIT_ZEROS, 0);
  add_tensor(m, "ln2w", 2, (int64_t[]){L, C}, false, TL_INIT_ONES, 0);
  add_tensor(m, "ln2b", 2, (int64_t[]){L, C}, false, TL_INIT_ZEROS, 0);
  add_tensor(m, "fcw", 3, (int64_t[]){L, 4 * C, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "fcb", 2, (int64_t[]){L, 4 * C}, false, TL_INIT_ZEROS, 0);
  add_tensor(m, "fcprojw", 3, (int64_t[]){L, C, 4 * C}, true, TL_INIT_NORMAL, proj_std);
  add_tensor(m, "fcprojb", 2, (int64_t[]){L, C}, false, TL_INIT_ZEROS, 0);
  add_tensor(m, "lnfw", 1, (int64_t[]){C}, false, TL_INIT_ONES, 0);
  add_tensor(m, "lnfb", 1, (int64_t[]){C}, false, TL_INIT_ZEROS, 0);
  return TL_OK;
}

/* The Llama: transformers' LlamaForCausalLM's tensors, each per-layer one
 * stacked over layers; linear weights (out, in) as Hugging Face stores them,
 * so a checkpoint's tensors load as they are (q and k too: RoPE pairs
 * channel i with i + hs/2, transformers' layout). Initialised as
 * transformers initialises them: normal(0, 0.02) matrices, norms at one. */
static tl_status llama_layout(tl_model* m) {
  const struct tl_model_config* c = &m->cfg;
  int64_t L = c->n_layers, C = c->n_embd, Vp = m->padded_vocab;
  const int nh = c->n_heads, nkv = tl_config_kv_heads(c);
  if (L < 1 || C < 1 || nh < 1 || c->max_seq_len < 1)
    return TL_ERRF(
        TL_ERR_CONFIG,
        "llama needs n_layers, n_heads, n_embd and max_seq_len >= 1 (got %lld, %d, %lld, %d)",
        (long long)L, nh, (long long)C, c->max_seq_len);
  if (C % nh != 0 || (C / nh) % 2 != 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "model.n_embd=%lld over model.n_heads=%d: expected heads of an even size",
                   (long long)C, nh);
  if (nkv < 1 || nh % nkv != 0)
    return TL_ERRF(TL_ERR_CONFIG, "model.n_kv_heads=%d does not divide model.n_heads=%d", nkv, nh);
  const int64_t hs = C / nh, kv = hs * nkv, F = tl_config_ffn_hidden(c);
  const float std = 0.02f;
  add_tensor(m, "wte", 2, (int64_t[]){Vp, C}, true, TL_INIT_NORMAL, std);
  m->tensors[0].init_rows = m->vocab; /* padded rows stay zero */
  add_tensor(m, "rms1w", 2, (int64_t[]){L, C}, false, TL_INIT_ONES, 0);
  add_tensor(m, "wq", 3, (int64_t[]){L, C, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "wk", 3, (int64_t[]){L, kv, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "wv", 3, (int64_t[]){L, kv, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "wo", 3, (int64_t[]){L, C, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "rms2w", 2, (int64_t[]){L, C}, false, TL_INIT_ONES, 0);
  add_tensor(m, "wgate", 3, (int64_t[]){L, F, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "wup", 3, (int64_t[]){L, F, C}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "wdown", 3, (int64_t[]){L, C, F}, true, TL_INIT_NORMAL, std);
  add_tensor(m, "rmsfw", 1, (int64_t[]){C}, false, TL_INIT_ONES, 0);
  if (!c->tie_embeddings) {
    add_tensor(m, "headw", 2, (int64_t[]){Vp, C}, true, TL_INIT_NORMAL, std);
    m->tensors[m->n_tensors - 1].init_rows = m->vocab;
  }
  return TL_OK;
}

static tl_status mlp_layout(tl_model* m) {
  const struct tl_model_config* c = &m->cfg;
  int n = c->n_mlp_layers;
  if (n < 1 || n > TL_MLP_MAX_LAYERS)
    return TL_ERRF(TL_ERR_CONFIG, "model.mlp_sizes must list 2 to %d sizes (got %d)",
                   TL_MLP_MAX_LAYERS + 1, n + 1);
  for (int i = 0; i <= n; i++)
    if (c->mlp_sizes[i] < 1)
      return TL_ERRF(TL_ERR_CONFIG, "model.mlp_sizes[%d]=%d; expected >= 1", i, c->mlp_sizes[i]);
  if (c->mlp_sizes[n] != m->vocab)
    return TL_ERRF(
        TL_ERR_CONFIG,
        "model.mlp_sizes[%d]=%d must equal model.vocab_size=%d (it predicts the next token)", n,
        c->mlp_sizes[n], m->vocab);
  int64_t d0 = c->mlp_sizes[0];
  add_tensor(m, "wte", 2, (int64_t[]){m->vocab, d0}, true, TL_INIT_NORMAL, 0.02f);
  add_tensor(m, "wpe", 2, (int64_t[]){1, d0}, false, TL_INIT_ZEROS, 0);
  for (int i = 0; i < n; i++) {
    char name[16];
    int64_t in = c->mlp_sizes[i], out = c->mlp_sizes[i + 1];
    snprintf(name, sizeof name, "w%d", i);
    add_tensor(m, name, 2, (int64_t[]){out, in}, true, TL_INIT_NORMAL, 1.0f / sqrtf((float)in));
    snprintf(name, sizeof name, "b%d", i);
    add_tensor(m, name, 1, (int64_t[]){out}, false, TL_INIT_ZEROS, 0);
  }
  return TL_OK;
}

tl_status tl_model_init(const struct tl_model_config* cfg, tl_model* m) {
  memset(m, 0, sizeof *m);
  m->cfg = *cfg;
  m->vocab = cfg->vocab_size;
  if (m->vocab < 1 || m->vocab > INT32_MAX - 127)
    return TL_ERRF(TL_ERR_CONFIG, "model.vocab_size=%d; expected 1 to %d (tokens are int32)",
                   m->vocab, INT32_MAX - 127);
  if (cfg->kind == TL_MODEL_GPT || cfg->kind == TL_MODEL_LLAMA) {
    m->padded_vocab =
        cfg->padded_vocab_size ? cfg->padded_vocab_size : (m->vocab + 127) / 128 * 128;
    if (m->padded_vocab < m->vocab)
      return TL_ERRF(TL_ERR_CONFIG, "model.padded_vocab_size=%d is below model.vocab_size=%d",
                     m->padded_vocab, m->vocab);
    return cfg->kind == TL_MODEL_GPT ? gpt_layout(m) : llama_layout(m);
  }
  m->padded_vocab = m->vocab;
  return mlp_layout(m);
}

int tl_model_tensor_at(const tl_model* m, int64_t offset) {
  for (int k = 0; k < m->n_tensors; k++)
    if (offset >= m->tensors[k].offset && offset < m->tensors[k].offset + m->tensors[k].numel)
      return k;
  return -1;
}

int tl_model_tensor(const tl_model* m, const char* name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensors[i].name, name) == 0) return i;
  return -1;
}

bool tl_model_param_is_key_bias(const tl_model* m, int64_t i) {
  if (m->cfg.kind != TL_MODEL_GPT) return false;
  const struct tl_param_tensor* t = &m->tensors[tl_model_tensor(m, "qkvb")];
  if (i < t->offset || i >= t->offset + t->numel) return false;
  int64_t c = m->cfg.n_embd, j = (i - t->offset) % (3 * c); /* [Q | K | V] of one layer */
  return j >= c && j < 2 * c;
}

void tl_model_compare(const tl_model* m, const float* a, const float* ref,
                      struct tl_param_diff* out) {
  memset(out, 0, sizeof *out);
  for (int k = 0; k < m->n_tensors; k++) {
    const struct tl_param_tensor* t = &m->tensors[k];
    double scale = 0, diff = 0;
    int64_t at = t->offset;
    for (int64_t i = t->offset; i < t->offset + t->numel; i++) {
      double d = fabs((double)a[i] - ref[i]);
      if (tl_model_param_is_key_bias(m, i)) {
        out->n_key_bias++;
        if (d > out->key_bias_worst) out->key_bias_worst = d;
        continue;
      }
      if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
      if (d > diff) diff = d, at = i;
    }
    double rel = scale > 0 ? diff / scale : diff;
    if (rel > out->worst || (k == 0 && rel >= out->worst)) {
      out->worst = rel;
      out->worst_tensor = k;
      out->worst_element = at;
    }
  }
}

void tl_model_init_params(const tl_model* m, int64_t begin, int64_t end, float* out) {
  for (int k = 0; k < m->n_tensors; k++) {
    const struct tl_param_tensor* t = &m->tensors[k];
    int64_t lo = begin > t->offset ? begin : t->offset;
    int64_t hi = end < t->offset + t->numel ? end : t->offset + t->numel;
    if (lo >= hi) continue;
    int64_t first = lo - t->offset, run = hi - lo;
    int64_t zero_from = t->init_rows * (t->numel / t->shape[0]);
    float* dst = out + (lo - begin);
    if (t->init == TL_INIT_NORMAL) {
      tl_rng_normal(m->cfg.seed, (uint32_t)k, (uint64_t)first, (size_t)run, 0.0f, t->init_std, dst);
      for (int64_t e = 0; e < run; e++)
        if (first + e >= zero_from) dst[e] = 0.0f;
    } else {
      float v = t->init == TL_INIT_ONES ? 1.0f : 0.0f;
      for (int64_t e = 0; e < run; e++) dst[e] = v;
    }
  }
}

/* A parameter value for layer `layer` of stacked tensor `name` (layer -1: the whole tensor). */
static tl_status param(tl_graph* g, const tl_model* m, const char* name, int layer, int* out) {
  int k = tl_model_tensor(m, name);
  TL_ASSERT(k >= 0);
  const struct tl_param_tensor* t = &m->tensors[k];
  char vname[TL_NAME_MAX];
  if (layer < 0) {
    snprintf(vname, sizeof vname, "%s", name);
    return tl_graph_param(g, vname, t->offset, t->n_dims, t->shape, out);
  }
  int64_t per = t->numel / t->shape[0];
  snprintf(vname, sizeof vname, "%s.%d", name, layer);
  return tl_graph_param(g, vname, t->offset + layer * per, t->n_dims - 1, t->shape + 1, out);
}

#define NODE(op, name, in, attr, out) \
  tl_graph_node(g, op, name, (int)(sizeof in / sizeof in[0]), in, attr, TL_NODE_MAX_ATTRS, out)

static const int k_no_attr[TL_NODE_MAX_ATTRS] = {0};

/* A node whose weight and bias are layer `layer` of tensors `w` and `b`
 * (layer -1: whole tensors), named "h<layer>.<what>" (or `what`). */
static tl_status weighted(tl_graph* g, const tl_model* m, int op, const char* what, int layer,
                          int x, const char* w, const char* b, int* out) {
  static const int linear[TL_NODE_MAX_ATTRS] = {0, 1}; /* x W^T + b: W is (out, in) */
  int wv, bv = -1;
  char name[TL_NAME_MAX];
  TL_CHECK(param(g, m, w, layer, &wv));
  if (b) TL_CHECK(param(g, m, b, layer, &bv));
  if (layer < 0)
    snprintf(name, sizeof name, "%s", what);
  else
    snprintf(name, sizeof name, "h%d.%s", layer, what);
  return tl_graph_node(g, op, name, b ? 3 : 2, (int[]){x, wv, bv},
                       op == TL_OP_MATMUL ? linear : k_no_attr, TL_NODE_MAX_ATTRS, out);
}

/* A parameter-free node "h<layer>.<what>". */
static tl_status plain(tl_graph* g, int op, const char* what, int layer, int n_in, const int* in,
                       const int* attr, int* out) {
  char name[TL_NAME_MAX];
  snprintf(name, sizeof name, "h%d.%s", layer, what);
  return tl_graph_node(g, op, name, n_in, in, attr, TL_NODE_MAX_ATTRS, out);
}

/* The GPT: token + position embedding, then per block x = x + attn(ln1(x))
 * and x = x + mlp(ln2(x)), a final layer norm and the LM head tied to the
 * token embedding. */
static tl_status gpt_build(tl_graph* g, const tl_model* m, int tokens, int* logits,
                           struct tl_model_io* io) {
  const struct tl_model_config* c = &m->cfg;
  int wte, wpe, x, o[3];
  TL_CHECK(param(g, m, "wte", -1, &wte));
  TL_CHECK(param(g, m, "wpe", -1, &wpe));
  TL_CHECK(NODE(TL_OP_EMBEDDING, "encoder", ((int[]){tokens, wte, wpe}), k_no_attr, &x));
  const int heads[TL_NODE_MAX_ATTRS] = {c->n_heads};
  for (int l = 0; l < c->n_layers; l++) {
    io->layer_begin[l] = g->n_nodes;
    int qkv, proj, fc, act, fcproj;
    /* x = x + attention(layernorm(x)) */
    TL_CHECK(weighted(g, m, TL_OP_LAYERNORM, "ln1", l, x, "ln1w", "ln1b", o));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "qkv", l, o[0], "qkvw", "qkvb", &qkv));
    TL_CHECK(plain(g, TL_OP_ATTENTION, "attn", l, 1, &qkv, heads, o));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "attproj", l, o[0], "attprojw", "attprojb", &proj));
    TL_CHECK(plain(g, TL_OP_ADD, "res1", l, 2, (int[]){x, proj}, k_no_attr, &x));
    /* x = x + mlp(layernorm(x)) */
    TL_CHECK(weighted(g, m, TL_OP_LAYERNORM, "ln2", l, x, "ln2w", "ln2b", o));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "fc", l, o[0], "fcw", "fcb", &fc));
    TL_CHECK(plain(g, TL_OP_GELU, "gelu", l, 1, &fc, k_no_attr, &act));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "fcproj", l, act, "fcprojw", "fcprojb", &fcproj));
    TL_CHECK(plain(g, TL_OP_ADD, "res2", l, 2, (int[]){x, fcproj}, k_no_attr, &x));
  }
  io->layer_begin[c->n_layers] = g->n_nodes;
  io->n_layers = c->n_layers;
  TL_CHECK(weighted(g, m, TL_OP_LAYERNORM, "lnf", -1, x, "lnfw", "lnfb", o));
  /* the LM head is the token embedding, transposed (weight tying) */
  static const int linear[TL_NODE_MAX_ATTRS] = {0, 1};
  return NODE(TL_OP_MATMUL, "lm_head", ((int[]){o[0], wte}), linear, logits);
}

/* An RMSNorm node "h<layer>.<what>" (or `what`) with weight `w`. */
static tl_status rmsnorm(tl_graph* g, const tl_model* m, const char* what, int layer, int x,
                         const char* w, int* out) {
  const int attr[TL_NODE_MAX_ATTRS] = {tl_attr_from_float(m->cfg.norm_eps)};
  int wv, o[2];
  char name[TL_NAME_MAX];
  TL_CHECK(param(g, m, w, layer, &wv));
  if (layer < 0)
    snprintf(name, sizeof name, "%s", what);
  else
    snprintf(name, sizeof name, "h%d.%s", layer, what);
  TL_CHECK(tl_graph_node(g, TL_OP_RMSNORM, name, 2, (int[]){x, wv}, attr, TL_NODE_MAX_ATTRS, o));
  *out = o[0];
  return TL_OK;
}

/* The Llama (transformers' LlamaForCausalLM): a token embedding, then per
 * block h = x + o(attn(rope(q(n1 x)), rope(k(n1 x)), v(n1 x))) and out = h +
 * down(swiglu(gate(n2 h), up(n2 h))), a final RMSNorm and the LM head (its
 * own matrix, or the token embedding when tied). No biases, no position
 * table. */
static tl_status llama_build(tl_graph* g, const tl_model* m, int tokens, int* logits,
                             struct tl_model_io* io) {
  const struct tl_model_config* c = &m->cfg;
  const int hs = c->n_embd / c->n_heads;
  const struct tl_rope_scaling* rs = &c->rope_scaling;
  const int rope[TL_NODE_MAX_ATTRS] = {hs,
                                       tl_attr_from_float(c->rope_theta),
                                       tl_attr_from_float(rs->factor),
                                       tl_attr_from_float(rs->low_freq_factor),
                                       tl_attr_from_float(rs->high_freq_factor),
                                       rs->original_max_position_embeddings};
  const int heads[TL_NODE_MAX_ATTRS] = {c->n_heads, tl_config_kv_heads(c)};
  int wte, x;
  TL_CHECK(param(g, m, "wte", -1, &wte));
  TL_CHECK(NODE(TL_OP_EMBEDDING, "embed", ((int[]){tokens, wte}), k_no_attr, &x));
  for (int l = 0; l < c->n_layers; l++) {
    io->layer_begin[l] = g->n_nodes;
    int n1, q, k, v, qr, kr, a[2], o, n2, gate, up, act, down;
    /* h = x + attention(rmsnorm(x)) */
    TL_CHECK(rmsnorm(g, m, "rms1", l, x, "rms1w", &n1));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "q", l, n1, "wq", NULL, &q));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "k", l, n1, "wk", NULL, &k));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "v", l, n1, "wv", NULL, &v));
    TL_CHECK(plain(g, TL_OP_ROPE, "qrope", l, 1, &q, rope, &qr));
    TL_CHECK(plain(g, TL_OP_ROPE, "krope", l, 1, &k, rope, &kr));
    TL_CHECK(plain(g, TL_OP_ATTENTION, "attn", l, 3, (int[]){qr, kr, v}, heads, a));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "o", l, a[0], "wo", NULL, &o));
    TL_CHECK(plain(g, TL_OP_ADD, "res1", l, 2, (int[]){x, o}, k_no_attr, &x));
    /* out = h + down(silu(gate(rmsnorm(h))) * up(rmsnorm(h))) */
    TL_CHECK(rmsnorm(g, m, "rms2", l, x, "rms2w", &n2));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "gate", l, n2, "wgate", NULL, &gate));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "up", l, n2, "wup", NULL, &up));
    TL_CHECK(plain(g, TL_OP_SWIGLU, "swiglu", l, 2, (int[]){gate, up}, k_no_attr, &act));
    TL_CHECK(weighted(g, m, TL_OP_MATMUL, "down", l, act, "wdown", NULL, &down));
    TL_CHECK(plain(g, TL_OP_ADD, "res2", l, 2, (int[]){x, down}, k_no_attr, &x));
  }
  io->layer_begin[c->n_layers] = g->n_nodes;
  io->n_layers = c->n_layers;
  int nf;
  TL_CHECK(rmsnorm(g, m, "norm", -1, x, "rmsfw", &nf));
  if (c->tie_embeddings) {
    static const int linear[TL_NODE_MAX_ATTRS] = {0, 1};
    return NODE(TL_OP_MATMUL, "lm_head", ((int[]){nf, wte}), linear, logits);
  }
  return weighted(g, m, TL_OP_MATMUL, "lm_head", -1, nf, "headw", NULL, logits);
}

/* The mlp: a token embedding, then linear layers with GELU between them. */
static tl_status mlp_build(tl_graph* g, const tl_model* m, int tokens, int* logits,
                           struct tl_model_io* io) {
  int wte, wpe, x;
  char name[TL_NAME_MAX];
  TL_CHECK(param(g, m, "wte", -1, &wte));
  TL_CHECK(param(g, m, "wpe", -1, &wpe));
  TL_CHECK(NODE(TL_OP_EMBEDDING, "embed", ((int[]){tokens, wte, wpe}), k_no_attr, &x));
  static const int linear[TL_NODE_MAX_ATTRS] = {0, 1};
  for (int i = 0; i < m->cfg.n_mlp_layers; i++) {
    io->layer_begin[i] = g->n_nodes;
    int w, bias;
    char wn[16], bn[16];
    snprintf(wn, sizeof wn, "w%d", i);
    snprintf(bn, sizeof bn, "b%d", i);
    TL_CHECK(param(g, m, wn, -1, &w));
    TL_CHECK(param(g, m, bn, -1, &bias));
    snprintf(name, sizeof name, "linear%d", i);
    TL_CHECK(tl_graph_node(g, TL_OP_MATMUL, name, 3, (int[]){x, w, bias}, linear, TL_NODE_MAX_ATTRS,
                           &x));
    if (i + 1 < m->cfg.n_mlp_layers) {
      snprintf(name, sizeof name, "gelu%d", i);
      TL_CHECK(NODE(TL_OP_GELU, name, ((int[]){x}), k_no_attr, &x));
    }
  }
  io->layer_begin[m->cfg.n_mlp_layers] = g->n_nodes;
  io->n_layers = m->cfg.n_mlp_layers;
  *logits = x;
  return TL_OK;
}

tl_status tl_model_build_forward(const tl_model* m, int b, int t, bool with_loss, tl_graph** out,
                                 struct tl_model_io* io) {
  *out = NULL;
  io->tokens = io->targets = io->logits = io->losses = -1;
  if (b < 1 || t < 1)
    return TL_ERRF(TL_ERR_INVALID, "batch %d x %d tokens; expected >= 1 each", b, t);
  const bool mlp = m->cfg.kind == TL_MODEL_MLP;
  int layers = mlp ? m->cfg.n_mlp_layers : m->cfg.n_layers;
  if (layers > TL_MODEL_MAX_LAYERS)
    return TL_ERRF(TL_ERR_CONFIG, "%d layers; at most %d are supported", layers,
                   TL_MODEL_MAX_LAYERS);
  if (!mlp && t > m->cfg.max_seq_len)
    return TL_ERRF(TL_ERR_CONFIG, "sequence length %d exceeds model.max_seq_len=%d", t,
                   m->cfg.max_seq_len);
  tl_graph* g = NULL;
  TL_CHECK(tl_graph_create(&g));
  tl_status st = TL_OK;
  /* The mlp sees every position as its own length-1 sequence. */
  int64_t tok_shape[2] = {mlp ? (int64_t)b * t : b, mlp ? 1 : t};
  TL_CHECK_GOTO(tl_graph_input(g, "tokens", TL_I32, 2, tok_shape, &io->tokens), st, fail);
  if (m->cfg.kind == TL_MODEL_GPT)
    TL_CHECK_GOTO(gpt_build(g, m, io->tokens, &io->logits, io), st, fail);
  else if (m->cfg.kind == TL_MODEL_LLAMA)
    TL_CHECK_GOTO(llama_build(g, m, io->tokens, &io->logits, io), st, fail);
  else
    TL_CHECK_GOTO(mlp_build(g, m, io->tokens, &io->logits, io), st, fail);
  /* logits are what an inference graph is for; a training graph reads the
   * losses instead, and need not keep (B*T, Vp) logits through backward */
  if (!with_loss) TL_CHECK_GOTO(tl_graph_mark_output(g, io->logits), st, fail);
  if (with_loss) {
    int64_t n = (int64_t)b * t;
    int attr[TL_NODE_MAX_ATTRS] = {m->vocab};
    TL_CHECK_GOTO(tl_graph_input(g, "targets", TL_I32, 1, &n, &io->targets), st, fail);
    TL_CHECK_GOTO(
        NODE(TL_OP_CROSSENTROPY, "loss", ((int[]){io->logits, io->targets}), attr, &io->losses), st,
        fail);
    TL_CHECK_GOTO(tl_graph_set_loss(g, io->losses), st, fail);
  }
  *out = g;
  return TL_OK;
fail:
  tl_graph_destroy(g);
  return st;
}

tl_status tl_model_build(const tl_model* m, int b, int t, bool with_loss, tl_graph** out,
                         struct tl_model_io* io) {
  TL_CHECK(tl_model_build_forward(m, b, t, with_loss, out, io));
  if (!with_loss) return TL_OK;
  tl_status st = tl_graph_backward(*out);
  if (st != TL_OK) {
    tl_graph_destroy(*out);
    *out = NULL;
  }
  return st;
}

tl_status tl_model_recompute(tl_graph* g, const struct tl_model_io* io, tl_recompute mode) {
  if (mode == TL_RECOMPUTE_NONE) return TL_OK;
  int found = 0;
  for (int l = 0; l < io->n_layers; l++) {
    const int b = io->layer_begin[l], e = io->layer_begin[l + 1];
    if (mode == TL_RECOMPUTE_FULL) {
      TL_CHECK(tl_graph_recompute(g, b, e));
      found++;
      continue;
    }
    for (int i = b; i < e; i++)
      if (tl_op_get(g->nodes[i].op)->flags & TL_OP_ATTENTION_LIKE) {
        TL_CHECK(tl_graph_recompute(g, i, i + 1));
        found++;
      }
  }
  if (mode == TL_RECOMPUTE_SELECTIVE && !found && io->n_layers > 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "selective recomputation recomputes attention, and this model "
                   "has none: use \"full\" or \"none\"");
  return TL_OK;
}
