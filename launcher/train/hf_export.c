/* hf_export.c — a Hugging Face export (hf.h): the plan of its safetensors
 * files, the writes every rank makes of its part, config.json and the
 * index. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "launcher/train/hf.h"
#include "launcher/train/safetensors.h"

/* ---- export ------------------------------------------------------------------ */

void tl_hf_export_free(tl_hf_export* x) {
  if (!x) return;
  for (int i = 0; x->files && i < x->n_files; i++) free(x->files[i].header);
  free(x->files);
  free(x->tensors);
  free(x->file_of);
  free(x->at);
  memset(x, 0, sizeof *x);
}

tl_status tl_hf_export_plan(const tl_model* m, int64_t max_file_bytes, tl_hf_export* x) {
  memset(x, 0, sizeof *x);
  int n = tl_hf_tensors(m, NULL);
  if (n < 0) return TL_ERRF(TL_ERR_CONFIG, "model.kind \"mlp\" has no Hugging Face form");
  x->n_tensors = n;
  x->tensors = calloc((size_t)n + 1, sizeof *x->tensors);
  x->file_of = calloc((size_t)n + 1, sizeof *x->file_of);
  x->at = calloc((size_t)n + 1, sizeof *x->at);
  x->files = calloc((size_t)n + 1, sizeof *x->files);
  struct tl_st_entry* e = calloc((size_t)n + 1, sizeof *e);
  tl_status st = x->tensors && x->file_of && x->at && x->files && e
                     ? TL_OK
                     : TL_ERRF(TL_ERR_NOMEM, "out of memory planning an export");
  if (st == TL_OK) tl_hf_tensors(m, x->tensors);
  /* 1. tensors into files in order, a file closed before it passes the limit */
  int64_t in_file = 0;
  for (int i = 0; st == TL_OK && i < n; i++) {
    const int64_t bytes = 4 * x->tensors[i].numel;
    if (x->n_files == 0 || (in_file > 0 && in_file + bytes > max_file_bytes))
      x->n_files++, in_file = 0;
    x->file_of[i] = x->n_files - 1;
    x->at[i] = in_file; /* data bytes; the header is added below */
    in_file += bytes;
  }
  /* 2. each file's header, then the tensors' places after it */
  for (int f = 0; st == TL_OK && f < x->n_files; f++) {
    struct tl_hf_file* file = &x->files[f];
    if (x->n_files == 1)
      snprintf(file->name, sizeof file->name, "model.safetensors");
    else
      snprintf(file->name, sizeof file->name, "model-%05d-of-%05d.safetensors", f + 1, x->n_files);
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (x->file_of[i] != f) continue;
      const struct tl_hf_tensor* h = &x->tensors[i];
      e[k] = (struct tl_st_entry){
          .name = h->name, .n_dims = h->n_dims, .begin = x->at[i], .end = x->at[i] + 4 * h->numel};
      e[k].shape[0] = h->rows, e[k].shape[1] = h->cols;
      k++;
    }
    st = tl_st_header(e, k, &file->header, &file->header_len);
    file->size = file->header_len + (k ? e[k - 1].end : 0);
    for (int i = 0; st == TL_OK && i < n; i++)
      if (x->file_of[i] == f) x->at[i] += file->header_len;
  }
  free(e);
  if (st != TL_OK) tl_hf_export_free(x);
  return st;
}

static tl_status write_at(int fd, const void* src, size_t bytes, int64_t at) {
  const char* p = src;
  while (bytes > 0) {
    ssize_t w = pwrite(fd, p, bytes, (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return TL_ERRF(TL_ERR_IO, "cannot write a model file: %s", strerror(errno));
    p += w, at += w, bytes -= (size_t)w;
  }
  return TL_OK;
}

tl_status tl_hf_export_write(const tl_hf_export* x, const int* fds, int64_t full, int64_t n,
                             const float* src) {
  /* the tensors overlapping [full, full + n), by binary search on `full` */
  int lo = 0, hi = x->n_tensors;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (x->tensors[mid].full + x->tensors[mid].numel <= full)
      lo = mid + 1;
    else
      hi = mid;
  }
  float* col = NULL;
  tl_status st = TL_OK;
  for (int i = lo; i < x->n_tensors && x->tensors[i].full < full + n && st == TL_OK; i++) {
    const struct tl_hf_tensor* h = &x->tensors[i];
    const int64_t a = full > h->full ? full : h->full;
    const int64_t b = full + n < h->full + h->numel ? full + n : h->full + h->numel;
    if (a >= b) continue;
    const int fd = fds[x->file_of[i]];
    if (!h->transposed) {
      st = write_at(fd, src + (a - full), sizeof(float) * (size_t)(b - a),
                    x->at[i] + 4 * (a - h->full));
      continue;
    }
    /* trellis holds (R, K) = (cols, rows) of the stored (K, R): source
     * element j = r K + c goes to c R + r. Whole source rows [r0, r1)
     * become, for each c, one contiguous run of the stored row c. */
    const int64_t R = h->cols, K = h->rows;
    int64_t j = a - h->full;
    const int64_t end = b - h->full;
    while (j < end && st == TL_OK) {
      const int64_t r0 = j / K, c0 = j % K;
      if (c0 != 0 || end - j < K) { /* a partial row: element by element */
        const int64_t stop = end < (r0 + 1) * K ? end : (r0 + 1) * K;
        for (; j < stop && st == TL_OK; j++)
          st = write_at(fd, src + (h->full + j - full), sizeof(float),
                        x->at[i] + 4 * ((j % K) * R + r0));
        continue;
      }
      const int64_t r1 = r0 + (end - j) / K; /* whole rows [r0, r1) */
      float* grown = realloc(col, sizeof(float) * (size_t)(r1 - r0));
      if (!grown) {
        st = TL_ERRF(TL_ERR_NOMEM, "out of memory writing a model file");
        break;
      }
      col = grown;
      const float* base = src + (h->full + r0 * K - full);
      for (int64_t c = 0; c < K && st == TL_OK; c++) {
        for (int64_t r = r0; r < r1; r++) col[r - r0] = base[(r - r0) * K + c];
        st = write_at(fd, col, sizeof(float) * (size_t)(r1 - r0), x->at[i] + 4 * (c * R + r0));
      }
      j = r1 * K;
    }
  }
  free(col);
  return st;
}

/* A float as the shortest decimal that reads back to it (1e-05, not
 * 9.99999975e-06): what transformers reads and rounds to fp32 is the
 * float trellis computed with. */
static json_t* json_float(float f) {
  char buf[32];
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
    if ((float)strtod(buf, NULL) == f) break;
  }
  return json_real(strtod(buf, NULL));
}

