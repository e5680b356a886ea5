/* tokenizer.c — llm.c's tokenizer file, read and written (see tokenizer.h). */
#include "launcher/data/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "launcher/data/hf_tokenizer.h"

/* Every id's bytes from a tokenizer.json. */
static tl_status open_json(const char* path, tl_tokenizer* out) {
  tl_hf_tokenizer* t;
  TL_CHECK(tl_hf_tokenizer_create(path, &t));
  const int64_t n = tl_hf_tokenizer_vocab(t);
  size_t bytes = 0, len;
  for (int64_t id = 0; id < n; id++)
    if (tl_hf_tokenizer_bytes(t, id, &len)) bytes += len;
  out->vocab = (int)n;
  out->offset = malloc(sizeof(int64_t) * ((size_t)n + 1));
  out->bytes = malloc(bytes + 1);
  if (!out->offset || !out->bytes) {
    tl_hf_tokenizer_destroy(t);
    tl_tokenizer_close(out);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
  }
  int64_t at = 0;
  for (int64_t id = 0; id < n; id++) {
    out->offset[id] = at;
    const char* s = tl_hf_tokenizer_bytes(t, id, &len);
    if (!s) continue; /* an id that names no token decodes to nothing */
    memcpy(out->bytes + at, s, len);
    at += (int64_t)len;
  }
  out->offset[n] = at;
  out->eot = (int)tl_hf_tokenizer_added(t, "<|endoftext|>");
  if (out->eot < 0) out->eot = (int)tl_hf_tokenizer_added(t, "<|end_of_text|>");
  tl_hf_tokenizer_destroy(t);
  return TL_OK;
}

tl_status tl_tokenizer_open(const char* path, tl_tokenizer* out) {
  memset(out, 0, sizeof *out);
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open tokenizer '%s': %s", path, strerror(errno));
  int c;
  while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r') {
  }
  if (c == '{') { /* Hugging Face's tokenizer.json */
    fclose(f);
    return open_json(path, out);
  }
  rewind(f);
  uint32_t h[256];
  tl_status st = TL_OK;
  if (fread(h, sizeof h, 1, f) != 1 && ferror(f)) /* a directory: EISDIR */
    st = TL_ERRF(TL_ERR_IO, "cannot read tokenizer '%s': %s", path, strerror(errno ? errno : EIO));
  else if (feof(f))
    st = TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside the 1024-byte header", path);
  else if (h[0] != TL_TOKENIZER_MAGIC)
    st = TL_ERRF(TL_ERR_FORMAT, "'%s' is not an llm.c tokenizer file: magic %u, expected %d", path,
                 h[0], TL_TOKENIZER_MAGIC);
  else if (h[1] != 1 && h[1] != 2)
    st = TL_ERRF(TL_ERR_FORMAT, "'%s': tokenizer version %u, expected 1 or 2", path, h[1]);
  else if (h[2] < 1 || h[2] > (1u << 24))
    st = TL_ERRF(TL_ERR_FORMAT, "'%s': a vocabulary of %u tokens; expected 1 to %d", path, h[2],
                 1 << 24);
  if (st == TL_OK) {
    out->vocab = (int)h[2];
    out->eot = h[1] == 2 ? (int)h[3] : -1;
    out->offset = malloc(sizeof(int64_t) * ((size_t)out->vocab + 1));
    size_t cap = 16 * (size_t)out->vocab;
    out->bytes = malloc(cap);
    if (!out->offset || !out->bytes) st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
    int64_t at = 0;
    for (int i = 0; st == TL_OK && i < out->vocab; i++) {
      unsigned char len;
      if (fread(&len, 1, 1, f) != 1) {
        st = TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends before token %d of %d", path, i,
                     out->vocab);
        break;
      }
      if ((size_t)at + len > cap) {
        char* more = realloc(out->bytes, cap *= 2);
        if (!more) {
          st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", path);
          break;
        }
        out->bytes = more;
      }
      if (len && fread(out->bytes + at, 1, len, f) != len) {
        st = TL_ERRF(TL_ERR_FORMAT, "'%s' is cut short: it ends inside token %d", path, i);
        break;
      }
      out->offset[i] = at;
      at += len;
    }
    if (st == TL_OK) out->offset[out->vocab] = at;
    if (st == TL_OK && fgetc(f) != EOF)
      st = TL_ERRF(TL_ERR_FORMAT, "'%s' is longer than its %d tokens (extra bytes at the end)",
                   path, out->vocab);
  }
  fclose(f);
  if (st != TL_OK) tl_tokenizer_close(out);
  return st;
}

void tl_tokenizer_close(tl_tokenizer* t) {
  if (!t) return;
  free(t->bytes);
  free(t->offset);
  memset(t, 0, sizeof *t);
}

const char* tl_tokenizer_piece(const tl_tokenizer* t, int64_t id, size_t* len) {
  if (id < 0 || id >= t->vocab) return NULL;
  *len = (size_t)(t->offset[id + 1] - t->offset[id]);
  return t->bytes + t->offset[id];
}

tl_status tl_tokenizer_write(const char* path, int vocab, const char* const* pieces,
                             const uint8_t* lengths, int eot) {
  uint32_t h[256] = {TL_TOKENIZER_MAGIC, 2, (uint32_t)vocab, (uint32_t)eot};
  tl_atomic_file af;
  TL_CHECK(tl_atomic_file_open(&af, path));
  tl_status st = tl_atomic_file_write(&af, h, sizeof h);
  for (int i = 0; i < vocab && st == TL_OK; i++) {
    st = tl_atomic_file_write(&af, &lengths[i], 1);
    if (st == TL_OK && lengths[i]) st = tl_atomic_file_write(&af, pieces[i], lengths[i]);
  }
  if (st != TL_OK) {
    tl_atomic_file_abort(&af);
    return st;
  }
  return tl_atomic_file_commit(&af);
}
