/* tokens.h — token files in llm.c's format and the byte-level tokenizer.
 *
 * File: 256 little-endian int32 (magic 20240520, version 1, token count,
 * rest zero), then `count` uint16 tokens; its size is exactly 1024 + 2*count. */
#ifndef TL_LAUNCHER_TOKENS_H
#define TL_LAUNCHER_TOKENS_H

#include <stddef.h>
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

/* Internal to launcher/data: a whole file into memory; bytes as tokens. */
tl_status tl__read_file(const char* path, char** data, size_t* size);
tl_status tl__bytes_to_tokens(const char* text, size_t n, uint16_t** tokens);

#ifdef __cplusplus
}
#endif

#endif
