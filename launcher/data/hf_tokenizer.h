/* hf_tokenizer.h — Hugging Face tokenizer.json files: byte-level BPE.
 *
 * The tokenizers models ship with (GPT-2, Llama 3, most since) are byte-level
 * BPE: text is split at the added (special) tokens, cut into pieces by a
 * regular expression (the pre-tokenizer), each piece's UTF-8 bytes are
 * spelled in GPT-2's byte alphabet (256 printable characters) and merged pair
 * by pair in the order of the merge list. trellis reads the file as Hugging
 * Face's `tokenizers` library writes it and encodes id for id as that
 * library does (tests/golden/tokenizer_test):
 * - model: "BPE" (or no type, with merges: GPT-2's file) — vocab, merges ("a b" strings or [a, b]
 * pairs), ignore_merges; dropout, byte_fallback, word prefixes/suffixes refused;
 * - normalizer: none, or the Unicode normalization forms NFC, NFD, NFKC and
 *   NFKD (utf8proc), alone or in a Sequence (Qwen2's NFC, say);
 * - pre_tokenizer: ByteLevel with its own regex, or Split (a regex or a
 *   string, behavior Isolated) before a ByteLevel without one, either alone
 *   or in a Sequence; add_prefix_space honoured;
 * - added_tokens: matched first, leftmost and longest (single_word, lstrip
 *   and rstrip refused);
 * - post_processor: ByteLevel (no change to ids), TemplateProcessing's
 *   single template, RobertaProcessing and BertProcessing, or a Sequence of
 *   them: the tokens put around a whole encoded text;
 * - decoder: ByteLevel.
 * Split patterns are compiled by PCRE2 (UTF and Unicode properties, JIT).
 *
 * Errors name the file, the field, the value and what was expected. */
#ifndef TL_LAUNCHER_HF_TOKENIZER_H
#define TL_LAUNCHER_HF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_hf_tokenizer tl_hf_tokenizer;

/* Reads and checks `path`; *out is the caller's (tl_hf_tokenizer_destroy). */
tl_status tl_hf_tokenizer_create(const char* path, tl_hf_tokenizer** out);
void tl_hf_tokenizer_destroy(tl_hf_tokenizer* t);

/* Largest token id + 1 (the model's vocabulary and the added tokens). */
int64_t tl_hf_tokenizer_vocab(const tl_hf_tokenizer* t);

/* The bytes id decodes to (GPT-2's byte alphabet read back; an added token's
 * content as written), or NULL for an id that names no token. Owned by t. */
const char* tl_hf_tokenizer_bytes(const tl_hf_tokenizer* t, int64_t id, size_t* len);

/* The id of an added token whose content is `content`, or -1. */
int64_t tl_hf_tokenizer_added(const tl_hf_tokenizer* t, const char* content);

/* Called between batches of work: `done` of `total` bytes encoded. */
typedef void (*tl_hf_progress)(void* arg, size_t done, size_t total);

/* Encodes text[0 .. len) (UTF-8; an invalid sequence is refused with its
 * offset) as one text: the post-processor's tokens around it when
 * `add_special` is set, as tokenizers' encode(text) does. Pieces are merged
 * on `threads` threads (1 or more); the result is the same for any count.
 * *ids (malloc'd, the caller's) holds *n ids. */
tl_status tl_hf_tokenizer_encode(const tl_hf_tokenizer* t, const char* text, size_t len,
                                 int add_special, int threads, tl_hf_progress progress,
                                 void* progress_arg, uint32_t** ids, int64_t* n);

#ifdef __cplusplus
}
#endif

#endif
