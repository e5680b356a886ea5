/* sharded.c — sharded checkpoint directories (see sharded.h). */
#include "launcher/train/sharded.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/atomic_file.h"

/* version 3: a checksum table after the slice table */
#define PART_VERSION 3

bool tl_sharded_is(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void part_name(char* out, size_t cap, const char* dir, int rank) {
  snprintf(out, cap, "%s/part-%05d.bin", dir, rank);
}

tl_status tl_sharded_write_part(const char* dir, int rank, const tl_model* m,
                                const struct tl_slice* slices, int n_slices, const float* params,
                                const float* adam_m, const float* adam_v) {
  char path[1200];
  part_name(path, sizeof path, dir, rank);
  int64_t elements = 0;
  for (int i = 0; i < n_slices; i++) elements += slices[i].n;
  int32_t h[256];
  tl_checkpoint_header(m, PART_VERSION, h);
  tl_checkpoint_header_set(h, TL_CKPT_H_SLICES, n_slices);
  tl_checkpoint_header_set(h, TL_CKPT_H_ELEMENTS, elements);
  size_t bytes = sizeof(float) * (size_t)elements;
  /* each slice's three arrays' XXH3 64-bit hashes */
  uint64_t* sums = malloc(sizeof(uint64_t) * 3 * (size_t)(n_slices > 0 ? n_slices : 1));
  if (!sums) return TL_ERRF(TL_ERR_NOMEM, "out of memory writing '%s'", path);
  const float* const arrays[3] = {params, adam_m, adam_v};
  int64_t at = 0;
  for (int i = 0; i < n_slices; at += slices[i].n, i++)
    for (int a = 0; a < 3; a++)
      sums[3 * i + a] = XXH3_64bits(arrays[a] + at, sizeof(float) * (size_t)slices[i].n);
  const void* data[6] = {h, slices, sums, params, adam_m, adam_v};
  size_t sizes[6] = {sizeof h,
                     sizeof *slices * (size_t)n_slices,
                     sizeof(uint64_t) * 3 * (size_t)n_slices,
                     bytes,
                     bytes,
                     bytes};
  tl_status st = tl_atomic_file_write_all(path, 6, data, sizes);
  free(sums);
  return st;
}

/* ---- the index ------------------------------------------------------------ */

static json_t* model_json(const tl_model* m) {
  json_t* o = json_object();
  static const char* const kinds[] = {"gpt", "mlp", "llama"};
  json_object_set_new(o, "kind", json_string(kinds[m->cfg.kind]));
  if (m->cfg.kind == TL_MODEL_MLP) {
    json_t* sizes = json_array();
    for (int i = 0; i <= m->cfg.n_mlp_layers; i++)
      json_array_append_new(sizes, json_integer(m->cfg.mlp_sizes[i]));
    json_object_set_new(o, "mlp_sizes", sizes);
  } else {
    json_object_set_new(o, "n_layers", json_integer(m->cfg.n_layers));
    json_object_set_new(o, "n_heads", json_integer(m->cfg.n_heads));
    json_object_set_new(o, "n_embd", json_integer(m->cfg.n_embd));
    json_object_set_new(o, "max_seq_len", json_integer(m->cfg.max_seq_len));
  }
  if (m->cfg.kind == TL_MODEL_LLAMA) {
    const struct tl_model_config* c = &m->cfg;
    json_object_set_new(o, "n_kv_heads", json_integer(tl_config_kv_heads(c)));
    json_object_set_new(o, "ffn_hidden", json_integer(tl_config_ffn_hidden(c)));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "norm_eps", json_real(c->norm_eps));
    json_object_set_new(o, "tie_embeddings", json_boolean(c->tie_embeddings));
    if (c->rope_scaling.factor > 0) {
      json_t* r = json_object();
      json_object_set_new(r, "factor", json_real(c->rope_scaling.factor));
      json_object_set_new(r, "low_freq_factor", json_real(c->rope_scaling.low_freq_factor));
      json_object_set_new(r, "high_freq_factor", json_real(c->rope_scaling.high_freq_factor));
      json_object_set_new(r, "original_max_position_embeddings",
                          json_integer(c->rope_scaling.original_max_position_embeddings));
      json_object_set_new(o, "rope_scaling", r);
    }
  }
  json_object_set_new(o, "vocab_size", json_integer(m->vocab));
  json_object_set_new(o, "padded_vocab_size", json_integer(m->padded_vocab));
  return o;
}

