/* checkpoint.c */
#include "launcher/train/checkpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/dtype.h"

static tl_status read_exact(FILE* f, const char* path, void* dst, size_t bytes, const char* what) {
  if (fread(dst, 1, bytes, f) != bytes)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside the %s", path, what);
  return TL_OK;
}

/* The file must hold exactly `bytes` (its header says what follows it). */
static tl_status expect_size(FILE* f, const char* path, size_t bytes, const char* what) {
  long at = ftell(f);
  if (at < 0 || fseek(f, 0, SEEK_END) != 0)
    return TL_ERRF(TL_ERR_IO, "cannot seek in '%s': %s", path, strerror(errno));
  long size = ftell(f);
  if (size < 0 || fseek(f, at, SEEK_SET) != 0)
    return TL_ERRF(TL_ERR_IO, "cannot seek in '%s': %s", path, strerror(errno));
  if ((size_t)size < bytes)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: %ld bytes, its header promises %zu (the %s)",
                   path, size, bytes, what);
  if ((size_t)size > bytes)
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s' is longer than its header says: %ld bytes, expected %zu (extra bytes at "
                   "the end)",
                   path, size, bytes);
  return TL_OK;
}

/* Compares a header field with the configured value. */
#define SAME(field, have, want)                                                                 \
  do {                                                                                          \
    if ((int64_t)(have) != (int64_t)(want))                                                     \
      return TL_ERRF(TL_ERR_FORMAT, "'%s' has %s=%lld but the config says model.%s=%lld", path, \
                     field, (long long)(have), field, (long long)(want));                       \
  } while (0)

static tl_status check_llmc_header(const char* path, const int32_t* h, const tl_model* m) {
  if (h[0] != TL_LLMC_MODEL_MAGIC)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is not an llm.c model file: magic %d, expected %d", path,
                   h[0], TL_LLMC_MODEL_MAGIC);
  if (h[1] != 3 && h[1] != 5)
    return TL_ERRF(TL_ERR_FORMAT, "'%s': llm.c model version %d; expected 3 (fp32) or 5 (bf16)",
                   path, h[1]);
  SAME("max_seq_len", h[2], m->cfg.max_seq_len);
  SAME("vocab_size", h[3], m->vocab);
  SAME("n_layers", h[4], m->cfg.n_layers);
  SAME("n_heads", h[5], m->cfg.n_heads);
  SAME("n_embd", h[6], m->cfg.n_embd);
  SAME("padded_vocab_size", h[7], m->padded_vocab);
  return TL_OK;
}

/* Opens an llm.c model file whose header matches m and whose size is
 * exactly the header and the parameters; *bf16 says which dtype they are. */
static tl_status llmc_open(const char* path, const tl_model* m, FILE** out, int* bf16) {
  *out = NULL;
  if (m->cfg.kind != TL_MODEL_GPT)
    return TL_ERRF(TL_ERR_CONFIG, "llm.c model files hold GPT-2 models; model.kind is not gpt");
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open model file '%s': %s", path, strerror(errno));
  int32_t h[256];
  tl_status st = read_exact(f, path, h, sizeof h, "1024-byte header");
  if (st == TL_OK) st = check_llmc_header(path, h, m);
  if (st == TL_OK) {
    *bf16 = h[1] == 5;
    st = expect_size(f, path, sizeof h + (*bf16 ? 2 : 4) * (size_t)m->n_params, "parameters");
  }
  if (st != TL_OK) {
    fclose(f);
    return st;
  }
  *out = f;
  return TL_OK;
}

tl_status tl_llmc_model_check(const char* path, const tl_model* m) {
  FILE* f = NULL;
  int bf16 = 0;
  TL_CHECK(llmc_open(path, m, &f, &bf16));
  fclose(f);
  return TL_OK;
}

tl_status tl_llmc_model_read(const char* path, const tl_model* m, float* params) {
  FILE* f = NULL;
  int bf16 = 0;
  TL_CHECK(llmc_open(path, m, &f, &bf16));
  tl_status st = TL_OK;
  if (!bf16) {
    st = read_exact(f, path, params, sizeof(float) * (size_t)m->n_params, "parameters");
  } else {
    uint16_t* tmp = malloc(sizeof(uint16_t) * (size_t)m->n_params);
    st = tmp ? read_exact(f, path, tmp, sizeof(uint16_t) * (size_t)m->n_params, "parameters")
             : TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
    for (int64_t i = 0; st == TL_OK && i < m->n_params; i++) params[i] = tl_bf16_to_f32(tmp[i]);
    free(tmp);
  }
  fclose(f);
  return st;
}

void tl_llmc_header(const tl_model* m, int32_t* h) {
  memset(h, 0, 1024);
  int32_t head[8] = {TL_LLMC_MODEL_MAGIC, 3,
                     m->cfg.max_seq_len,  m->vocab,
                     m->cfg.n_layers,     m->cfg.n_heads,
                     m->cfg.n_embd,       m->padded_vocab};
  memcpy(h, head, sizeof head);
}

tl_status tl_llmc_model_write(const char* path, const tl_model* m, const float* params) {
  if (m->cfg.kind != TL_MODEL_GPT)
    return TL_ERRF(TL_ERR_CONFIG, "llm.c model files hold GPT-2 models; model.kind is not gpt");
  int32_t h[256];
  tl_llmc_header(m, h);
  const void* data[2] = {h, params};
  size_t sizes[2] = {sizeof h, sizeof(float) * (size_t)m->n_params};
  return tl_atomic_file_write_all(path, 2, data, sizes);
}

