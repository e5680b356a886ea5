/* checkpoint.c */
#include "launcher/train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/log.h"

static tl_status read_exact(FILE* f, const char* path, void* dst, size_t bytes, const char* what) {
  if (fread(dst, 1, bytes, f) != bytes) {
    if (ferror(f)) /* a directory: EISDIR */
      return TL_ERRF(TL_ERR_IO, "cannot read '%s': %s", path, strerror(errno ? errno : EIO));
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside the %s", path, what);
  }
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
  H_KV_HEADS = 27,  /* llama: n_kv_heads, ffn_hidden, rope_theta, norm_eps, tie_embeddings */
  H_FFN,
  H_ROPE_THETA,
  H_NORM_EPS,
  H_TIE,
  H_PARAMS = 32,
  H_STEP = 34,
  H_POSITION = 36,
  /* 38-41: a sharded checkpoint part's slices and elements (checkpoint.h) */
  H_TENSORS = 42,      /* version 2: tensors in the checksum table */
  H_ROPE_SCALING = 44, /* llama: factor, low and high frequency factors, original context */
};

/* Version 2 adds, after the header, a checksum per tensor of each of the
 * three arrays (XXH3 64-bit of its bytes); version 1 files load unchecked. */
#define FILE_VERSION 2

static const char* const k_arrays[3] = {"parameters", "first AdamW moments",
                                        "second AdamW moments"};

/* sums[3k + a]: array a's tensor k. */
static void checksums(const tl_model* m, const float* const arrays[3], uint64_t* sums) {
  for (int k = 0; k < m->n_tensors; k++)
    for (int a = 0; a < 3; a++)
      sums[3 * k + a] = XXH3_64bits(arrays[a] + m->tensors[k].offset,
                                    sizeof(float) * (size_t)m->tensors[k].numel);
}

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
  if (m->cfg.kind == TL_MODEL_LLAMA) {
    const struct tl_model_config* c = &m->cfg;
    h[H_KV_HEADS] = tl_config_kv_heads(c);
    h[H_FFN] = tl_config_ffn_hidden(c);
    memcpy(&h[H_ROPE_THETA], &c->rope_theta, 4);
    memcpy(&h[H_NORM_EPS], &c->norm_eps, 4);
    h[H_TIE] = c->tie_embeddings;
    memcpy(&h[H_ROPE_SCALING], &c->rope_scaling.factor, 4);
    memcpy(&h[H_ROPE_SCALING + 1], &c->rope_scaling.low_freq_factor, 4);
    memcpy(&h[H_ROPE_SCALING + 2], &c->rope_scaling.high_freq_factor, 4);
    h[H_ROPE_SCALING + 3] = c->rope_scaling.original_max_position_embeddings;
  }
  put64(h, H_PARAMS, m->n_params);
}