/* Reads part `rank`'s header and slice table. */
static tl_status read_table(const char* dir, int rank, const tl_model* m, FILE** f,
                            struct tl_slice** slices, uint64_t** sums, int64_t* n_slices,
                            int64_t* elements) {
  char path[1200];
  part_name(path, sizeof path, dir, rank);
  *f = fopen(path, "rb");
  if (!*f) return TL_ERRF(TL_ERR_IO, "cannot open checkpoint part '%s': %s", path, strerror(errno));
  int32_t h[256];
  if (fread(h, 1, sizeof h, *f) != sizeof h)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside the 1024-byte header", path);
  TL_CHECK(tl_checkpoint_header_check(path, h, m, PART_VERSION));
  *n_slices = tl_checkpoint_header_get(h, TL_CKPT_H_SLICES);
  *elements = tl_checkpoint_header_get(h, TL_CKPT_H_ELEMENTS);
  if (*n_slices < 0 || *elements < 0 || *elements > m->n_params)
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s' says it holds %lld slices of %lld elements (the model has "
                   "%lld)",
                   path, (long long)*n_slices, (long long)*elements, (long long)m->n_params);
  struct stat sb;
  if (fstat(fileno(*f), &sb) != 0)
    return TL_ERRF(TL_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
  if (*n_slices > (int64_t)sb.st_size / (int64_t)sizeof(struct tl_slice))
    return TL_ERRF(TL_ERR_FORMAT, "'%s' says it holds %lld slices in %lld bytes", path,
                   (long long)*n_slices, (long long)sb.st_size);
  int64_t want =
      1024 + (int64_t)(sizeof(struct tl_slice) + 3 * sizeof(uint64_t)) * *n_slices + 12 * *elements;
  if ((int64_t)sb.st_size != want)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' holds %lld bytes; its header promises %lld", path,
                   (long long)sb.st_size, (long long)want);
  *slices = malloc(sizeof **slices * (size_t)(*n_slices > 0 ? *n_slices : 1));
  if (!*slices) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  if (fread(*slices, sizeof **slices, (size_t)*n_slices, *f) != (size_t)*n_slices)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside its slice table", path);
  *sums = malloc(sizeof(uint64_t) * 3 * (size_t)(*n_slices > 0 ? *n_slices : 1));
  if (!*sums) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  if (fread(*sums, sizeof(uint64_t), 3 * (size_t)*n_slices, *f) != 3 * (size_t)*n_slices)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside its checksum table", path);
  int64_t sum = 0;
  for (int64_t i = 0; i < *n_slices; i++) {
    const struct tl_slice* s = &(*slices)[i];
    if (s->n <= 0 || s->full < 0 || s->n > m->n_params || s->full > m->n_params - s->n)
      return TL_ERRF(TL_ERR_FORMAT, "'%s': slice %lld is elements [%lld, %lld) of a model of %lld",
                     path, (long long)i, (long long)s->full, (long long)(s->full + s->n),
                     (long long)m->n_params);
    sum += s->n;
  }
  if (sum != *elements)
    return TL_ERRF(TL_ERR_FORMAT, "'%s': its slices hold %lld elements, its header says %lld", path,
                   (long long)sum, (long long)*elements);
  return TL_OK;
}

/* Which tensor element `full` belongs to. */
static int tensor_at(const tl_model* m, int64_t full) {
  for (int k = 0; k < m->n_tensors; k++)
    if (full >= m->tensors[k].offset && full < m->tensors[k].offset + m->tensors[k].numel) return k;
  return -1;
}

