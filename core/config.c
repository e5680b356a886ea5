/* config.c — the training config's field table, its defaults, and the JSON
 * parser (jansson).
 *
 * Parsing is two passes over one table (config_impl.h): this file checks
 * JSON types and shapes while copying values into the struct, then
 * config_check.c checks ranges and the rules that tie fields together. Both
 * collect problems instead of stopping at the first, so a person fixing a
 * config sees everything wrong with it at once, each line starting with the
 * JSON path it is about (config_problems.c: the messages for unknown keys
 * and sections, with the likely one meant). */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/config_impl.h"
#include "core/json_kind.h"

static const char* const k_model_kinds[] = {"gpt", "mlp", "llama", NULL};
static const char* const k_schedule_kinds[] = {"gpipe", "1f1b", "interleaved", "zero_bubble", NULL};
static const char* const k_lr_schedules[] = {"cosine", "constant", NULL};
static const char* const k_recompute[] = {"none", "selective", "full", NULL};
static const char* const k_precisions[] = {"fp32", "bf16", NULL};
static const char* const k_checkpoint_formats[] = {"auto", "file", "sharded", NULL};
static const char* const k_device_types[] = {"cpu", "cuda", NULL};

const char* const tl__axis_names[] = {"dp", "tp", "pp", "cp", NULL};

const char* const tl__config_sections[] = {"model", "mesh",   "schedule",   "parallel", "train",
                                           "data",  "device", "checkpoint", NULL};

