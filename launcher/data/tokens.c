/* tokens.c — token files and the byte tokenizer (see tokens.h). */
#include "launcher/data/tokens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/rng.h"

tl_status tl_tokens_open(const char* path, int vocab, tl_token_file* out) {
  memset(out, 0, sizeof *out);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return TL_ERRF(TL_ERR_IO, "cannot open token file '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return TL_ERRF(TL_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return TL_ERRF(TL_ERR_IO, "'%s' is a directory; expected a token file", path);
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
  int width = 0;
  if (h[0] == TL_TOKENS_MAGIC && h[1] == TL_TOKENS_VERSION)
    width = 2;
  else if (h[0] == TL_TOKENS32_MAGIC && h[1] == TL_TOKENS32_VERSION)
    width = 4;
  if (h[0] != TL_TOKENS_MAGIC && h[0] != TL_TOKENS32_MAGIC)
    bad = TL_ERRF(TL_ERR_FORMAT,
                  "'%s' is not a token file: magic %d, expected %d (llm.c's GPT-2 format) or %d "
                  "(its Llama-3 format)",
                  path, h[0], TL_TOKENS_MAGIC, TL_TOKENS32_MAGIC);
  else if (!width)
    bad = TL_ERRF(TL_ERR_FORMAT, "'%s': token file version %d, expected %d for magic %d", path,
                  h[1], h[0] == TL_TOKENS_MAGIC ? TL_TOKENS_VERSION : TL_TOKENS32_VERSION, h[0]);
  else if (h[2] < 0 || size != 1024 + (size_t)width * (size_t)h[2])
    bad = TL_ERRF(TL_ERR_FORMAT,
                  "'%s' is cut short or padded: the header promises %d tokens of %d bytes (%zu "
                  "bytes), the file has %zu bytes",
                  path, h[2], width, 1024 + (size_t)width * (size_t)(h[2] < 0 ? 0 : h[2]), size);
  if (bad != TL_OK) {
    munmap(map, size);
    return bad;
  }
  out->map = map;
  out->map_bytes = size;
  out->tokens = (const char*)map + 1024;
  out->width = width;
  out->n_tokens = h[2];
  for (int64_t i = 0; i < out->n_tokens; i++) {
    int64_t v = tl_tokens_at(out, i);
    if (v > out->max_token) out->max_token = v;
  }
  if (out->max_token > INT32_MAX || (vocab > 0 && out->max_token >= vocab)) {
    int64_t at = 0, lim = vocab > 0 ? vocab : (int64_t)INT32_MAX + 1;
    while (tl_tokens_at(out, at) < lim) at++;
    tl_status e =
        vocab > 0 ? TL_ERRF(TL_ERR_FORMAT,
                            "'%s': token %lld at position %lld is outside the model's vocabulary "
                            "(model.vocab_size=%d)",
                            path, (long long)tl_tokens_at(out, at), (long long)at, vocab)
                  : TL_ERRF(TL_ERR_FORMAT, "'%s': token %lld at position %lld is beyond 2^31 - 1",
                            path, (long long)tl_tokens_at(out, at), (long long)at);
    tl_tokens_close(out);
    return e;
  }
  return TL_OK;
}

void tl_tokens_close(tl_token_file* f) {
  if (f && f->map) munmap(f->map, f->map_bytes);
  if (f) memset(f, 0, sizeof *f);
}

static tl_status write_file(const char* path, int wide, const void* tokens, int64_t n) {
  if (n < 0 || n > INT32_MAX)
    return TL_ERRF(TL_ERR_INVALID, "%lld tokens do not fit a token file (at most %d)", (long long)n,
                   INT32_MAX);
  int32_t header[256] = {wide ? TL_TOKENS32_MAGIC : TL_TOKENS_MAGIC,
                         wide ? TL_TOKENS32_VERSION : TL_TOKENS_VERSION, (int32_t)n};
  tl_atomic_file af;
  TL_CHECK(tl_atomic_file_open(&af, path));
  tl_status st = tl_atomic_file_write(&af, header, sizeof header);
  if (st == TL_OK) st = tl_atomic_file_write(&af, tokens, (wide ? 4u : 2u) * (size_t)n);
  if (st != TL_OK) {
    tl_atomic_file_abort(&af);
    return st;
  }
  return tl_atomic_file_commit(&af);
}

tl_status tl_tokens_write(const char* path, const uint16_t* tokens, int64_t n) {
  return write_file(path, 0, tokens, n);
}

tl_status tl_tokens_write32(const char* path, const uint32_t* tokens, int64_t n, int wide) {
  for (int64_t i = 0; i < n; i++) {
    if (tokens[i] > INT32_MAX)
      return TL_ERRF(TL_ERR_INVALID, "token %lu at position %lld is beyond 2^31 - 1",
                     (unsigned long)tokens[i], (long long)i);
    wide |= tokens[i] > UINT16_MAX;
  }
  if (wide) return write_file(path, 1, tokens, n);
  uint16_t* narrow = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
  if (!narrow) return TL_ERRF(TL_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
  for (int64_t i = 0; i < n; i++) narrow[i] = (uint16_t)tokens[i];
  tl_status st = write_file(path, 0, narrow, n);
  free(narrow);
  return st;
}

tl_status tl_tokens_write_random(const char* path, int64_t n, int vocab, uint64_t seed) {
  if (vocab < 1)
    return TL_ERRF(TL_ERR_INVALID, "random tokens: vocabulary %d; expected 1 to %d", vocab,
                   INT32_MAX);
  if (n < 0 || n > INT32_MAX)
    return TL_ERRF(TL_ERR_INVALID, "%lld tokens do not fit a token file (at most %d)", (long long)n,
                   INT32_MAX);
  float* u = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  uint32_t* tok = malloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
  tl_status st =
      u && tok ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
  if (st == TL_OK) {
    /* a vocabulary of at most 2^24 draws exactly from one float; larger
     * ones combine two draws (high and low 16 bits) */
    if (vocab <= (1 << 24)) {
      tl_rng_uniform(seed, 0, 0, (size_t)n, 0.0f, (float)vocab, u);
      for (int64_t i = 0; i < n; i++) {
        int64_t v = (int64_t)u[i];
        tok[i] = (uint32_t)(v < vocab ? v : vocab - 1); /* u < vocab, but float rounding */
      }
    } else {
      tl_rng_uniform(seed, 0, 0, (size_t)n, 0.0f, 65536.0f, u);
      for (int64_t i = 0; i < n; i++) tok[i] = (uint32_t)u[i] << 16;
      tl_rng_uniform(seed, 1, 0, (size_t)n, 0.0f, 65536.0f, u);
      for (int64_t i = 0; i < n; i++)
        tok[i] = (uint32_t)(((uint64_t)(tok[i] | (uint32_t)u[i]) * (uint64_t)vocab) >> 32);
    }
    st = tl_tokens_write32(path, tok, n, vocab > 65536);
  }
  free(u);
  free(tok);
  return st;
}

tl_status tl__read_file(const char* path, char** data, size_t* size) {
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
  const int err = ferror(f) ? (errno ? errno : EIO) : 0; /* a directory: EISDIR */
  fclose(f);
  if (!buf) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  if (err) {
    free(buf);
    return TL_ERRF(TL_ERR_IO, "cannot read '%s': %s", path, strerror(err));
  }
  *data = buf;
  *size = n;
  return TL_OK;
}

tl_status tl__bytes_to_tokens(const char* text, size_t n, uint16_t** tokens) {
  *tokens = malloc(sizeof(uint16_t) * (n ? n : 1));
  if (!*tokens) return TL_ERRF(TL_ERR_NOMEM, "out of memory for %zu tokens", n);
  for (size_t i = 0; i < n; i++) (*tokens)[i] = (unsigned char)text[i];
  return TL_OK;
}

tl_status tl_tokens_from_text_file(const char* text_path, uint16_t** tokens, int64_t* n) {
  char* text = NULL;
  size_t size = 0;
  TL_CHECK(tl__read_file(text_path, &text, &size));
  tl_status st = tl__bytes_to_tokens(text, size, tokens);
  free(text);
  *n = st == TL_OK ? (int64_t)size : 0;
  return st;
}