tl_status tl_sharded_commit(const char* dir, const char* path, const tl_model* m,
                            const struct tl_train_state* s, int n_parts, const int* ranks,
                            const int64_t* n_slices, const int64_t* elements) {
  json_t* root = json_object();
  json_object_set_new(root, "format", json_string("trellis-sharded"));
  json_object_set_new(root, "version", json_integer(1));
  json_object_set_new(root, "step", json_integer(s->step));
  json_object_set_new(root, "data_position", json_integer(s->data_position));
  json_object_set_new(root, "n_params", json_integer(m->n_params));
  json_object_set_new(root, "model", model_json(m));
  json_t* tensors = json_array();
  for (int k = 0; k < m->n_tensors; k++) {
    const struct tl_param_tensor* t = &m->tensors[k];
    json_t* shape = json_array();
    for (int d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    json_t* o = json_object();
    json_object_set_new(o, "name", json_string(t->name));
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "offset", json_integer(t->offset));
    json_object_set_new(o, "numel", json_integer(t->numel));
    json_array_append_new(tensors, o);
  }
  json_object_set_new(root, "tensors", tensors);
  json_t* files = json_array();
  tl_status st = TL_OK;
  for (int i = 0; i < n_parts && st == TL_OK; i++) {
    /* which tensors the part holds how much of, from its slice table */
    FILE* f = NULL;
    struct tl_slice* sl = NULL;
    uint64_t* sums = NULL;
    int64_t ns = 0, el = 0;
    st = read_table(dir, ranks[i], m, &f, &sl, &sums, &ns, &el);
    if (st == TL_OK && (ns != n_slices[i] || el != elements[i]))
      st = TL_ERRF(TL_ERR_INTERNAL,
                   "checkpoint part %d holds %lld slices, %lld elements; its rank "
                   "wrote %lld, %lld",
                   ranks[i], (long long)ns, (long long)el, (long long)n_slices[i],
                   (long long)elements[i]);
    json_t* held = json_object();
    for (int64_t j = 0; st == TL_OK && j < ns; j++) {
      for (int64_t at = sl[j].full; at < sl[j].full + sl[j].n;) {
        int k = tensor_at(m, at);
        if (k < 0) {
          st = TL_ERRF(TL_ERR_INTERNAL, "element %lld of the model lies in no tensor",
                       (long long)at);
          break;
        }
        int64_t end = m->tensors[k].offset + m->tensors[k].numel;
        if (end > sl[j].full + sl[j].n) end = sl[j].full + sl[j].n;
        json_t* v = json_object_get(held, m->tensors[k].name);
        json_object_set_new(held, m->tensors[k].name,
                            json_integer((v ? json_integer_value(v) : 0) + (end - at)));
        at = end;
      }
    }
    char name[64];
    snprintf(name, sizeof name, "part-%05d.bin", ranks[i]);
    json_t* o = json_object();
    json_object_set_new(o, "file", json_string(name));
    json_object_set_new(o, "rank", json_integer(ranks[i]));
    json_object_set_new(o, "elements", json_integer(el));
    json_object_set_new(o, "slices", json_integer(ns));
    json_object_set_new(o, "tensors", held);
    json_array_append_new(files, o);
    if (f) fclose(f);
    free(sl);
    free(sums);
  }
  json_object_set_new(root, "files", files);
  char* text = st == TL_OK ? json_dumps(root, JSON_INDENT(1)) : NULL;
  json_decref(root);
  if (st == TL_OK && !text) st = TL_ERRF(TL_ERR_NOMEM, "out of memory writing a checkpoint index");
  if (st == TL_OK) {
    char ipath[1200];
    snprintf(ipath, sizeof ipath, "%s/index.json", dir);
    const void* data[2] = {text, "\n"};
    size_t sizes[2] = {strlen(text), 1};
    st = tl_atomic_file_write_all(ipath, 2, data, sizes);
  }
  free(text);
  /* what a reader will check, before the directory takes its name: every
   * element of the model in exactly one part */
  if (st == TL_OK) {
    tl_sharded_reader* r = NULL;
    st = tl_sharded_open(dir, m, &r);
    tl_sharded_close(r);
  }
  if (st == TL_OK && rename(dir, path) != 0)
    st = TL_ERRF(TL_ERR_IO, "cannot rename '%s' to '%s': %s", dir, path, strerror(errno));
  return st;
}

/* ---- reading ---------------------------------------------------------------- */

struct run {
  int64_t full, n;
  int part;
  int64_t at;      /* element index in the part's data sections */
  uint64_t sum[3]; /* its arrays' checksums */
  bool checked[3]; /* whether they were verified (the first read does it) */
};