tl_status tl_checkpoint_write(const char* path, const tl_model* m, const struct tl_train_state* s,
                              const float* params, const float* adam_m, const float* adam_v) {
  int32_t h[256];
  model_header(m, h);
  h[H_VERSION] = FILE_VERSION;
  put64(h, H_STEP, s->step);
  put64(h, H_POSITION, s->data_position);
  put64(h, H_TENSORS, m->n_tensors);
  uint64_t* sums = malloc(sizeof(uint64_t) * 3 * (size_t)(m->n_tensors > 0 ? m->n_tensors : 1));
  if (!sums) return TL_ERRF(TL_ERR_NOMEM, "out of memory writing checkpoint '%s'", path);
  const float* const arrays[3] = {params, adam_m, adam_v};
  checksums(m, arrays, sums);
  size_t bytes = sizeof(float) * (size_t)m->n_params;
  const void* data[5] = {h, sums, params, adam_m, adam_v};
  size_t sizes[5] = {sizeof h, sizeof(uint64_t) * 3 * (size_t)m->n_tensors, bytes, bytes, bytes};
  tl_status st = tl_atomic_file_write_all(path, 5, data, sizes);
  free(sums);
  return st;
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
  /* the model's shape: every header word that describes it (a float as its bits) */
  static const struct {
    int at;
    const char* name;
    bool is_float;
  } fields[] = {{H_KIND, "kind", false},
                {H_LAYERS, "n_layers", false},
                {H_HEADS, "n_heads", false},
                {H_EMBD, "n_embd", false},
                {H_VOCAB, "vocab_size", false},
                {H_PVOCAB, "padded_vocab_size", false},
                {H_MAXT, "max_seq_len", false},
                {H_MLP_LAYERS, "mlp_sizes (count)", false},
                {H_KV_HEADS, "n_kv_heads", false},
                {H_FFN, "ffn_hidden", false},
                {H_ROPE_THETA, "rope_theta", true},
                {H_NORM_EPS, "norm_eps", true},
                {H_TIE, "tie_embeddings", false},
                {H_ROPE_SCALING, "rope_scaling.factor", true},
                {H_ROPE_SCALING + 1, "rope_scaling.low_freq_factor", true},
                {H_ROPE_SCALING + 2, "rope_scaling.high_freq_factor", true},
                {H_ROPE_SCALING + 3, "rope_scaling.original_max_position_embeddings", false}};
  for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
    const int i = fields[k].at;
    if (h[i] == want[i]) continue;
    if (fields[k].is_float) {
      float have, wanted;
      memcpy(&have, &h[i], 4);
      memcpy(&wanted, &want[i], 4);
      return TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' has %s=%g but the config says model.%s=%g",
                     path, fields[k].name, have, fields[k].name, wanted);
    }
    return TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' has %s=%d but the config says model.%s=%d", path,
                   fields[k].name, h[i], fields[k].name, want[i]);
  }
  for (int i = H_MLP_SIZES; i < H_MLP_SIZES + TL_MLP_MAX_LAYERS + 1; i++)
    if (h[i] != want[i])
      return TL_ERRF(TL_ERR_FORMAT,
                     "checkpoint '%s' has mlp_sizes[%d]=%d but the config says "
                     "model.mlp_sizes[%d]=%d",
                     path, i - H_MLP_SIZES, h[i], i - H_MLP_SIZES, want[i]);
  if (get64(h, H_PARAMS) != m->n_params)
    return TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' holds %lld parameters; the model has %lld", path,
                   (long long)get64(h, H_PARAMS), (long long)m->n_params);
  return TL_OK;
}

/* Opens a trellis checkpoint of model m: header and exact size checked;
 * *version is 1 or FILE_VERSION. */
static tl_status checkpoint_open(const char* path, const tl_model* m, int32_t* h, FILE** out,
                                 int* version) {
  *out = NULL;
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(errno));
  tl_status st = read_exact(f, path, h, 1024, "1024-byte header");
  *version = st == TL_OK && h[H_VERSION] == 1 ? 1 : FILE_VERSION;
  if (st == TL_OK) st = tl_checkpoint_header_check(path, h, m, *version);
  if (st == TL_OK && *version == FILE_VERSION && get64(h, H_TENSORS) != m->n_tensors)
    st = TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' has checksums for %lld tensors; the model has %d",
                 path, (long long)get64(h, H_TENSORS), m->n_tensors);
  size_t table = *version == FILE_VERSION ? sizeof(uint64_t) * 3 * (size_t)m->n_tensors : 0;
  if (st == TL_OK)
    st = expect_size(f, path, 1024 + table + 3 * sizeof(float) * (size_t)m->n_params,
                     table ? "checksums, parameters and both AdamW moments"
                           : "parameters and both AdamW moments");
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
  int version;
  TL_CHECK(checkpoint_open(path, m, h, &f, &version));
  fclose(f);
  return TL_OK;
}

