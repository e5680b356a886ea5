/* safetensors.c — the header parsed with jansson and checked whole, the
 * data read with pread and widened to fp32, the header of a file to write
 * built with jansson. */
#include "launcher/train/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"

static const char* const k_dtypes[] = {"F32", "BF16", "F16"};
static const int k_sizes[] = {4, 2, 2};

const char* tl_st_dtype_name(tl_st_dtype d) {
  return d >= TL_ST_F32 && d <= TL_ST_F16 ? k_dtypes[d] : "?";
}

static tl_status read_all(int fd, void* dst, size_t bytes, int64_t at, const char* path) {
  char* p = dst;
  while (bytes > 0) {
    ssize_t r = pread(fd, p, bytes, (off_t)at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return TL_ERRF(TL_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    if (r == 0)
      return TL_ERRF(TL_ERR_FORMAT, "'%s' ends early (at byte %lld)", path, (long long)at);
    p += r, at += r, bytes -= (size_t)r;
  }
  return TL_OK;
}

void tl_st_close(tl_st_file* f) {
  if (!f) return;
  if (f->tensors)
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
  free(f->tensors);
  if (f->fd > 0) close(f->fd);
  memset(f, 0, sizeof *f);
}

static int by_begin(const void* a, const void* b) {
  const struct tl_st_tensor *x = *(const struct tl_st_tensor*const*)a,
                            *y = *(const struct tl_st_tensor*const*)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* One header entry, checked. */
static tl_status parse_tensor(const char* path, const char* name, json_t* v,
                              struct tl_st_tensor* t) {
  if (!json_is_object(v))
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s': tensor '%s': expected an object with dtype, shape and "
                   "data_offsets",
                   path, name);
  json_t* dtype = json_object_get(v, "dtype");
  json_t* shape = json_object_get(v, "shape");
  json_t* offs = json_object_get(v, "data_offsets");
  if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offs) ||
      json_array_size(offs) != 2)
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s': tensor '%s': expected \"dtype\" (a string), \"shape\" (a list) and "
                   "\"data_offsets\" (two integers)",
                   path, name);
  int d = -1;
  for (int k = 0; k < 3; k++)
    if (strcmp(json_string_value(dtype), k_dtypes[k]) == 0) d = k;
  if (d < 0)
    return TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' is %s; trellis reads F32, BF16 and F16", path,
                   name, json_string_value(dtype));
  t->dtype = (tl_st_dtype)d;
  if (json_array_size(shape) > TL_ST_MAX_DIMS)
    return TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' has %zu dimensions; at most %d are read", path,
                   name, json_array_size(shape), TL_ST_MAX_DIMS);
  t->n_dims = (int)json_array_size(shape);
  t->numel = 1;
  for (int i = 0; i < t->n_dims; i++) {
    json_t* e = json_array_get(shape, (size_t)i);
    json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
    if (x < 0 || (x > 0 && t->numel > INT64_MAX / 4 / x))
      return TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s': dimension %d is not a size", path, name, i);
    t->shape[i] = x;
    t->numel *= x;
  }
  json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
  if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
      json_integer_value(e) < json_integer_value(b))
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s': tensor '%s': data_offsets are not [begin, end) with "
                   "0 <= begin <= end",
                   path, name);
  t->begin = json_integer_value(b);
  t->end = json_integer_value(e);
  if (t->end - t->begin != t->numel * k_sizes[d])
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s': tensor '%s' is %s of %lld elements (%lld bytes), but its data_offsets "
                   "span %lld bytes",
                   path, name, k_dtypes[d], (long long)t->numel, (long long)t->numel * k_sizes[d],
                   (long long)(t->end - t->begin));
  t->name = strdup(name);
  return t->name ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
}