struct tl_sharded_reader {
  char path[1024];
  const tl_model* m;
  struct tl_train_state state;
  int n_parts;
  FILE** files;
  int64_t* elements; /* per part */
  int* ranks;        /* per part: the rank that wrote it (its file's name) */
  int64_t* data;     /* per part: byte offset of its first section */
  struct run* runs;  /* every part's slices, by full */
  int64_t n_runs;
};

static int by_full(const void* a, const void* b) {
  const struct run *x = a, *y = b;
  return x->full < y->full ? -1 : x->full > y->full;
}

void tl_sharded_close(tl_sharded_reader* r) {
  if (!r) return;
  for (int i = 0; i < r->n_parts && r->files; i++)
    if (r->files[i]) fclose(r->files[i]);
  free(r->files);
  free(r->elements);
  free(r->ranks);
  free(r->data);
  free(r->runs);
  free(r);
}

static tl_status index_int(json_t* root, const char* path, const char* key, int64_t* out) {
  json_t* v = json_object_get(root, key);
  if (!json_is_integer(v))
    return TL_ERRF(TL_ERR_FORMAT, "'%s/index.json': \"%s\" is missing or not an integer", path,
                   key);
  *out = json_integer_value(v);
  return TL_OK;
}

/* The index's "model" must describe m exactly: the same parameter count
 * can be another shape (a Llama's rope_theta changes no count at all). */
static tl_status same_model(json_t* root, const char* ipath, const tl_model* m) {
  json_t* have = json_object_get(root, "model");
  json_t* want = model_json(m);
  tl_status st = TL_OK;
  if (!json_is_object(have)) {
    st = TL_ERRF(TL_ERR_FORMAT, "'%s': \"model\" is missing or not an object", ipath);
  } else if (!json_equal(have, want)) {
    const char* key;
    json_t* v;
    json_object_foreach(want, key, v) {
      json_t* h = json_object_get(have, key);
      if (h && json_equal(h, v)) continue;
      char* a = h ? json_dumps(h, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
      char* b = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
      st = TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' has model %s=%s but the config says %s", ipath,
                   key, a ? a : "(none)", b ? b : "?");
      free(a);
      free(b);
      break;
    }
    if (st == TL_OK) /* a key the model does not have */
      json_object_foreach(have, key, v) if (!json_object_get(want, key)) {
        st = TL_ERRF(TL_ERR_FORMAT,
                     "checkpoint '%s' describes its model with \"%s\", which this model (kind "
                     "\"%s\") does not have",
                     ipath, key, json_string_value(json_object_get(want, "kind")));
        break;
      }
  }
  json_decref(want);
  return st;
}

