/* tokens.h — token files in llm.c's format, the byte-level tokenizer, the
 * default corpus, and the mesh-independent batch loader.
 *
 * File: 256 little-endian int32 (magic 20240520, version 1, token count,
 * rest zero), then `count` uint16 tokens; its size is exactly 1024 + 2*count.
 *
 * Batches: the global batch of a step is B sequences of T+1 tokens starting
 * at the loader's position, sequence b at position + b*T; the position then
 * advances by B*T and wraps to 0 when the next batch would run past the end
 * (llm.c's rule). Every mesh sees the same global batch; a data-parallel
 * replica or a micro-batch takes a contiguous range of its sequences. */
#ifndef TL_LAUNCHER_TOKENS_H
#define TL_LAUNCHER_TOKENS_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_TOKENS_MAGIC 20240520
#define TL_TOKENS_VERSION 1

typedef struct tl_token_file {
  const uint16_t* tokens;
  int64_t n_tokens;
  int max_token; /* largest token in the file */
  void* map;     /* the mapping, header included */
  size_t map_bytes;
} tl_token_file;

/* Maps and validates `path`: header, exact size, and (when vocab > 0) every
 * token below vocab. Errors name the file and what was expected. */
tl_status tl_tokens_open(const char* path, int vocab, tl_token_file* out);
void tl_tokens_close(tl_token_file* f);

/* Writes a token file atomically (temporary file, then rename). */
tl_status tl_tokens_write(const char* path, const uint16_t* tokens, int64_t n);

/* Writes a token file of n tokens drawn uniformly from [0, vocab) by
 * Philox(seed): the same file for the same arguments on every machine (the
 * corpus of tests and benchmarks). vocab 1 to 65536. */
tl_status tl_tokens_write_random(const char* path, int64_t n, int vocab, uint64_t seed);

/* Byte-level tokenizer: token = byte (vocabulary 256). */
tl_status tl_tokens_from_text_file(const char* text_path, uint16_t** tokens, int64_t* n);

/* The default corpus: the English text of Debian's `fortunes` package
 * (/usr/share/games/fortunes), every plain-text file in name order with the
 * '%' separator lines removed, split into train (first 90%) and validation
 * (last 10%) at a line boundary, byte-tokenized. */
#define TL_CORPUS_DIR "/usr/share/games/fortunes"
tl_status tl_corpus_build(const char* train_path, const char* val_path, int64_t* n_train,
                          int64_t* n_val);

typedef struct tl_loader {
  const tl_token_file* file;
  int b, t;         /* global batch: b sequences of t tokens */
  int64_t position; /* first token of the current batch */
} tl_loader;

/* Fails when the file holds fewer than b*t+1 tokens. */
tl_status tl_loader_init(tl_loader* l, const tl_token_file* f, int b, int t, int64_t position);
/* Sequences [seq0, seq0+n_seq) of the current batch: inputs and targets,
 * n_seq*t each, as int32. */
void tl_loader_get(const tl_loader* l, int seq0, int n_seq, int32_t* inputs, int32_t* targets);
void tl_loader_advance(tl_loader* l);

#ifdef __cplusplus
}
#endif

#endif