tl_status tl_st_open(const char* path, tl_st_file* f) {
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "%s", path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return TL_ERRF(TL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  f->fd = fd;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    tl_st_close(f);
    return TL_ERRF(TL_ERR_IO, "'%s' is not a regular file", path);
  }
  const int64_t size = sb.st_size;
  unsigned char len8[8];
  tl_status st = size < 8 ? TL_ERRF(TL_ERR_FORMAT,
                                    "'%s' is %lld bytes: too short for a safetensors header "
                                    "(8 bytes of length, then JSON)",
                                    path, (long long)size)
                          : read_all(fd, len8, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; st == TL_OK && i >= 0; i--) n = n << 8 | len8[i];
  if (st == TL_OK && n > TL_ST_HEADER_MAX)
    st = TL_ERRF(TL_ERR_FORMAT,
                 "'%s': the header says it is %llu bytes long; safetensors headers are at most "
                 "%d (not a safetensors file?)",
                 path, (unsigned long long)n, TL_ST_HEADER_MAX);
  else if (st == TL_OK && (int64_t)(8 + n) > size)
    st = TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: %lld bytes, its header alone claims %llu", path,
                 (long long)size, (unsigned long long)(8 + n));
  char* text = st == TL_OK ? malloc(n + 1) : NULL;
  if (st == TL_OK && !text) st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  if (st == TL_OK) st = read_all(fd, text, n, 8, path);
  json_t* root = NULL;
  if (st == TL_OK) {
    json_error_t err;
    root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &err);
    if (!root)
      st = TL_ERRF(TL_ERR_FORMAT, "'%s': the header is not JSON: %s (at byte %d of it)", path,
                   err.text, err.position);
    else if (!json_is_object(root))
      st = TL_ERRF(TL_ERR_FORMAT, "'%s': the header is JSON but not an object of tensors", path);
  }
  free(text);
  if (st == TL_OK) {
    f->data_start = 8 + (int64_t)n;
    f->tensors = calloc(json_object_size(root) + 1, sizeof *f->tensors);
    if (!f->tensors) st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
    const char* key;
    json_t* v;
    json_object_foreach(root, key, v) {
      if (st != TL_OK) break;
      if (strcmp(key, "__metadata__") == 0) {
        const char* mk;
        json_t* mv;
        if (!json_is_object(v)) {
          st = TL_ERRF(TL_ERR_FORMAT, "'%s': __metadata__ is not an object", path);
          break;
        }
        json_object_foreach(v, mk, mv) if (!json_is_string(mv)) {
          st = TL_ERRF(TL_ERR_FORMAT, "'%s': __metadata__ \"%s\" is not a string", path, mk);
          break;
        }
        continue;
      }
      st = parse_tensor(path, key, v, &f->tensors[f->n_tensors]);
      if (st == TL_OK) f->n_tensors++;
    }
  }
  json_decref(root);
  /* the tensors tile the data: sorted by offset, each begins where the last
   * ended, and the last ends where the file does */
  struct tl_st_tensor** order =
      st == TL_OK ? malloc(sizeof *order * (size_t)(f->n_tensors + 1)) : NULL;
  if (st == TL_OK && !order) st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  if (st == TL_OK) {
    for (int i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, by_begin);
    int64_t at = 0;
    for (int i = 0; i < f->n_tensors && st == TL_OK; i++) {
      const struct tl_st_tensor* t = order[i];
      if (t->begin > at)
        st = TL_ERRF(TL_ERR_FORMAT,
                     "'%s': a hole of %lld bytes before tensor '%s' (its data_offsets begin at "
                     "%lld, the tensor before ends at %lld)",
                     path, (long long)(t->begin - at), t->name, (long long)t->begin, (long long)at);
      else if (t->begin < at)
        st = TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' overlaps the tensor before it", path,
                     t->name);
      at = t->end;
    }
    const int64_t data = size - f->data_start;
    if (st == TL_OK && at > data)
      st = TL_ERRF(TL_ERR_FORMAT,
                   "'%s' is cut short: its tensors need %lld bytes after the header, the file "
                   "has %lld (tensor '%s' is not all there)",
                   path, (long long)at, (long long)data, order[f->n_tensors - 1]->name);
    else if (st == TL_OK && at < data)
      st = TL_ERRF(TL_ERR_FORMAT,
                   "'%s' is longer than its header says: %lld bytes after the tensors' %lld", path,
                   (long long)(data - at), (long long)at);
  }
  free(order);
  if (st != TL_OK) tl_st_close(f);
  return st;
}

const struct tl_st_tensor* tl_st_find(const tl_st_file* f, const char* name) {
  for (int i = 0; i < f->n_tensors; i++)
    if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
  return NULL;
}

tl_status tl_st_read(const tl_st_file* f, const struct tl_st_tensor* t, int64_t first, int64_t n,
                     float* out) {
  if (first < 0 || n < 0 || first + n > t->numel)
    return TL_ERRF(TL_ERR_INVALID, "'%s': elements [%lld, %lld) of tensor '%s' of %lld", f->path,
                   (long long)first, (long long)(first + n), t->name, (long long)t->numel);
  const int es = k_sizes[t->dtype];
  const int64_t at = f->data_start + t->begin + first * es;
  if (t->dtype == TL_ST_F32) return read_all(f->fd, out, (size_t)n * 4, at, f->path);
  /* 16-bit: read into the back half of out, widen from the front */
  uint16_t* half = (uint16_t*)(out + n) - n;
  TL_CHECK(read_all(f->fd, half, (size_t)n * 2, at, f->path));
  for (int64_t i = 0; i < n; i++) {
    const uint16_t x = half[i]; /* read before out[i] (which may share its bytes) is written */
    out[i] = t->dtype == TL_ST_BF16 ? tl_bf16_to_f32(x) : tl_f16_to_f32(x);
  }
  return TL_OK;
}

tl_status tl_st_header(const struct tl_st_entry* e, int n, char** out, int64_t* len) {
  *out = NULL;
  *len = 0;
  json_t* root = json_object();
  json_t* meta = json_object();
  json_object_set_new(meta, "format", json_string("pt"));
  json_object_set_new(root, "__metadata__", meta);
  for (int i = 0; i < n; i++) {
    json_t* t = json_object();
    json_t* shape = json_array();
    for (int d = 0; d < e[i].n_dims; d++) json_array_append_new(shape, json_integer(e[i].shape[d]));
    json_object_set_new(t, "dtype", json_string("F32"));
    json_object_set_new(t, "shape", shape);
    json_object_set_new(t, "data_offsets",
                        json_pack("[II]", (json_int_t)e[i].begin, (json_int_t)e[i].end));
    json_object_set_new(root, e[i].name, t);
  }
  char* text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!text) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a safetensors header");
  const size_t t = strlen(text), padded = (t + 7) / 8 * 8;
  char* buf = malloc(8 + padded);
  if (!buf) {
    free(text);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for a safetensors header");
  }
  for (int i = 0; i < 8; i++) buf[i] = (char)((uint64_t)padded >> (8 * i) & 0xff);
  memcpy(buf + 8, text, t);
  memset(buf + 8 + t, ' ', padded - t);
  free(text);
  *out = buf;
  *len = 8 + (int64_t)padded;
  return TL_OK;
}