tl_status tl_sharded_open(const char* path, const tl_model* m, tl_sharded_reader** out) {
  *out = NULL;
  char ipath[1200];
  snprintf(ipath, sizeof ipath, "%s/index.json", path);
  json_error_t err;
  json_t* root = json_load_file(ipath, 0, &err);
  if (!root)
    return TL_ERRF(TL_ERR_FORMAT, "cannot read checkpoint index '%s': %s (line %d)", ipath,
                   err.text, err.line);
  tl_sharded_reader* r = calloc(1, sizeof *r);
  tl_status st = r ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory opening '%s'", path);
  int64_t version = 0, n_params = 0;
  json_t* format = json_object_get(root, "format");
  if (st == TL_OK &&
      (!json_is_string(format) || strcmp(json_string_value(format), "trellis-sharded") != 0))
    st = TL_ERRF(TL_ERR_FORMAT, "'%s': \"format\" is not \"trellis-sharded\"", ipath);
  if (st == TL_OK) st = index_int(root, path, "version", &version);
  if (st == TL_OK && version != 1)
    st = TL_ERRF(TL_ERR_FORMAT, "'%s': version %lld, expected 1", ipath, (long long)version);
  if (st == TL_OK) st = index_int(root, path, "n_params", &n_params);
  if (st == TL_OK && n_params != m->n_params)
    st = TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s' holds %lld parameters; the model has %lld", path,
                 (long long)n_params, (long long)m->n_params);
  if (st == TL_OK) st = same_model(root, ipath, m);
  if (st == TL_OK) st = index_int(root, path, "step", &r->state.step);
  if (st == TL_OK) st = index_int(root, path, "data_position", &r->state.data_position);
  json_t* files = json_object_get(root, "files");
  if (st == TL_OK && !json_is_array(files))
    st = TL_ERRF(TL_ERR_FORMAT, "'%s': \"files\" is missing or not a list", ipath);
  if (st == TL_OK) {
    snprintf(r->path, sizeof r->path, "%s", path);
    r->m = m;
    r->n_parts = (int)json_array_size(files);
    r->files = calloc((size_t)(r->n_parts + 1), sizeof(FILE*));
    r->elements = calloc((size_t)(r->n_parts + 1), sizeof(int64_t));
    r->data = calloc((size_t)(r->n_parts + 1), sizeof(int64_t));
    r->ranks = calloc((size_t)(r->n_parts + 1), sizeof(int));
    if (!r->files || !r->elements || !r->data || !r->ranks)
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory opening '%s'", path);
  }
  struct tl_slice** tables = st == TL_OK ? calloc((size_t)(r->n_parts + 1), sizeof *tables) : NULL;
  uint64_t** sums = st == TL_OK ? calloc((size_t)(r->n_parts + 1), sizeof *sums) : NULL;
  int64_t* counts = st == TL_OK ? calloc((size_t)(r->n_parts + 1), sizeof *counts) : NULL;
  if (st == TL_OK && (!tables || !counts || !sums))
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory opening '%s'", path);
  for (int i = 0; st == TL_OK && i < r->n_parts; i++) {
    int64_t rank = -1;
    st = index_int(json_array_get(files, (size_t)i), path, "rank", &rank);
    if (st == TL_OK)
      st = read_table(path, (int)rank, m, &r->files[i], &tables[i], &sums[i], &counts[i],
                      &r->elements[i]);
    if (st == TL_OK) {
      r->ranks[i] = (int)rank;
      r->data[i] = 1024 + (int64_t)(sizeof(struct tl_slice) + 3 * sizeof(uint64_t)) * counts[i];
      r->n_runs += counts[i];
    }
  }
  if (st == TL_OK) {
    r->runs = malloc(sizeof *r->runs * (size_t)(r->n_runs > 0 ? r->n_runs : 1));
    if (!r->runs) st = TL_ERRF(TL_ERR_NOMEM, "out of memory opening '%s'", path);
  }
  int64_t k = 0;
  for (int i = 0; st == TL_OK && i < r->n_parts; i++)
    for (int64_t j = 0, at = 0; j < counts[i]; at += tables[i][j].n, j++)
      r->runs[k++] = (struct run){tables[i][j].full,
                                  tables[i][j].n,
                                  i,
                                  at,
                                  {sums[i][3 * j], sums[i][3 * j + 1], sums[i][3 * j + 2]},
                                  {false, false, false}};
  if (st == TL_OK) {
    /* the parts tile the full vector: every element once */
    qsort(r->runs, (size_t)r->n_runs, sizeof *r->runs, by_full);
    int64_t next = 0;
    for (int64_t j = 0; j < r->n_runs && st == TL_OK; j++) {
      if (r->runs[j].full != next)
        st = TL_ERRF(TL_ERR_FORMAT, "checkpoint '%s': elements %lld-%lld of the parameters are %s",
                     path, (long long)(r->runs[j].full < next ? r->runs[j].full : next),
                     (long long)(r->runs[j].full < next ? next : r->runs[j].full) - 1,
                     r->runs[j].full < next ? "in two parts" : "in no part");
      next = r->runs[j].full + r->runs[j].n;
    }
    if (st == TL_OK && next != m->n_params)
      st = TL_ERRF(TL_ERR_FORMAT,
                   "checkpoint '%s': elements %lld-%lld of the parameters are in no "
                   "part",
                   path, (long long)next, (long long)m->n_params - 1);
  }
  for (int i = 0; tables && i < r->n_parts; i++) free(tables[i]);
  for (int i = 0; sums && i < r->n_parts; i++) free(sums[i]);
  free(tables);
  free(sums);
  free(counts);
  json_decref(root);
  if (st != TL_OK) {
    tl_sharded_close(r);
    return st;
  }
  *out = r;
  return TL_OK;
}