static tl_status write_json(const char* path, json_t* root) {
  char* text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
  if (!text) return TL_ERRF(TL_ERR_NOMEM, "out of memory writing '%s'", path);
  size_t len = strlen(text);
  char* withnl = malloc(len + 2);
  if (!withnl) {
    free(text);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory writing '%s'", path);
  }
  memcpy(withnl, text, len);
  withnl[len] = '\n';
  free(text);
  const void* data[1] = {withnl};
  size_t sizes[1] = {len + 1};
  tl_status st = tl_atomic_file_write_all(path, 1, data, sizes);
  free(withnl);
  return st;
}

tl_status tl_hf_write_config(const char* dir, const tl_model* m) {
  const struct tl_model_config* c = &m->cfg;
  json_t* o = json_object();
  if (c->kind == TL_MODEL_LLAMA) {
    json_object_set_new(o, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(o, "model_type", json_string("llama"));
    json_object_set_new(o, "vocab_size", json_integer(m->vocab));
    json_object_set_new(o, "hidden_size", json_integer(c->n_embd));
    json_object_set_new(o, "intermediate_size", json_integer(tl_config_ffn_hidden(c)));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(tl_config_kv_heads(c)));
    json_object_set_new(o, "head_dim", json_integer(c->n_embd / c->n_heads));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_seq_len));
    json_object_set_new(o, "rms_norm_eps", json_float(c->norm_eps));
    json_object_set_new(o, "rope_theta", json_float(c->rope_theta));
    if (c->rope_scaling.factor > 0)
      json_object_set_new(o, "rope_scaling",
                          json_pack("{s:s, s:o, s:o, s:o, s:i}", "rope_type", "llama3", "factor",
                                    json_float(c->rope_scaling.factor), "low_freq_factor",
                                    json_float(c->rope_scaling.low_freq_factor), "high_freq_factor",
                                    json_float(c->rope_scaling.high_freq_factor),
                                    "original_max_position_embeddings",
                                    c->rope_scaling.original_max_position_embeddings));
    else
      json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "initializer_range", json_real(0.02));
  } else {
    json_object_set_new(o, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
    json_object_set_new(o, "model_type", json_string("gpt2"));
    json_object_set_new(o, "vocab_size", json_integer(m->vocab));
    json_object_set_new(o, "n_positions", json_integer(c->max_seq_len));
    json_object_set_new(o, "n_embd", json_integer(c->n_embd));
    json_object_set_new(o, "n_layer", json_integer(c->n_layers));
    json_object_set_new(o, "n_head", json_integer(c->n_heads));
    json_object_set_new(o, "n_inner", json_null());
    json_object_set_new(o, "activation_function", json_string("gelu_new"));
    json_object_set_new(o, "layer_norm_epsilon", json_real(1e-5));
    json_object_set_new(o, "tie_word_embeddings", json_true());
    json_object_set_new(o, "scale_attn_weights", json_true());
    for (const char* const* k =
             (const char* const[]){"attn_pdrop", "embd_pdrop", "resid_pdrop", NULL};
         *k; k++)
      json_object_set_new(o, *k, json_real(0.0));
  }
  json_object_set_new(o, "torch_dtype", json_string("float32"));
  char path[TL_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/config.json", dir);
  tl_status st = write_json(path, o);
  json_decref(o);
  return st;
}

tl_status tl_hf_write_index(const char* dir, const tl_hf_export* x) {
  json_t* o = json_object();
  json_t* map = json_object();
  int64_t total = 0;
  for (int i = 0; i < x->n_tensors; i++) {
    total += 4 * x->tensors[i].numel;
    json_object_set_new(map, x->tensors[i].name, json_string(x->files[x->file_of[i]].name));
  }
  json_object_set_new(o, "metadata", json_pack("{s:I}", "total_size", (json_int_t)total));
  json_object_set_new(o, "weight_map", map);
  char path[TL_PATH_MAX + 48];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  tl_status st = write_json(path, o);
  json_decref(o);
  return st;
}
