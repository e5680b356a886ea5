/* tokenizer.c — llm.c's tokenizer file, read and written (see tokenizer.h). */
#include "launcher/data/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"

tl_status tl_tokenizer_open(const char* path, tl_tokenizer* out) {
  memset(out, 0, sizeof *out);
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open tokenizer '%s': %s", path, strerror(errno));
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