struct tl_train_state tl_sharded_state(const tl_sharded_reader* r) {
  return r->state;
}

static const char* const k_arrays[3] = {"parameters", "first AdamW moments",
                                        "second AdamW moments"};

/* Reads all of run u's array `which` through its checksum, copying out
 * elements [skip, skip + take) of it; a mismatch names the part and the
 * tensor the run begins in. */
static tl_status read_checked(tl_sharded_reader* r, struct run* u, int which, int64_t skip,
                              int64_t take, float* out) {
  FILE* f = r->files[u->part];
  int64_t at = r->data[u->part] + 4 * ((int64_t)which * r->elements[u->part] + u->at);
  if (fseeko(f, (off_t)at, SEEK_SET) != 0)
    return TL_ERRF(TL_ERR_IO, "cannot read checkpoint '%s' (part %d): %s", r->path, u->part,
                   strerror(errno));
  XXH3_state_t* h = XXH3_createState();
  if (!h) return TL_ERRF(TL_ERR_NOMEM, "out of memory verifying checkpoint '%s'", r->path);
  XXH3_64bits_reset(h);
  enum { CHUNK = 1 << 18 };
  static float buf[CHUNK];
  tl_status st = TL_OK;
  for (int64_t done = 0; done < u->n && st == TL_OK;) {
    int64_t len = u->n - done < CHUNK ? u->n - done : CHUNK;
    if (fread(buf, sizeof(float), (size_t)len, f) != (size_t)len) {
      st = TL_ERRF(TL_ERR_IO, "cannot read checkpoint '%s' (part %d): %s", r->path, u->part,
                   strerror(errno));
      break;
    }
    XXH3_64bits_update(h, buf, sizeof(float) * (size_t)len);
    /* the wanted elements [skip, skip + take) within [done, done + len) */
    int64_t lo = skip > done ? skip : done;
    int64_t hi = skip + take < done + len ? skip + take : done + len;
    if (hi > lo) memcpy(out + (lo - skip), buf + (lo - done), sizeof(float) * (size_t)(hi - lo));
    done += len;
  }
  uint64_t got = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  TL_CHECK(st);
  if (got != u->sum[which]) {
    int k = tensor_at(r->m, u->full);
    return TL_ERRF(TL_ERR_FORMAT,
                   "checkpoint '%s' is damaged: part-%05d.bin's %s of elements %lld-%lld "
                   "(from tensor %s) do not match their checksum",
                   r->path, r->ranks[u->part], k_arrays[which], (long long)u->full,
                   (long long)(u->full + u->n - 1), k >= 0 ? r->m->tensors[k].name : "?");
  }
  u->checked[which] = true;
  return TL_OK;
}

tl_status tl_sharded_read(tl_sharded_reader* r, int which, int64_t full, int64_t n, float* out) {
  /* the first run ending past `full` */
  int64_t lo = 0, hi = r->n_runs;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (r->runs[mid].full + r->runs[mid].n <= full)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (int64_t j = lo; j < r->n_runs && n > 0; j++) {
    struct run* u = &r->runs[j];
    int64_t skip = full - u->full, take = u->n - skip < n ? u->n - skip : n;
    if (!u->checked[which]) { /* the first read of a run reads all of it, verified */
      TL_CHECK(read_checked(r, u, which, skip, take, out));
    } else {
      FILE* f = r->files[u->part];
      int64_t at = r->data[u->part] + 4 * ((int64_t)which * r->elements[u->part] + u->at + skip);
      if (fseeko(f, (off_t)at, SEEK_SET) != 0 ||
          fread(out, sizeof(float), (size_t)take, f) != (size_t)take)
        return TL_ERRF(TL_ERR_IO, "cannot read checkpoint '%s' (part %d): %s", r->path, u->part,
                       strerror(errno));
    }
    out += take, full += take, n -= take;
  }
  return n == 0 ? TL_OK
                : TL_ERRF(TL_ERR_INTERNAL, "checkpoint '%s' has no element %lld", r->path,
                          (long long)full);
}
