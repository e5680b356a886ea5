/* tokens.c — token files, the byte tokenizer, the default corpus, batches. */
#include "launcher/tokens.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/atomic_file.h"

tl_status tl_tokens_open(const char* path, int vocab, tl_token_file* out) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return TL_ERRF(TL_ERR_IO, "cannot open token file '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return TL_ERRF(TL_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
  }
  size_t size = (size_t)st.st_size;
  if (size < 1024) {
    close(fd);
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s' is %zu bytes, shorter than the 1024-byte header of a token file", path,
                   size);
  }
  void* map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return TL_ERRF(TL_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
  const int32_t* h = map;
  tl_status bad = TL_OK;
  if (h[0] != TL_TOKENS_MAGIC)
    bad = TL_ERRF(TL_ERR_FORMAT, "'%s' is not a token file: magic %d, expected %d", path, h[0],
                  TL_TOKENS_MAGIC);
  else if (h[1] != TL_TOKENS_VERSION)
    bad = TL_ERRF(TL_ERR_FORMAT, "'%s': token file version %d, expected %d", path, h[1],
                  TL_TOKENS_VERSION);
  else if (h[2] < 0 || size != 1024 + 2 * (size_t)h[2])
    bad = TL_ERRF(TL_ERR_FORMAT,
                  "'%s' is cut short or padded: the header promises %d tokens (%zu bytes), the "
                  "file has %zu bytes",
                  path, h[2], 1024 + 2 * (size_t)(h[2] < 0 ? 0 : h[2]), size);
  if (bad != TL_OK) {
    munmap(map, size);
    return bad;
  }
  out->map = map;
  out->map_bytes = size;
  out->tokens = (const uint16_t*)((const char*)map + 1024);
  out->n_tokens = h[2];
  for (int64_t i = 0; i < out->n_tokens; i++)
    if (out->tokens[i] > out->max_token) out->max_token = out->tokens[i];
  if (vocab > 0 && out->max_token >= vocab) {
    int64_t at = 0;
    while (out->tokens[at] < vocab) at++;
    tl_status e = TL_ERRF(TL_ERR_FORMAT,
                          "'%s': token %d at position %lld is outside the model's vocabulary "
                          "(model.vocab_size=%d)",
                          path, out->tokens[at], (long long)at, vocab);
    tl_tokens_close(out);
    return e;
  }
  return TL_OK;
}

void tl_tokens_close(tl_token_file* f) {
  if (f && f->map) munmap(f->map, f->map_bytes);
  if (f) memset(f, 0, sizeof *f);
}

tl_status tl_tokens_write(const char* path, const uint16_t* tokens, int64_t n) {
  if (n < 0 || n > INT32_MAX)
    return TL_ERRF(TL_ERR_INVALID, "%lld tokens do not fit a token file (at most %d)", (long long)n,
                   INT32_MAX);
  int32_t header[256] = {TL_TOKENS_MAGIC, TL_TOKENS_VERSION, (int32_t)n};
  tl_atomic_file af;
  TL_CHECK(tl_atomic_file_open(&af, path));
  tl_status st = tl_atomic_file_write(&af, header, sizeof header);
  if (st == TL_OK) st = tl_atomic_file_write(&af, tokens, sizeof(uint16_t) * (size_t)n);
  if (st != TL_OK) {
    tl_atomic_file_abort(&af);
    return st;
  }
  return tl_atomic_file_commit(&af);
}

tl_status tl_tokens_write_random(const char* path, int64_t n, int vocab, uint64_t seed) {
  if (vocab < 1 || vocab > 65536)
    return TL_ERRF(TL_ERR_INVALID, "random tokens: vocabulary %d; expected 1 to 65536", vocab);
  if (n < 0 || n > INT32_MAX)
    return TL_ERRF(TL_ERR_INVALID, "%lld tokens do not fit a token file (at most %d)", (long long)n,
                   INT32_MAX);
  float* u = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  uint16_t* tok = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
  tl_status st =
      u && tok ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
  if (st == TL_OK) {
    tl_rng_uniform(seed, 0, 0, (size_t)n, 0.0f, (float)vocab, u);
    for (int64_t i = 0; i < n; i++) {
      int v = (int)u[i];
      tok[i] = (uint16_t)(v < vocab ? v : vocab - 1); /* u < vocab, but float rounding */
    }
    st = tl_tokens_write(path, tok, n);
  }
  free(u);
  free(tok);
  return st;
}

static tl_status read_all(const char* path, char** data, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char* buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    char* bigger = realloc(buf, cap *= 2);
    if (!bigger) free(buf);
    buf = bigger;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  if (err) {
    free(buf);
    return TL_ERRF(TL_ERR_IO, "error reading '%s'", path);
  }
  *data = buf;
  *size = n;
  return TL_OK;
}

