/* tokenizer.h — decoding tokens to text: llm.c's GPT-2 tokenizer file, or a
 * Hugging Face tokenizer.json (hf_tokenizer.h; a file whose first character
 * is '{').
 *
 * File (llm.c's gpt2_tokenizer.bin): 256 uint32 (magic 20240328, version 1
 * or 2, vocabulary size, and with version 2 the end-of-text token), then
 * for each token in order one uint8 length and that many bytes (GPT-2's
 * byte-level BPE pieces; a piece may be part of a UTF-8 character). trellis
 * trains on token files and only decodes: samples print as text. */
#ifndef TL_LAUNCHER_TOKENIZER_H
#define TL_LAUNCHER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_TOKENIZER_MAGIC 20240328

typedef struct tl_tokenizer {
  int vocab;
  int eot;         /* the end-of-text token, or -1 (version 1) */
  char* bytes;     /* every piece back to back */
  int64_t* offset; /* piece i is bytes[offset[i] .. offset[i + 1]) */
} tl_tokenizer;

/* Reads and checks `path`: header, every piece there, nothing after the
 * last. Errors name the file and what was expected. */
tl_status tl_tokenizer_open(const char* path, tl_tokenizer* out);
void tl_tokenizer_close(tl_tokenizer* t);

/* Token id's piece and its length; NULL for an id outside the vocabulary. */
const char* tl_tokenizer_piece(const tl_tokenizer* t, int64_t id, size_t* len);

/* Writes a tokenizer file of `vocab` pieces (pieces[i] of lengths[i]
 * bytes, each < 256), version 2 with end-of-text token eot (tests). */
tl_status tl_tokenizer_write(const char* path, int vocab, const char* const* pieces,
                             const uint8_t* lengths, int eot);

#ifdef __cplusplus
}
#endif

#endif
