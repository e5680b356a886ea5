/* hf_tokenizer_impl.h — the tables a tokenizer.json becomes, shared by the
 * reader (hf_tokenizer.c) and the encoder (hf_encode.c). */
#ifndef TL_LAUNCHER_HF_TOKENIZER_IMPL_H
#define TL_LAUNCHER_HF_TOKENIZER_IMPL_H

#include <pcre2.h>
#include <stdint.h>

#include "launcher/data/hf_tokenizer.h"

#define TL__HF_MAX_AROUND 16 /* tokens a post-processor may put around a text */

/* A model token: its string (GPT-2's byte alphabet, UTF-8) in `text`. */
typedef struct tl__hf_vocab_slot {
  uint64_t hash;
  int32_t id; /* -1: empty */
} tl__hf_vocab_slot;

/* A merge: the pair (left, right) of ids, its rank and what it makes. */
typedef struct tl__hf_pair_slot {
  uint64_t key; /* (left + 1) << 32 | (right + 1); 0: empty */
  int32_t rank, id;
} tl__hf_pair_slot;

typedef struct tl__hf_added {
  const char* content; /* in the tokenizer's `added_text` */
  size_t len;
  int32_t id;
  int normalized; /* matched in a second pass, as tokenizers does */
} tl__hf_added;

struct tl_hf_tokenizer {
  char path[1024];
  int64_t n_ids; /* largest id + 1 */

  /* Model tokens: id -> string (vocab_off[id] .. vocab_off[id + 1] in
   * vocab_text; equal offsets and !is_model[id]: not a model token), and
   * string -> id through vocab_slots. */
  char* vocab_text;
  int64_t* vocab_off;
  uint8_t* is_model;
  tl__hf_vocab_slot* vocab_slots;
  uint64_t vocab_mask;

  tl__hf_pair_slot* pairs;
  uint64_t pair_mask;

  int32_t byte_id[256]; /* the model token of each byte's letter */

  /* The normalizer: utf8proc_map's options of each step (NFC, NFD, NFKC,
   * NFKD), applied in order; none with n_norm 0. */
  int norm[4];
  int n_norm;
  int ignore_merges;

  /* Pre-tokenizer: pieces are what `split` matches and the text between
   * (NULL: a segment is one piece). ByteLevel's add_prefix_space puts a
   * space in front of each segment (prefix_on_segment: no Split before the
   * ByteLevel) or of each piece (after a Split) that lacks one. */
  pcre2_code* split;
  int prefix_space, prefix_on_segment;

  /* Added tokens, longest first; added_first[c]: some begins with byte c. */
  tl__hf_added* added;
  int n_added;
  char* added_text;
  uint8_t added_first[2][256]; /* [normalized] */

  /* Decoded bytes of each id (bytes_off as vocab_off). */
  char* bytes;
  int64_t* bytes_off;
  uint8_t* is_token;

  int32_t before[TL__HF_MAX_AROUND], after[TL__HF_MAX_AROUND];
  int n_before, n_after;
};

static inline uint64_t tl__hf_pair_key(int32_t a, int32_t b) {
  return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint64_t)(uint32_t)(b + 1);
}
static inline uint64_t tl__hf_pair_hash(uint64_t k) {
  return (k * 0x9E3779B97F4A7C15ull) >> 20;
}

/* The merge of (a, b), or NULL. */
static inline const tl__hf_pair_slot* tl__hf_pair_find(const tl_hf_tokenizer* t, int32_t a,
                                                       int32_t b) {
  const uint64_t k = tl__hf_pair_key(a, b);
  for (uint64_t i = tl__hf_pair_hash(k) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
    if (t->pairs[i].key == k) return &t->pairs[i];
    if (!t->pairs[i].key) return NULL;
  }
}

/* The model token spelled by `s` (n bytes), or -1. */
int32_t tl__hf_vocab_find(const tl_hf_tokenizer* t, const char* s, size_t n);

/* GPT-2's byte alphabet: byte b is the letter tl__hf_byte_letter(b) (a code
 * point below 0x144), written in UTF-8 into out (1 or 2 bytes, returned). */
int tl__hf_byte_letter_utf8(unsigned b, char out[2]);

#endif