static tl_status bytes_to_tokens(const char* text, size_t n, uint16_t** tokens) {
  *tokens = malloc(sizeof(uint16_t) * (n ? n : 1));
  if (!*tokens) return TL_ERRF(TL_ERR_NOMEM, "out of memory for %zu tokens", n);
  for (size_t i = 0; i < n; i++) (*tokens)[i] = (unsigned char)text[i];
  return TL_OK;
}

tl_status tl_tokens_from_text_file(const char* text_path, uint16_t** tokens, int64_t* n) {
  char* text = NULL;
  size_t size = 0;
  TL_CHECK(read_all(text_path, &text, &size));
  tl_status st = bytes_to_tokens(text, size, tokens);
  free(text);
  *n = st == TL_OK ? (int64_t)size : 0;
  return st;
}

static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Plain fortune files: no extension (skips .dat indexes and .u8 links). */
static int is_fortune_file(const char* dir, const char* name) {
  if (name[0] == '.' || strchr(name, '.')) return 0;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

tl_status tl_corpus_build(const char* train_path, const char* val_path, int64_t* n_train,
                          int64_t* n_val) {
  DIR* d = opendir(TL_CORPUS_DIR);
  if (!d)
    return TL_ERRF(TL_ERR_IO,
                   "the default corpus needs Debian's 'fortunes' package (%s: %s); run "
                   "tools/setup.sh",
                   TL_CORPUS_DIR, strerror(errno));
  char* names[512];
  int n_names = 0;
  struct dirent* e;
  while ((e = readdir(d)) && n_names < 512)
    if (is_fortune_file(TL_CORPUS_DIR, e->d_name)) names[n_names++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n_names, sizeof names[0], by_name);
  /* concatenate, dropping the '%' lines that separate fortunes */
  size_t cap = 1 << 20, len = 0;
  char* text = malloc(cap);
  tl_status st = text ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory building the corpus");
  for (int i = 0; i < n_names && st == TL_OK; i++) {
    char path[1024], *data = NULL;
    size_t size = 0;
    snprintf(path, sizeof path, "%s/%s", TL_CORPUS_DIR, names[i]);
    st = read_all(path, &data, &size);
    for (size_t p = 0; st == TL_OK && p < size;) {
      size_t q = p;
      while (q < size && data[q] != '\n') q++;
      size_t line = q - p + (q < size); /* with its newline */
      int separator = (q - p == 1 && data[p] == '%');
      if (!separator) {
        if (len + line > cap) {
          char* bigger = realloc(text, cap = 2 * (len + line));
          if (!bigger) {
            st = TL_ERRF(TL_ERR_NOMEM, "out of memory building the corpus");
            break;
          }
          text = bigger;
        }
        memcpy(text + len, data + p, line);
        len += line;
      }
      p += line;
    }
    free(data);
  }
  for (int i = 0; i < n_names; i++) free(names[i]);
  if (st == TL_OK && len < 4096)
    st = TL_ERRF(TL_ERR_IO, "%s holds only %zu bytes of text; is 'fortunes' installed?",
                 TL_CORPUS_DIR, len);
  uint16_t* tokens = NULL;
  if (st == TL_OK) st = bytes_to_tokens(text, len, &tokens);
  if (st == TL_OK) {
    size_t split = len * 9 / 10;
    while (split < len && text[split - 1] != '\n') split++;
    st = tl_tokens_write(train_path, tokens, (int64_t)split);
    if (st == TL_OK) st = tl_tokens_write(val_path, tokens + split, (int64_t)(len - split));
    if (st == TL_OK) *n_train = (int64_t)split, *n_val = (int64_t)(len - split);
  }
  free(tokens);
  free(text);
  return st;
}

tl_status tl_loader_init(tl_loader* l, const tl_token_file* f, int b, int t, int64_t position) {
  int64_t need = (int64_t)b * t + 1;
  if (f->n_tokens < need)
    return TL_ERRF(TL_ERR_CONFIG,
                   "the token file holds %lld tokens; a batch of %d x %d needs at least %lld",
                   (long long)f->n_tokens, b, t, (long long)need);
  if (position < 0 || position + need > f->n_tokens)
    return TL_ERRF(TL_ERR_FORMAT, "data position %lld is outside the token file (%lld tokens)",
                   (long long)position, (long long)f->n_tokens);
  l->file = f;
  l->b = b;
  l->t = t;
  l->position = position;
  return TL_OK;
}

void tl_loader_get(const tl_loader* l, int seq0, int n_seq, int32_t* inputs, int32_t* targets) {
  for (int s = 0; s < n_seq; s++) {
    const uint16_t* src = l->file->tokens + l->position + (int64_t)(seq0 + s) * l->t;
    for (int i = 0; i < l->t; i++) {
      inputs[s * l->t + i] = src[i];
      targets[s * l->t + i] = src[i + 1];
    }
  }
}

void tl_loader_advance(tl_loader* l) {
  int64_t step = (int64_t)l->b * l->t;
  l->position += step;
  if (l->position + step + 1 > l->file->n_tokens) l->position = 0;
}