/* trellis checkpoint header layout */
enum {
  H_MAGIC = 0,
  H_VERSION,
  H_KIND,
  H_LAYERS,
  H_HEADS,
  H_EMBD,
  H_VOCAB,
  H_PVOCAB,
  H_MAXT,
  H_MLP_LAYERS,
  H_MLP_SIZES = 10, /* 17 entries */
  H_PARAMS = 32,
  H_STEP = 34,
  H_POSITION = 36
};

static void put64(int32_t* h, int at, int64_t v) {
  memcpy(&h[at], &v, 8);
}
static int64_t get64(const int32_t* h, int at) {
  int64_t v;
  memcpy(&v, &h[at], 8);
  return v;
}

static void model_header(const tl_model* m, int32_t* h) {
  memset(h, 0, 1024);
  h[H_MAGIC] = TL_CHECKPOINT_MAGIC;
  h[H_VERSION] = 1;
  h[H_KIND] = m->cfg.kind;
  h[H_LAYERS] = m->cfg.n_layers;
  h[H_HEADS] = m->cfg.n_heads;
  h[H_EMBD] = m->cfg.n_embd;
  h[H_VOCAB] = m->vocab;
  h[H_PVOCAB] = m->padded_vocab;
  h[H_MAXT] = m->cfg.max_seq_len;
  h[H_MLP_LAYERS] = m->cfg.kind == TL_MODEL_MLP ? m->cfg.n_mlp_layers : 0;
  for (int i = 0; m->cfg.kind == TL_MODEL_MLP && i <= m->cfg.n_mlp_layers; i++)
    h[H_MLP_SIZES + i] = m->cfg.mlp_sizes[i];
  put64(h, H_PARAMS, m->n_params);
}

tl_status tl_checkpoint_write(const char* path, const tl_model* m, const struct tl_train_state* s,
                              const float* params, const float* adam_m, const float* adam_v) {
  int32_t h[256];
  model_header(m, h);
  put64(h, H_STEP, s->step);
  put64(h, H_POSITION, s->data_position);
  size_t bytes = sizeof(float) * (size_t)m->n_params;
  const void* data[4] = {h, params, adam_m, adam_v};
  size_t sizes[4] = {sizeof h, bytes, bytes, bytes};
  return tl_atomic_file_write_all(path, 4, data, sizes);
}

void tl_checkpoint_header(const tl_model* m, int version, int32_t* h) {
  model_header(m, h);
  h[H_VERSION] = version;
}

void tl_checkpoint_header_set(int32_t* h, int at, int64_t v) {
  put64(h, at, v);
}

int64_t tl_checkpoint_header_get(const int32_t* h, int at) {
  return get64(h, at);
}

tl_status tl_checkpoint_header_check(const char* path, const int32_t* h, const tl_model* m,
                                     int version) {
  int32_t want[256];
  model_header(m, want);
  if (h[H_MAGIC] != TL_CHECKPOINT_MAGIC)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is not a trellis checkpoint: magic %d, expected %d%s", path,
                   h[H_MAGIC], TL_CHECKPOINT_MAGIC,
                   h[H_MAGIC] == TL_LLMC_MODEL_MAGIC
                       ? " (it is an llm.c model file: use model.init_from)"
                       : "");
  if (h[H_VERSION] != version)
    return TL_ERRF(TL_ERR_FORMAT, "'%s': checkpoint version %d, expected %d", path, h[H_VERSION],
                   version);
  static const char* const names[] = {"",
                                      "",
                                      "kind",
                                      "n_layers",
                                      "n_heads",
                                      "n_embd",
                                      "vocab_size",
                                      "padded_vocab_size",
                                      "max_seq_len",
                                      "mlp_sizes (count)"};
  for (int i = H_KIND; i < H_PARAMS; i++) {
    if (h[i] == want[i]) continue;
    const char* field = i < H_MLP_SIZES ? names[i] : "mlp_sizes";
    return TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' has %s=%d but the config says model.%s=%d", path,
                   field, h[i], field, want[i]);
  }
  if (get64(h, H_PARAMS) != m->n_params)
    return TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' holds %lld parameters; the model has %lld", path,
                   (long long)get64(h, H_PARAMS), (long long)m->n_params);
  return TL_OK;
}

/* Opens a trellis checkpoint of model m: header and exact size checked. */
static tl_status checkpoint_open(const char* path, const tl_model* m, int32_t* h, FILE** out) {
  *out = NULL;
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
  tl_status st = read_exact(f, path, h, 1024, "1024-byte header");
  if (st == TL_OK) st = tl_checkpoint_header_check(path, h, m, 1);
  if (st == TL_OK)
    st = expect_size(f, path, 1024 + 3 * sizeof(float) * (size_t)m->n_params,
                     "parameters and both AdamW moments");
  if (st != TL_OK) {
    fclose(f);
    return st;
  }
  *out = f;
  return TL_OK;
}

tl_status tl_checkpoint_check(const char* path, const tl_model* m) {
  int32_t h[256];
  FILE* f = NULL;
  TL_CHECK(checkpoint_open(path, m, h, &f));
  fclose(f);
  return TL_OK;
}

tl_status tl_checkpoint_read(const char* path, const tl_model* m, struct tl_train_state* s,
                             float* params, float* adam_m, float* adam_v) {
  int32_t h[256];
  FILE* f = NULL;
  TL_CHECK(checkpoint_open(path, m, h, &f));
  size_t bytes = sizeof(float) * (size_t)m->n_params;
  tl_status st = read_exact(f, path, params, bytes, "parameters");
  if (st == TL_OK) st = read_exact(f, path, adam_m, bytes, "first AdamW moments");
  if (st == TL_OK) st = read_exact(f, path, adam_v, bytes, "second AdamW moments");
  fclose(f);
  if (st == TL_OK) {
    s->step = get64(h, H_STEP);
    s->data_position = get64(h, H_POSITION);
  }
  return st;
}