tl_status tl_checkpoint_read(const char* path, const tl_model* m, struct tl_train_state* s,
                             float* params, float* adam_m, float* adam_v) {
  int32_t h[256];
  FILE* f = NULL;
  int version;
  TL_CHECK(checkpoint_open(path, m, h, &f, &version));
  size_t bytes = sizeof(float) * (size_t)m->n_params;
  const size_t n_sums = 3 * (size_t)m->n_tensors;
  uint64_t* sums = malloc(sizeof(uint64_t) * (n_sums > 0 ? n_sums : 1));
  uint64_t* have = malloc(sizeof(uint64_t) * (n_sums > 0 ? n_sums : 1));
  tl_status st =
      sums && have ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory reading checkpoint '%s'", path);
  if (st == TL_OK && version == FILE_VERSION)
    st = read_exact(f, path, sums, sizeof(uint64_t) * n_sums, "checksum table");
  if (st == TL_OK) st = read_exact(f, path, params, bytes, "parameters");
  if (st == TL_OK) st = read_exact(f, path, adam_m, bytes, "first AdamW moments");
  if (st == TL_OK) st = read_exact(f, path, adam_v, bytes, "second AdamW moments");
  fclose(f);
  if (st == TL_OK && version == FILE_VERSION) { /* every tensor as it was written */
    const float* const arrays[3] = {params, adam_m, adam_v};
    checksums(m, arrays, have);
    for (size_t i = 0; i < n_sums && st == TL_OK; i++)
      if (have[i] != sums[i]) {
        const struct tl_param_tensor* t = &m->tensors[i / 3];
        st = TL_ERRF(TL_ERR_FORMAT,
                     "checkpoint '%s' is damaged: the %s of tensor %s (elements %lld-%lld of the "
                     "model) do not match their checksum",
                     path, k_arrays[i % 3], t->name, (long long)t->offset,
                     (long long)(t->offset + t->numel - 1));
      }
  } else if (st == TL_OK) {
    TL_LOG_WARN("checkpoint '%s' is of version 1, which has no checksums: loaded unverified", path);
  }
  free(sums);
  free(have);
  if (st == TL_OK) {
    s->step = get64(h, H_STEP);
    s->data_position = get64(h, H_POSITION);
  }
  return st;
}

/* ---- a checkpoint.dir ---------------------------------------------------- */

/* The step of a checkpoint's name, or -1 (temporary names do not count). */
static int64_t step_of(const char* name) {
  long long step = -1;
  int end = 0;
  if (sscanf(name, "step_%lld.ckpt%n", &step, &end) != 1 || name[end] != '\0' || step < 0)
    return -1;
  return step;
}

/* The steps of dir's checkpoints, ascending (*steps malloc'd, NULL when none). */
static tl_status list_steps(const char* dir, int64_t** steps, int* n) {
  *steps = NULL;
  *n = 0;
  DIR* d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return TL_OK;
    return TL_ERRF(TL_ERR_IO, "cannot read checkpoint.dir '%s': %s", dir, strerror(errno));
  }
  int cap = 0;
  tl_status st = TL_OK;
  for (struct dirent* e; st == TL_OK && (e = readdir(d));) {
    int64_t s = step_of(e->d_name);
    if (s < 0) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t* more = realloc(*steps, sizeof(int64_t) * (size_t)cap);
      if (!more) {
        st = TL_ERRF(TL_ERR_NOMEM, "out of memory listing '%s'", dir);
        break;
      }
      *steps = more;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  for (int i = 1; i < *n; i++) /* insertion sort: few checkpoints */
    for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
      int64_t x = (*steps)[j];
      (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = x;
    }
  return st;
}

static void name_of(char* path, size_t cap, const char* dir, int64_t step) {
  snprintf(path, cap, "%s/step_%06lld.ckpt", dir, (long long)step);
}

tl_status tl_checkpoint_latest(const char* dir, char* path, size_t cap, int64_t* step) {
  int64_t* steps;
  int n;
  path[0] = '\0';
  *step = -1;
  TL_CHECK(list_steps(dir, &steps, &n));
  if (n > 0) {
    *step = steps[n - 1];
    name_of(path, cap, dir, *step);
  }
  free(steps);
  return TL_OK;
}

/* rm -r of a sharded checkpoint's directory (flat: its index and parts). */
static int remove_tree(const char* path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return -1;
  if (!S_ISDIR(sb.st_mode)) return unlink(path);
  DIR* d = opendir(path);
  if (!d) return -1;
  char inner[TL_PATH_MAX + 300];
  for (struct dirent* e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(inner, sizeof inner, "%s/%s", path, e->d_name);
    if (remove_tree(inner) != 0) {
      closedir(d);
      return -1;
    }
  }
  closedir(d);
  return rmdir(path);
}

tl_status tl_checkpoint_prune(const char* dir, int keep, int* removed) {
  *removed = 0;
  if (keep <= 0) return TL_OK;
  int64_t* steps;
  int n;
  TL_CHECK(list_steps(dir, &steps, &n));
  tl_status st = TL_OK;
  char path[TL_PATH_MAX + 32];
  for (int i = 0; i < n - keep && st == TL_OK; i++) {
    name_of(path, sizeof path, dir, steps[i]);
    if (remove_tree(path) != 0)
      st = TL_ERRF(TL_ERR_IO, "cannot remove old checkpoint '%s' (checkpoint.keep): %s", path,
                   strerror(errno));
    else
      (*removed)++;
  }
  free(steps);
  return st;
}
