/* tokens.h — token files in llm.c's formats and the byte-level tokenizer.
 *
 * File: 256 little-endian int32 (magic, version, token count, rest zero),
 * then `count` tokens; its size is exactly 1024 + width * count. Two
 * formats, as llm.c's data scripts write them:
 * - GPT-2's: magic 20240520, version 1, uint16 tokens (vocabularies up to
 *   65,536);
 * - Llama-3's: magic 20240801, version 7, uint32 tokens (vocabularies up to
 *   2^31 here: tokens are int32 in the model). */
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
#define TL_TOKENS32_MAGIC 20240801
#define TL_TOKENS32_VERSION 7

typedef struct tl_token_file {
  const void* tokens; /* uint16 or uint32 (width bytes each): tl_tokens_at */
  int width;
  int64_t n_tokens;
  int64_t max_token; /* largest token in the file */
  void* map;         /* the mapping, header included */
  size_t map_bytes;
} tl_token_file;

/* Token i of the file. */
static inline int64_t tl_tokens_at(const tl_token_file* f, int64_t i) {
  return f->width == 4 ? (int64_t)((const uint32_t*)f->tokens)[i]
                       : (int64_t)((const uint16_t*)f->tokens)[i];
}

/* Maps and validates `path`: header, exact size, and (when vocab > 0) every
 * token below vocab. Errors name the file and what was expected. */
tl_status tl_tokens_open(const char* path, int vocab, tl_token_file* out);
void tl_tokens_close(tl_token_file* f);

/* Writes a token file atomically (temporary file, then rename): GPT-2's
 * format. */
tl_status tl_tokens_write(const char* path, const uint16_t* tokens, int64_t n);
/* The same from 32-bit tokens: GPT-2's format where every token fits 16
 * bits and `wide` is false, else Llama-3's. Tokens must be below 2^31. */
tl_status tl_tokens_write32(const char* path, const uint32_t* tokens, int64_t n, int wide);

/* Writes a token file of n tokens drawn uniformly from [0, vocab) by
 * Philox(seed): the same file for the same arguments on every machine (the
 * corpus of tests and benchmarks). vocab 1 to 2^31 - 1 (Llama-3's format
 * above 65,536). */
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