#define OFF(sec, name) offsetof(struct tl_config, sec.name)
#define FIELD(sec, name, t, ...) \
  { .section = #sec, .key = #name, .type = (t), .offset = OFF(sec, name), __VA_ARGS__ }
/* Ranges: at least lo; at least lo and at most hi; strictly more than lo. */
#define AT_LEAST(v) .lo = (v), .no_hi = true
#define BETWEEN(a, b) .lo = (a), .hi = (b)
#define ABOVE(v) .lo = (v), .lo_open = true, .no_hi = true
#define GPT_ONLY .kinds = 1u << TL_MODEL_GPT
#define MLP_ONLY .kinds = 1u << TL_MODEL_MLP
#define LLAMA_ONLY .kinds = 1u << TL_MODEL_LLAMA
#define TRANSFORMERS .kinds = (1u << TL_MODEL_GPT) | (1u << TL_MODEL_LLAMA)

const struct tl__config_field tl__config_fields[] = {
    FIELD(model, kind, TL__FIELD_ENUM, .names = k_model_kinds),
    FIELD(model, n_layers, TL__FIELD_INT, AT_LEAST(1), TRANSFORMERS),
    FIELD(model, n_heads, TL__FIELD_INT, AT_LEAST(1), TRANSFORMERS),
    FIELD(model, n_embd, TL__FIELD_INT, AT_LEAST(1), TRANSFORMERS),
    FIELD(model, vocab_size, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(model, padded_vocab_size, TL__FIELD_INT, AT_LEAST(0), TRANSFORMERS),
    FIELD(model, max_seq_len, TL__FIELD_INT, AT_LEAST(1), TRANSFORMERS),
    FIELD(model, n_kv_heads, TL__FIELD_INT, AT_LEAST(0), LLAMA_ONLY),
    FIELD(model, ffn_hidden, TL__FIELD_INT, AT_LEAST(0), LLAMA_ONLY),
    FIELD(model, rope_theta, TL__FIELD_FLOAT, ABOVE(1), LLAMA_ONLY),
    FIELD(model, rope_scaling, TL__FIELD_ROPE_SCALING, LLAMA_ONLY),
    FIELD(model, norm_eps, TL__FIELD_FLOAT, ABOVE(0), LLAMA_ONLY),
    FIELD(model, tie_embeddings, TL__FIELD_BOOL, LLAMA_ONLY),
    FIELD(model, mlp_sizes, TL__FIELD_SIZES, AT_LEAST(1), MLP_ONLY),
    FIELD(model, seed, TL__FIELD_U64, AT_LEAST(0)), /* and <= INT64_MAX: JSON integers are signed */
    FIELD(model, init_from, TL__FIELD_STRING),

    FIELD(mesh, dp, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(mesh, tp, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(mesh, pp, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(mesh, cp, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(mesh, order, TL__FIELD_ORDER),

    FIELD(schedule, kind, TL__FIELD_ENUM, .names = k_schedule_kinds),
    FIELD(schedule, micro_batches, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(schedule, virtual_stages, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(schedule, stage_layers, TL__FIELD_STAGES, AT_LEAST(1)),

    FIELD(parallel, zero, TL__FIELD_INT, BETWEEN(0, 3)),
    FIELD(parallel, bucket_mb, TL__FIELD_DOUBLE, ABOVE(0)),
    FIELD(parallel, recompute, TL__FIELD_ENUM, .names = k_recompute),
    FIELD(parallel, sequence_parallel, TL__FIELD_BOOL),
    FIELD(parallel, deterministic, TL__FIELD_BOOL),
    FIELD(parallel, grad_reduce, TL__FIELD_ENUM, .names = k_precisions),
    FIELD(parallel, timeout_s, TL__FIELD_DOUBLE, AT_LEAST(0)),

    FIELD(train, steps, TL__FIELD_INT, AT_LEAST(0)),
    FIELD(train, batch_size, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(train, seq_len, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(train, lr, TL__FIELD_FLOAT, AT_LEAST(0)),
    FIELD(train, min_lr, TL__FIELD_FLOAT, AT_LEAST(0)),
    FIELD(train, warmup_steps, TL__FIELD_INT, AT_LEAST(0)),
    FIELD(train, lr_schedule, TL__FIELD_ENUM, .names = k_lr_schedules),
    FIELD(train, beta1, TL__FIELD_FLOAT, BETWEEN(0, 1), .hi_open = true),
    FIELD(train, beta2, TL__FIELD_FLOAT, BETWEEN(0, 1), .hi_open = true),
    FIELD(train, eps, TL__FIELD_FLOAT, ABOVE(0)),
    FIELD(train, weight_decay, TL__FIELD_FLOAT, AT_LEAST(0)),
    FIELD(train, grad_clip, TL__FIELD_FLOAT, AT_LEAST(0)),
    FIELD(train, val_every, TL__FIELD_INT, AT_LEAST(0)),
    FIELD(train, val_batches, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(train, sample_tokens, TL__FIELD_INT, AT_LEAST(0)),
    FIELD(train, sample_top_k, TL__FIELD_INT, AT_LEAST(1)),
    FIELD(train, skip_nonfinite, TL__FIELD_BOOL),
    FIELD(train, precision, TL__FIELD_ENUM, .names = k_precisions),

    FIELD(data, train, TL__FIELD_STRING),
    FIELD(data, val, TL__FIELD_STRING),
    FIELD(data, tokenizer, TL__FIELD_STRING),

    FIELD(device, type, TL__FIELD_ENUM, .names = k_device_types),
    FIELD(device, threads, TL__FIELD_INT, BETWEEN(0, 4096)),

    FIELD(checkpoint, dir, TL__FIELD_STRING),
    FIELD(checkpoint, every, TL__FIELD_INT, AT_LEAST(0)),
    FIELD(checkpoint, resume, TL__FIELD_STRING),
    FIELD(checkpoint, format, TL__FIELD_ENUM, .names = k_checkpoint_formats),
    FIELD(checkpoint, keep, TL__FIELD_INT, AT_LEAST(0)),
};
const int tl__config_n_fields = (int)(sizeof tl__config_fields / sizeof tl__config_fields[0]);

const char* tl_schedule_kind_name(tl_schedule_kind k) {
  return k >= TL_SCHEDULE_GPIPE && k <= TL_SCHEDULE_ZERO_BUBBLE ? k_schedule_kinds[k] : "?";
}

void tl_config_defaults(struct tl_config* cfg) {
  memset(cfg, 0, sizeof *cfg);
  struct tl_model_config* m = &cfg->model;
  m->kind = TL_MODEL_GPT;
  m->n_layers = 4;
  m->n_heads = 4;
  m->n_embd = 128;
  m->vocab_size = 256;
  m->padded_vocab_size = 0;
  m->max_seq_len = 64;
  m->n_kv_heads = 0;
  m->ffn_hidden = 0;
  m->rope_theta = 10000.0f;
  m->norm_eps = 1e-5f;
  m->tie_embeddings = false;
  m->n_mlp_layers = 2; /* a small MLP: 16-wide embedding, 32 hidden, 256 tokens out */
  m->mlp_sizes[0] = 16;
  m->mlp_sizes[1] = 32;
  m->mlp_sizes[2] = 256;
  m->seed = 1337;

  cfg->mesh.dp = cfg->mesh.tp = cfg->mesh.pp = cfg->mesh.cp = 1;
  /* Megatron: tensor innermost, then context, data, pipeline outermost */
  cfg->mesh.order[0] = TL_AXIS_TP;
  cfg->mesh.order[1] = TL_AXIS_CP;
  cfg->mesh.order[2] = TL_AXIS_DP;
  cfg->mesh.order[3] = TL_AXIS_PP;

  cfg->schedule.kind = TL_SCHEDULE_1F1B;
  cfg->schedule.micro_batches = 1;
  cfg->schedule.virtual_stages = 1;

  cfg->parallel.zero = 0;
  cfg->parallel.bucket_mb = 25.0;
  cfg->parallel.timeout_s = 1800.0;

  struct tl_train_config* t = &cfg->train;
  t->steps = 100;
  t->batch_size = 4;
  t->seq_len = 64;
  t->lr = 1e-3f;
  t->min_lr = 0.0f;
  t->warmup_steps = 0;
  t->lr_schedule = TL_LR_COSINE;
  t->beta1 = 0.9f;
  t->beta2 = 0.95f;
  t->eps = 1e-8f;
  t->weight_decay = 0.0f;
  t->grad_clip = 1.0f;
  t->val_every = 0;
  t->val_batches = 4;
  t->sample_tokens = 64;
  t->sample_top_k = 1;

  cfg->device.type = TL_DEVICE_CPU;
  cfg->device.threads = 0;
}

int tl_config_padded_vocab(const struct tl_model_config* m) {
  if (m->padded_vocab_size > 0) return m->padded_vocab_size;
  return (m->vocab_size + 127) / 128 * 128;
}

int tl_config_kv_heads(const struct tl_model_config* m) {
  return m->n_kv_heads > 0 ? m->n_kv_heads : m->n_heads;
}

int tl_config_ffn_hidden(const struct tl_model_config* m) {
  if (m->ffn_hidden > 0) return m->ffn_hidden;
  long long h = 2LL * 4 * m->n_embd / 3; /* Meta's llama: 2/3 of 4 n_embd, then multiple_of 256 */
  h = (h + 255) / 256 * 256;
  return h > INT_MAX ? INT_MAX : (int)h;
}

/* ---- values ---------------------------------------------------------------- */

/* A JSON value as the person wrote it, shortened for a message. */
static const char* show(const json_t* v, char* buf, size_t size) {
  char* s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!s) return snprintf(buf, size, "?"), buf;
  if (strlen(s) > 48) memcpy(s + 45, "...", 4);
  snprintf(buf, size, "%s", s);
  free(s);
  return buf;
}

static void enum_list(const char* const* names, char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; names[i] && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s\"%s\"", i ? ", " : "", names[i]);
}

static int count_names(const char* const* names) {
  int n = 0;
  while (names[n]) n++;
  return n;
}

const char* tl__field_expect(const struct tl__config_field* f, char* buf, size_t size) {
  char list[128];
  switch (f->type) {
    case TL__FIELD_BOOL:
      snprintf(buf, size, "true or false");
      break;
    case TL__FIELD_STRING:
      snprintf(buf, size, "a string of at most %d bytes", TL_PATH_MAX - 1);
      break;
    case TL__FIELD_ENUM:
      enum_list(f->names, list, sizeof list);
      snprintf(buf, size, "one of %s", list);
      break;
    case TL__FIELD_ORDER:
      snprintf(buf, size,
               "a permutation of \"dp\", \"tp\", \"pp\" and \"cp\", innermost first "
               "(e.g. [\"tp\", \"cp\", \"dp\", \"pp\"]; without \"cp\", cp sits just "
               "outside tp)");
      break;
    case TL__FIELD_SIZES:
      snprintf(buf, size,
               "an array of 2 to %d integers >= 1: inputs, hidden sizes..., outputs "
               "(its length - 1 is the number of layers)",
               TL_MLP_MAX_LAYERS + 1);
      break;
    case TL__FIELD_STAGES:
      snprintf(buf, size,
               "an array of at most %d integers >= 1: layers per pipeline stage ([] = balance "
               "FLOPs)",
               TL_MAX_STAGES);
      break;
    case TL__FIELD_U64:
      snprintf(buf, size, "an integer from 0 to %lld", (long long)INT64_MAX);
      break;
    case TL__FIELD_ROPE_SCALING:
      snprintf(buf, size,
               "null, or an object {\"factor\": >= 1, \"low_freq_factor\": > 0, "
               "\"high_freq_factor\": > low_freq_factor, \"original_max_position_embeddings\": "
               "an integer >= 1} (optionally \"rope_type\": \"llama3\")");
      break;
    default: {
      const char* what =
          f->type == TL__FIELD_INT || f->type == TL__FIELD_U64 ? "an integer" : "a number";
      if (f->no_hi)
        snprintf(buf, size, "%s %s %g", what, f->lo_open ? ">" : ">=", f->lo);
      else if (!f->lo_open && !f->hi_open)
        snprintf(buf, size, "%s from %.19g to %.19g", what, f->lo, f->hi);
      else
        snprintf(buf, size, "%s in %c%g, %g%c", what, f->lo_open ? '(' : '[', f->lo, f->hi,
                 f->hi_open ? ')' : ']');
    }
  }
  return buf;
}

/* model.rope_scaling: null, or Llama 3.1's four numbers (transformers'
 * rope_scaling object with rope_type "llama3"; the type may be left out).
 * Each key is checked here, naming it; the ranges are config_check.c's. */
static bool read_rope_scaling(const struct tl__config_field* f, const json_t* v,
                              struct tl_rope_scaling* out, struct tl__problems* p) {
  char val[64];
  if (json_is_null(v)) {
    memset(out, 0, sizeof *out);
    return true;
  }
  if (!json_is_object(v)) {
    char expect[256];
    tl__field_expect(f, expect, sizeof expect);
    tl__problem(p, "%s.%s = %s: expected %s, got %s", f->section, f->key, show(v, val, sizeof val),
                expect, tl_json_kind(v));
    return false;
  }
  static const char* const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings", "rope_type"};
  struct tl_rope_scaling r = {0};
  bool ok = true, seen[4] = {false};
  const char* key;
  json_t* x;
  json_object_foreach((json_t*)v, key, x) {
    int k = -1;
    for (int i = 0; i < 5; i++)
      if (strcmp(key, keys[i]) == 0) k = i;
    if (k < 0) {
      const char* near = tl__closest(key, keys, 5);
      tl__problem(p,
                  "%s.%s.%s: unknown key%s%s%s; it takes factor, low_freq_factor, "
                  "high_freq_factor, original_max_position_embeddings and rope_type",
                  f->section, f->key, key, near ? "; did you mean \"" : "", near ? near : "",
                  near ? "\"" : "");
      ok = false;
    } else if (k == 4) {
      const char* s = json_string_value(x);
      if (!s || strcmp(s, "llama3") != 0) {
        tl__problem(p,
                    "%s.%s.rope_type = %s: expected \"llama3\" (Llama 3.1's scaling, the one "
                    "trellis implements)",
                    f->section, f->key, show(x, val, sizeof val));
        ok = false;
      }
    } else if (k == 3) {
      json_int_t n = json_is_integer(x) ? json_integer_value(x) : 0;
      if (n < 1 || n > INT_MAX) {
        tl__problem(p, "%s.%s.%s = %s: expected an integer >= 1", f->section, f->key, key,
                    show(x, val, sizeof val));
        ok = false;
      }
      r.original_max_position_embeddings = (int)n;
      seen[k] = true;
    } else {
      double d = json_is_number(x) ? json_number_value(x) : NAN;
      if (!json_is_number(x) || !(fabs(d) <= FLT_MAX)) {
        tl__problem(p, "%s.%s.%s = %s: expected a number", f->section, f->key, key,
                    show(x, val, sizeof val));
        ok = false;
      }
      (&r.factor)[k] = (float)d;
      seen[k] = true;
    }
  }
  for (int k = 0; k < 4; k++)
    if (!seen[k] && ok) {
      tl__problem(p, "%s.%s: missing \"%s\" (Llama 3.1's scaling needs all four numbers)",
                  f->section, f->key, keys[k]);
      ok = false;
    }
  if (ok) *out = r;
  return ok;
}

/* Copies one JSON value into the struct; false (and a problem) when its
 * JSON type or shape is wrong. Ranges are config_check.c's business. */
static bool read_field(const struct tl__config_field* f, const json_t* v, struct tl_config* cfg,
                       struct tl__problems* p) {
  char* at = (char*)cfg + f->offset;
  char val[64], expect[192];
  tl__field_expect(f, expect, sizeof expect);
  switch (f->type) {
    case TL__FIELD_INT:
    case TL__FIELD_U64: {
      if (!json_is_integer(v)) break;
      json_int_t x = json_integer_value(v);
      if (f->type == TL__FIELD_U64) {
        if (x < 0) break;
        *(uint64_t*)at = (uint64_t)x;
      } else {
        if (x < INT_MIN || x > INT_MAX) break;
        *(int*)at = (int)x;
      }
      return true;
    }
    case TL__FIELD_FLOAT:
    case TL__FIELD_DOUBLE: {
      if (!json_is_number(v)) break;
      double x = json_number_value(v);
      if (f->type == TL__FIELD_DOUBLE) {
        *(double*)at = x;
      } else {
        if (x > FLT_MAX || x < -FLT_MAX) break;
        *(float*)at = (float)x;
      }
      return true;
    }
    case TL__FIELD_BOOL:
      if (!json_is_boolean(v)) break;
      *(bool*)at = json_is_true(v);
      return true;
    case TL__FIELD_STRING: {
      if (!json_is_string(v)) break;
      const char* s = json_string_value(v);
      size_t len = json_string_length(v);
      if (len != strlen(s) || len >= TL_PATH_MAX) break;
      memcpy(at, s, len + 1);
      return true;
    }
    case TL__FIELD_ENUM: {
      if (!json_is_string(v)) break;
      const char* s = json_string_value(v);
      for (int i = 0; f->names[i]; i++)
        if (strcmp(s, f->names[i]) == 0) return *(int*)at = i, true;
      const char* near = tl__closest(s, f->names, count_names(f->names));
      if (f->offset == offsetof(struct tl_config, device.type) && strcasecmp(s, "gpu") == 0)
        near = "cuda"; /* closer in meaning than "cpu" is in spelling */
      if (near) {
        tl__problem(p, "%s.%s = %s: expected %s; did you mean \"%s\"?", f->section, f->key,
                    show(v, val, sizeof val), expect, near);
        return false;
      }
      break;
    }
    case TL__FIELD_ORDER: {
      const size_t n = json_is_array(v) ? json_array_size(v) : 0;
      if (n != TL_N_AXES && n != TL_N_AXES - 1) break;
      tl_axis order[TL_N_AXES];
      int seen = 0, k = 0;
      for (size_t i = 0; i < n; i++) {
        const char* s = json_string_value(json_array_get(v, i));
        int a = -1;
        for (int j = 0; s && j < TL_N_AXES; j++)
          if (strcmp(s, tl__axis_names[j]) == 0) a = j;
        if (a < 0 || (seen & (1 << a))) {
          seen = 0;
          break;
        }
        seen |= 1 << a;
        order[k++] = (tl_axis)a;
        /* three axes: the context axis goes just outside the tensor axis */
        if (n == TL_N_AXES - 1 && a == TL_AXIS_TP) seen |= 1 << TL_AXIS_CP, order[k++] = TL_AXIS_CP;
      }
      if (seen != (1 << TL_N_AXES) - 1 || k != TL_N_AXES) break;
      memcpy(at, order, sizeof order);
      return true;
    }
    case TL__FIELD_ROPE_SCALING:
      return read_rope_scaling(f, v, (struct tl_rope_scaling*)at, p);
    case TL__FIELD_SIZES:
    case TL__FIELD_STAGES: {
      int sizes = f->type == TL__FIELD_SIZES;
      size_t n = json_is_array(v) ? json_array_size(v) : 0;
      size_t lo = sizes ? 2 : 0, hi = sizes ? TL_MLP_MAX_LAYERS + 1 : TL_MAX_STAGES;
      int got[TL_MAX_STAGES > TL_MLP_MAX_LAYERS + 1 ? TL_MAX_STAGES : TL_MLP_MAX_LAYERS + 1];
      if (!json_is_array(v) || n < lo || n > hi) break;
      bool ok = true;
      for (size_t i = 0; i < n; i++) {
        const json_t* e = json_array_get(v, i);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : 0;
        if (x < 1 || x > INT_MAX) {
          tl__problem(p, "%s.%s[%zu] = %s: expected an integer >= 1", f->section, f->key, i,
                      show(e, val, sizeof val));
          ok = false;
        } else {
          got[i] = (int)x;
        }
      }
      if (!ok) return false;
      int* dst = sizes ? cfg->model.mlp_sizes : cfg->schedule.stage_layers;
      size_t cap = sizes ? sizeof cfg->model.mlp_sizes : sizeof cfg->schedule.stage_layers;
      memset(dst, 0, cap);
      if (n) memcpy(dst, got, n * sizeof got[0]);
      if (sizes)
        cfg->model.n_mlp_layers = (int)n - 1;
      else
        cfg->schedule.n_stage_layers = (int)n;
      return true;
    }
  }
  /* Wrong type, or a shape the checks above refused: name what was given. */
  bool right_type =
      (f->type == TL__FIELD_INT || f->type == TL__FIELD_U64)        ? json_is_integer(v)
      : (f->type == TL__FIELD_FLOAT || f->type == TL__FIELD_DOUBLE) ? json_is_number(v)
      : f->type == TL__FIELD_BOOL                                   ? json_is_boolean(v)
      : (f->type == TL__FIELD_ORDER || f->type == TL__FIELD_SIZES || f->type == TL__FIELD_STAGES)
          ? json_is_array(v)
          : json_is_string(v);
  if (right_type)
    tl__problem(p, "%s.%s = %s: expected %s", f->section, f->key, show(v, val, sizeof val), expect);
  else
    tl__problem(p, "%s.%s = %s: expected %s, got %s", f->section, f->key, show(v, val, sizeof val),
                expect, tl_json_kind(v));
  return false;
}

static int find_field(const char* section, const char* key) {
  for (int i = 0; i < tl__config_n_fields; i++)
    if (strcmp(tl__config_fields[i].section, section) == 0 &&
        strcmp(tl__config_fields[i].key, key) == 0)
      return i;
  return -1;
}

/* A field only the other model kind reads is not silently ignored: naming
 * model.n_heads in an MLP's config is refused (it would change nothing). */
static void other_kind_fields(const struct tl_config* cfg, const bool* given, bool* bad,
                              struct tl__problems* p) {
  const int kind_field = find_field("model", "kind");
  if (bad[kind_field]) return;
  for (int i = 0; i < tl__config_n_fields; i++) {
    const struct tl__config_field* f = &tl__config_fields[i];
    if (!given[i] || tl__field_read_by(f, cfg->model.kind)) continue;
    char mine[64] = "";
    size_t len = 0;
    for (int k = 0; k_model_kinds[k]; k++)
      if (f->kinds & (1u << k))
        len += (size_t)snprintf(mine + len, sizeof mine - len, "%s\"%s\"", len ? " or " : "",
                                k_model_kinds[k]);
    tl__problem(p, "%s.%s: only model.kind %s reads it; this model is \"%s\" (remove the key)",
                f->section, f->key, mine, k_model_kinds[cfg->model.kind]);
    bad[i] = true;
  }
}

tl_status tl_config_parse(const char* json_text, const char* source_name, struct tl_config* out) {
  const char* source = source_name ? source_name : "<string>";
  memset(out, 0, sizeof *out);
  json_error_t err;
  json_t* root = json_loads(json_text, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return TL_ERRF(TL_ERR_CONFIG, "%s:%d:%d: JSON syntax error: %s", source, err.line, err.column,
                   err.text);

  struct tl__problems p;
  memset(&p, 0, sizeof p);
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  bool bad[sizeof tl__config_fields / sizeof tl__config_fields[0]] = {false};
  bool given[sizeof tl__config_fields / sizeof tl__config_fields[0]] = {false};

  if (!json_is_object(root)) {
    char val[64];
    tl__problem(&p, "(top level) = %s: expected an object with sections %s", show(root, val, 64),
                "model, mesh, schedule, parallel, train, data, device, checkpoint");
  } else {
    const char* name;
    json_t* section;
    json_object_foreach(root, name, section) {
      bool known = false;
      for (int i = 0; tl__config_sections[i]; i++)
        known |= strcmp(name, tl__config_sections[i]) == 0;
      if (!known) {
        tl__config_unknown_section(name, section, &p);
        continue;
      }
      if (!json_is_object(section)) {
        char val[64];
        tl__problem(&p, "%s = %s: expected an object, got %s", name, show(section, val, 64),
                    tl_json_kind(section));
        continue;
      }
      const char* key;
      json_t* v;
      json_object_foreach(section, key, v) {
        int i = find_field(name, key);
        if (i < 0)
          tl__config_unknown_key(name, key, &p);
        else if (!read_field(&tl__config_fields[i], v, &cfg, &p))
          bad[i] = true;
        if (i >= 0) given[i] = true;
      }
    }
    other_kind_fields(&cfg, given, bad, &p);
    tl__config_validate(&cfg, bad, &p);
  }
  json_decref(root);
  TL_CHECK(tl__problems_status(&p, source));
  *out = cfg;
  return TL_OK;
}

tl_status tl_config_load(const char* path, struct tl_config* out) {
  memset(out, 0, sizeof *out);
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open config '%s': %s", path, strerror(errno));
  enum { k_max = 16 << 20 };
  char* text = (char*)malloc(k_max + 1);
  if (!text) {
    fclose(f);
    return TL_ERRF(TL_ERR_NOMEM, "no memory to read config '%s'", path);
  }
  size_t n = fread(text, 1, k_max + 1, f);
  const int read_error = ferror(f) ? (errno ? errno : EIO) : 0; /* a directory: EISDIR */
  fclose(f);
  if (read_error || n > k_max) {
    free(text);
    return read_error
               ? TL_ERRF(TL_ERR_IO, "cannot read config '%s': %s", path, strerror(read_error))
               : TL_ERRF(TL_ERR_CONFIG, "config '%s' is larger than %d MiB", path, 16);
  }
  text[n] = '\0';
  if (strlen(text) != n) {
    free(text);
    return TL_ERRF(TL_ERR_CONFIG, "config '%s' contains a NUL byte: not a JSON text file", path);
  }
  tl_status st = tl_config_parse(text, path, out);
  free(text);
  return st;
}
