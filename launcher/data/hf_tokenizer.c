/* hf_tokenizer.c — a tokenizer.json read into hf_tokenizer_impl.h's tables
 * (see hf_tokenizer.h for what is read and what is refused).
 *
 * Every field that changes the ids is either honoured or refused with the
 * file, the field and its value; nothing is ignored silently. */
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "launcher/data/hf_tokenizer_impl.h"

/* GPT-2's ByteLevel pre-tokenizer splits with this pattern (use_regex). */
static const char k_byte_level_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char k_supported[] =
    "trellis reads byte-level BPE tokenizers (GPT-2 and Llama 3 style; see trellis data --help)";

/* An error about field `field` of t's file. */
static tl_status bad(const tl_hf_tokenizer* t, tl_status code, const char* fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return TL_ERRF(code, "tokenizer '%s': %s", t->path, msg);
}

static tl_status unsupported(const tl_hf_tokenizer* t, const char* field, const char* value) {
  return bad(t, TL_ERR_UNSUPPORTED, "%s %s is not supported; %s", field, value, k_supported);
}

int tl__hf_byte_letter_utf8(unsigned b, char out[2]) {
  /* Printable Latin-1 bytes stand for themselves; the others, in order, for
   * 256, 257, ... */
  unsigned cp;
  if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
    cp = b;
  } else {
    unsigned n = 0;
    for (unsigned c = 0; c < b; c++)
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  out[0] = (char)(0xC0 | (cp >> 6));
  out[1] = (char)(0x80 | (cp & 0x3F));
  return 2;
}

static uint64_t hash_bytes(const char* s, size_t n) {
  return XXH3_64bits(s, n);
}

int32_t tl__hf_vocab_find(const tl_hf_tokenizer* t, const char* s, size_t n) {
  const uint64_t h = hash_bytes(s, n);
  for (uint64_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
    const tl__hf_vocab_slot* v = &t->vocab_slots[i];
    if (v->id < 0) return -1;
    if (v->hash == h) {
      const int64_t a = t->vocab_off[v->id], b = t->vocab_off[v->id + 1];
      if ((size_t)(b - a) == n && memcmp(t->vocab_text + a, s, n) == 0) return v->id;
    }
  }
}

static uint64_t table_size(size_t n) {
  uint64_t cap = 16;
  while (cap < 2 * (uint64_t)n) cap <<= 1;
  return cap;
}

/* A string field that must be null, absent or one of the allowed values. */
static int is_null(const json_t* v) {
  return !v || json_is_null(v);
}

/* 1. The model: vocab and merges. */
static tl_status read_model(tl_hf_tokenizer* t, const json_t* model, int64_t max_added) {
  if (!json_is_object(model)) return bad(t, TL_ERR_FORMAT, "model is missing or not an object");
  /* GPT-2's published file has no type: tokenizers takes a model with
   * merges for a BPE */
  const json_t* type = json_object_get(model, "type");
  if (!type && !json_is_array(json_object_get(model, "merges")))
    return bad(t, TL_ERR_FORMAT, "model.type is missing and model has no merges; expected a BPE");
  if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0))
    return unsupported(t, "model.type",
                       json_is_string(type) ? json_string_value(type) : "(not a string)");
  const json_t* dropout = json_object_get(model, "dropout");
  if (!is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0.0))
    return unsupported(t, "model.dropout", "(a random encoding)");
  if (json_is_true(json_object_get(model, "byte_fallback")))
    return unsupported(t, "model.byte_fallback", "true");
  const char* affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const json_t* v = json_object_get(model, affixes[i]);
    if (!is_null(v) && !(json_is_string(v) && json_string_length(v) == 0)) {
      char field[64];
      snprintf(field, sizeof field, "model.%s", affixes[i]);
      return unsupported(t, field, json_is_string(v) ? json_string_value(v) : "(not a string)");
    }
  }
  t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

  const json_t* vocab = json_object_get(model, "vocab");
  if (!json_is_object(vocab) || json_object_size(vocab) == 0)
    return bad(t, TL_ERR_FORMAT, "model.vocab is missing or empty; expected token: id pairs");
  int64_t n_ids = max_added + 1;
  size_t text_bytes = 0;
  const char* key;
  json_t* value;
  json_object_foreach((json_t*)vocab, key, value) {
    if (!json_is_integer(value) || json_integer_value(value) < 0 ||
        json_integer_value(value) >= (1ll << 31))
      return bad(t, TL_ERR_FORMAT, "model.vocab[\"%s\"] is not an id from 0 to 2^31 - 1", key);
    if (json_integer_value(value) + 1 > n_ids) n_ids = json_integer_value(value) + 1;
    text_bytes += strlen(key);
  }
  t->n_ids = n_ids;
  t->vocab_text = malloc(text_bytes + 1);
  t->vocab_off = calloc((size_t)n_ids + 1, sizeof(int64_t));
  t->is_model = calloc((size_t)n_ids, 1);
  const uint64_t cap = table_size(json_object_size(vocab));
  t->vocab_slots = malloc(sizeof(tl__hf_vocab_slot) * cap);
  t->vocab_mask = cap - 1;
  if (!t->vocab_text || !t->vocab_off || !t->is_model || !t->vocab_slots)
    return bad(t, TL_ERR_NOMEM, "out of memory for a vocabulary of %lld ids", (long long)n_ids);
  for (uint64_t i = 0; i < cap; i++) t->vocab_slots[i].id = -1;
  /* ids in order, so that each one's string sits between its offsets */
  const char** by_id = calloc((size_t)n_ids, sizeof(char*));
  if (!by_id) return bad(t, TL_ERR_NOMEM, "out of memory for %lld ids", (long long)n_ids);
  json_object_foreach((json_t*)vocab, key, value) {
    const int64_t id = json_integer_value(value);
    if (by_id[id]) {
      tl_status st = bad(t, TL_ERR_FORMAT, "model.vocab gives id %lld to both \"%s\" and \"%s\"",
                         (long long)id, by_id[id], key);
      free(by_id);
      return st;
    }
    by_id[id] = key;
  }
  int64_t at = 0;
  for (int64_t id = 0; id < n_ids; id++) {
    t->vocab_off[id] = at;
    if (!by_id[id]) continue;
    const size_t n = strlen(by_id[id]);
    memcpy(t->vocab_text + at, by_id[id], n);
    at += (int64_t)n;
    t->is_model[id] = 1;
  }
  t->vocab_off[n_ids] = at;
  free(by_id);
  for (int64_t id = 0; id < n_ids; id++) {
    if (!t->is_model[id]) continue;
    const char* s = t->vocab_text + t->vocab_off[id];
    const size_t n = (size_t)(t->vocab_off[id + 1] - t->vocab_off[id]);
    const uint64_t h = hash_bytes(s, n);
    uint64_t i = h & t->vocab_mask;
    while (t->vocab_slots[i].id >= 0) i = (i + 1) & t->vocab_mask;
    t->vocab_slots[i] = (tl__hf_vocab_slot){h, (int32_t)id};
  }

  /* every byte's letter is a token, or some text could not be encoded */
  for (unsigned b = 0; b < 256; b++) {
    char u[2];
    const int n = tl__hf_byte_letter_utf8(b, u);
    t->byte_id[b] = tl__hf_vocab_find(t, u, (size_t)n);
    if (t->byte_id[b] < 0)
      return bad(t, TL_ERR_UNSUPPORTED,
                 "model.vocab has no token for byte 0x%02x (\"%.*s\" in the byte alphabet); "
                 "a byte-level BPE vocabulary holds all 256",
                 b, n, u);
  }

  const json_t* merges = json_object_get(model, "merges");
  if (!json_is_array(merges))
    return bad(t, TL_ERR_FORMAT, "model.merges is missing; expected a list");
  const size_t n_merges = json_array_size(merges);
  const uint64_t pcap = table_size(n_merges);
  t->pairs = calloc(pcap, sizeof(tl__hf_pair_slot));
  t->pair_mask = pcap - 1;
  if (!t->pairs) return bad(t, TL_ERR_NOMEM, "out of memory for %zu merges", n_merges);
  char* both = NULL;
  size_t both_cap = 0;
  tl_status st = TL_OK;
  for (size_t r = 0; r < n_merges && st == TL_OK; r++) {
    const json_t* m = json_array_get(merges, r);
    const char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (json_is_string(m)) { /* "a b" */
      const char* s = json_string_value(m);
      const char* sp = strchr(s, ' ');
      if (sp && !strchr(sp + 1, ' ')) a = s, na = (size_t)(sp - s), b = sp + 1, nb = strlen(b);
    } else if (json_is_array(m) && json_array_size(m) == 2 &&
               json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
      a = json_string_value(json_array_get(m, 0)), na = json_string_length(json_array_get(m, 0));
      b = json_string_value(json_array_get(m, 1)), nb = json_string_length(json_array_get(m, 1));
    }
    if (!a) {
      st = bad(t, TL_ERR_FORMAT, "model.merges[%zu] is not \"a b\" or [\"a\", \"b\"]", r);
      break;
    }
    if (na + nb > both_cap) {
      free(both);
      both = malloc(both_cap = 2 * (na + nb) + 64);
      if (!both) {
        st = bad(t, TL_ERR_NOMEM, "out of memory reading the merges");
        break;
      }
    }
    memcpy(both, a, na);
    memcpy(both + na, b, nb);
    const int32_t ia = tl__hf_vocab_find(t, a, na), ib = tl__hf_vocab_find(t, b, nb);
    const int32_t ic = tl__hf_vocab_find(t, both, na + nb);
    if (ia < 0 || ib < 0 || ic < 0) {
      st = bad(t, TL_ERR_FORMAT,
               "model.merges[%zu] (\"%.*s\" + \"%.*s\"): \"%.*s\" is not in model.vocab", r,
               (int)na, a, (int)nb, b,
               ia < 0   ? (int)na
               : ib < 0 ? (int)nb
                        : (int)(na + nb),
               ia < 0   ? a
               : ib < 0 ? b
                        : both);
      break;
    }
    const uint64_t k = tl__hf_pair_key(ia, ib);
    uint64_t i = tl__hf_pair_hash(k) & t->pair_mask;
    while (t->pairs[i].key && t->pairs[i].key != k) i = (i + 1) & t->pair_mask;
    if (!t->pairs[i].key) t->pairs[i] = (tl__hf_pair_slot){k, (int32_t)r, ic}; /* first wins */
  }
  free(both);
  return st;
}

/* Unicode normalization forms, as utf8proc_map's options. */
static int norm_options(const char* type) {
  if (strcmp(type, "NFC") == 0) return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  if (strcmp(type, "NFD") == 0) return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  if (strcmp(type, "NFKC") == 0) return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  if (strcmp(type, "NFKD") == 0) return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  return 0;
}

/* The normalizer: none, a Unicode normalization form (utf8proc), or a
 * Sequence of them. */
static tl_status read_normalizer(tl_hf_tokenizer* t, const json_t* norm) {
  if (is_null(norm)) return TL_OK;
  const json_t* steps[4] = {norm};
  int n = 1;
  const char* type = json_string_value(json_object_get(norm, "type"));
  if (type && strcmp(type, "Sequence") == 0) {
    const json_t* list = json_object_get(norm, "normalizers");
    n = (int)json_array_size(list);
    if (n > 4) return unsupported(t, "normalizer", "(a Sequence of more than 4 steps)");
    for (int i = 0; i < n; i++) steps[i] = json_array_get(list, (size_t)i);
  }
  for (int i = 0; i < n; i++) {
    const char* ty = json_string_value(json_object_get(steps[i], "type"));
    char field[64];
    if (steps[i] == norm)
      snprintf(field, sizeof field, "normalizer.type");
    else
      snprintf(field, sizeof field, "normalizer.normalizers[%d].type", i);
    const int opt = ty ? norm_options(ty) : 0;
    if (!opt) {
      char v[96];
      snprintf(v, sizeof v, "%s (NFC, NFD, NFKC and NFKD are)", ty ? ty : "(missing)");
      return unsupported(t, field, v);
    }
    t->norm[t->n_norm++] = opt;
  }
  return TL_OK;
}

/* 2. Added tokens: content, id and how they match. */
static tl_status read_added(tl_hf_tokenizer* t, const json_t* added, int64_t* max_id) {
  *max_id = -1;
  if (is_null(added)) return TL_OK;
  if (!json_is_array(added)) return bad(t, TL_ERR_FORMAT, "added_tokens is not a list");
  const size_t n = json_array_size(added);
  size_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t* a = json_array_get(added, i);
    const json_t* id = json_object_get(a, "id");
    const json_t* content = json_object_get(a, "content");
    if (!json_is_integer(id) || json_integer_value(id) < 0 ||
        json_integer_value(id) >= (1ll << 31) || !json_is_string(content) ||
        json_string_length(content) == 0)
      return bad(t, TL_ERR_FORMAT, "added_tokens[%zu] needs an id (0 to 2^31 - 1) and a content",
                 i);
    const char* flags[] = {"single_word", "lstrip", "rstrip"};
    for (int f = 0; f < 3; f++)
      if (json_is_true(json_object_get(a, flags[f]))) {
        char field[96];
        snprintf(field, sizeof field, "added_tokens[%zu] (\"%s\").%s", i,
                 json_string_value(content), flags[f]);
        return unsupported(t, field, "true");
      }
    if (json_integer_value(id) > *max_id) *max_id = json_integer_value(id);
    bytes += json_string_length(content);
  }
  t->added = calloc(n ? n : 1, sizeof(tl__hf_added));
  t->added_text = malloc(bytes + 1);
  if (!t->added || !t->added_text)
    return bad(t, TL_ERR_NOMEM, "out of memory for the added tokens");
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t* a = json_array_get(added, i);
    const json_t* content = json_object_get(a, "content");
    const size_t len = json_string_length(content);
    memcpy(t->added_text + at, json_string_value(content), len);
    const int normalized = json_is_true(json_object_get(a, "normalized"));
    t->added[i] = (tl__hf_added){t->added_text + at, len,
                                 (int32_t)json_integer_value(json_object_get(a, "id")), normalized};
    t->added_first[normalized][(unsigned char)t->added_text[at]] = 1;
    at += len;
  }
  t->n_added = (int)n;
  /* longest first: the first that matches at a place is the longest */
  for (int i = 1; i < t->n_added; i++)
    for (int j = i; j > 0 && t->added[j].len > t->added[j - 1].len; j--) {
      tl__hf_added x = t->added[j];
      t->added[j] = t->added[j - 1];
      t->added[j - 1] = x;
    }
  return TL_OK;
}

static tl_status compile(tl_hf_tokenizer* t, const char* field, const char* pattern, size_t len,
                         int literal) {
  int code;
  PCRE2_SIZE off;
  t->split =
      pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0),
                    &code, &off, NULL);
  if (!t->split) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return bad(t, TL_ERR_UNSUPPORTED, "%s \"%s\" does not compile (PCRE2, at offset %zu: %s)",
               field, pattern, (size_t)off, (const char*)msg);
  }
  pcre2_jit_compile(t->split, PCRE2_JIT_COMPLETE); /* else PCRE2's interpreter runs it */
  return TL_OK;
}

static tl_status read_byte_level(tl_hf_tokenizer* t, const json_t* p, const char* field,
                                 int after_split) {
  const json_t* use_regex = json_object_get(p, "use_regex");
  const int regex = !json_is_false(use_regex); /* true when absent, as tokenizers reads it */
  t->prefix_space = json_is_true(json_object_get(p, "add_prefix_space"));
  t->prefix_on_segment = !after_split;
  if (regex && after_split) {
    char f[128];
    snprintf(f, sizeof f, "%s.use_regex", field);
    return unsupported(t, f, "true after a Split (two patterns)");
  }
  if (regex)
    return compile(t, "the ByteLevel pattern", k_byte_level_pattern,
                   sizeof k_byte_level_pattern - 1, 0);
  return TL_OK;
}

static tl_status read_split(tl_hf_tokenizer* t, const json_t* p, const char* field) {
  char f[160];
  const json_t* behavior = json_object_get(p, "behavior");
  if (!json_is_string(behavior) || strcmp(json_string_value(behavior), "Isolated") != 0) {
    snprintf(f, sizeof f, "%s.behavior", field);
    return unsupported(t, f, json_is_string(behavior) ? json_string_value(behavior) : "(missing)");
  }
  if (json_is_true(json_object_get(p, "invert"))) {
    snprintf(f, sizeof f, "%s.invert", field);
    return unsupported(t, f, "true");
  }
  const json_t* pattern = json_object_get(p, "pattern");
  const json_t* re = json_object_get(pattern, "Regex");
  const json_t* str = json_object_get(pattern, "String");
  snprintf(f, sizeof f, "%s.pattern", field);
  if (json_is_string(re)) return compile(t, f, json_string_value(re), json_string_length(re), 0);
  if (json_is_string(str) && json_string_length(str) > 0)
    return compile(t, f, json_string_value(str), json_string_length(str), 1);
  return bad(t, TL_ERR_FORMAT, "%s needs a Regex or a String", f);
}

/* 3. Pre-tokenizer: ByteLevel, or Split then ByteLevel (use_regex false). */
static tl_status read_pre_tokenizer(tl_hf_tokenizer* t, const json_t* pre) {
  if (is_null(pre)) return unsupported(t, "pre_tokenizer", "null (no ByteLevel step)");
  const json_t* steps[2] = {pre, NULL};
  int n = 1;
  const char* type = json_string_value(json_object_get(pre, "type"));
  if (type && strcmp(type, "Sequence") == 0) {
    const json_t* list = json_object_get(pre, "pretokenizers");
    n = (int)json_array_size(list);
    if (n < 1 || n > 2) {
      char v[64];
      snprintf(v, sizeof v, "of %d steps", n);
      return unsupported(t, "a pre_tokenizer Sequence", v);
    }
    for (int i = 0; i < n; i++) steps[i] = json_array_get(list, (size_t)i);
  }
  for (int i = 0; i < n; i++) {
    char field[96];
    if (steps[i] == pre)
      snprintf(field, sizeof field, "pre_tokenizer");
    else
      snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%d]", i);
    const char* ty = json_string_value(json_object_get(steps[i], "type"));
    char tf[128];
    snprintf(tf, sizeof tf, "%s.type", field);
    if (!ty) return bad(t, TL_ERR_FORMAT, "%s is missing", tf);
    const int last = i == n - 1;
    if (strcmp(ty, "ByteLevel") == 0 && last) {
      TL_CHECK(read_byte_level(t, steps[i], field, i > 0));
    } else if (strcmp(ty, "Split") == 0 && !last) {
      TL_CHECK(read_split(t, steps[i], field));
    } else {
      char v[128];
      snprintf(v, sizeof v, "%s%s", ty,
               last ? " as the last step (expected ByteLevel)"
                    : " before the last step (expected Split)");
      return unsupported(t, tf, v);
    }
  }
  return TL_OK;
}

/* The ids of one template item or processor, appended to ids. */
static tl_status push_ids(tl_hf_tokenizer* t, int32_t* ids, int* n, const json_t* list,
                          const char* field) {
  for (size_t i = 0; i < json_array_size(list); i++) {
    const json_t* v = json_array_get(list, i);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= t->n_ids)
      return bad(t, TL_ERR_FORMAT, "%s: id %s is not a token of this tokenizer", field,
                 json_is_integer(v) ? "out of range" : "(not an integer)");
    if (*n == TL__HF_MAX_AROUND)
      return unsupported(t, field, "(more than 16 tokens around a text)");
    ids[(*n)++] = (int32_t)json_integer_value(v);
  }
  return TL_OK;
}

/* 4. Post-processor: the tokens around a text. */
static tl_status read_post(tl_hf_tokenizer* t, const json_t* post, const char* field) {
  if (is_null(post)) return TL_OK;
  const char* ty = json_string_value(json_object_get(post, "type"));
  char f[160];
  snprintf(f, sizeof f, "%s.type", field);
  if (!ty) return bad(t, TL_ERR_FORMAT, "%s is missing", f);
  if (strcmp(ty, "ByteLevel") == 0) return TL_OK; /* offsets only */
  if (strcmp(ty, "Sequence") == 0) {
    const json_t* list = json_object_get(post, "processors");
    for (size_t i = 0; i < json_array_size(list); i++) {
      snprintf(f, sizeof f, "%s.processors[%zu]", field, i);
      TL_CHECK(read_post(t, json_array_get(list, i), f));
    }
    return TL_OK;
  }
  /* each processor wraps what the ones before it made */
  int32_t before[TL__HF_MAX_AROUND], after[TL__HF_MAX_AROUND];
  int nb = 0, na = 0;
  if (strcmp(ty, "RobertaProcessing") == 0 || strcmp(ty, "BertProcessing") == 0) {
    const json_t* cls = json_object_get(post, "cls");
    const json_t* sep = json_object_get(post, "sep");
    json_t* one_cls = json_array();
    json_t* one_sep = json_array();
    json_array_append(one_cls, json_array_get(cls, 1));
    json_array_append(one_sep, json_array_get(sep, 1));
    snprintf(f, sizeof f, "%s.cls", field);
    tl_status st = push_ids(t, before, &nb, one_cls, f);
    snprintf(f, sizeof f, "%s.sep", field);
    if (st == TL_OK) st = push_ids(t, after, &na, one_sep, f);
    json_decref(one_cls);
    json_decref(one_sep);
    TL_CHECK(st);
  } else if (strcmp(ty, "TemplateProcessing") == 0) {
    const json_t* single = json_object_get(post, "single");
    const json_t* specials = json_object_get(post, "special_tokens");
    int seen_a = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
      const json_t* item = json_array_get(single, i);
      const json_t* special = json_object_get(item, "SpecialToken");
      const json_t* seq = json_object_get(item, "Sequence");
      snprintf(f, sizeof f, "%s.single[%zu]", field, i);
      if (seq) {
        if (seen_a) return unsupported(t, f, "(a second sequence in the single template)");
        seen_a = 1;
      } else if (special) {
        const char* name = json_string_value(json_object_get(special, "id"));
        const json_t* ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
          return bad(t, TL_ERR_FORMAT, "%s names special token \"%s\", which special_tokens lacks",
                     f, name ? name : "(none)");
        TL_CHECK(push_ids(t, seen_a ? after : before, seen_a ? &na : &nb, ids, f));
      } else {
        return bad(t, TL_ERR_FORMAT, "%s is neither a SpecialToken nor a Sequence", f);
      }
    }
    if (!seen_a) {
      snprintf(f, sizeof f, "%s.single", field);
      return bad(t, TL_ERR_FORMAT, "%s has no $A (the text)", f);
    }
  } else {
    return unsupported(t, f, ty);
  }
  if (t->n_before + nb > TL__HF_MAX_AROUND || t->n_after + na > TL__HF_MAX_AROUND)
    return unsupported(t, field, "(more than 16 tokens around a text)");
  memmove(t->before + nb, t->before, sizeof(int32_t) * (size_t)t->n_before);
  memcpy(t->before, before, sizeof(int32_t) * (size_t)nb);
  t->n_before += nb;
  memcpy(t->after + t->n_after, after, sizeof(int32_t) * (size_t)na);
  t->n_after += na;
  return TL_OK;
}

/* 5. What each id decodes to: a model token's letters read back as bytes
 * (tokenizers' ByteLevel decoder; a token with a letter outside the byte
 * alphabet is its own UTF-8), an added token's content. */
static tl_status build_bytes(tl_hf_tokenizer* t) {
  static int16_t letter_byte[0x144];
  for (int i = 0; i < 0x144; i++) letter_byte[i] = -1;
  for (unsigned b = 0; b < 256; b++) {
    char u[2];
    const int n = tl__hf_byte_letter_utf8(b, u);
    const unsigned cp = n == 1
                            ? (unsigned char)u[0]
                            : (((unsigned char)u[0] & 0x1Fu) << 6) | ((unsigned char)u[1] & 0x3Fu);
    letter_byte[cp] = (int16_t)b;
  }
  const char** added_of = calloc((size_t)t->n_ids, sizeof(char*));
  size_t* added_len = calloc((size_t)t->n_ids, sizeof(size_t));
  t->bytes = malloc((size_t)t->vocab_off[t->n_ids] + 1 +
                    (t->n_added ? (size_t)(t->added[0].len * (size_t)t->n_added) : 0));
  t->bytes_off = calloc((size_t)t->n_ids + 1, sizeof(int64_t));
  t->is_token = calloc((size_t)t->n_ids, 1);
  if (!added_of || !added_len || !t->bytes || !t->bytes_off || !t->is_token) {
    free(added_of);
    free(added_len);
    return bad(t, TL_ERR_NOMEM, "out of memory for %lld ids", (long long)t->n_ids);
  }
  for (int i = 0; i < t->n_added; i++) {
    added_of[t->added[i].id] = t->added[i].content;
    added_len[t->added[i].id] = t->added[i].len;
  }
  int64_t at = 0;
  for (int64_t id = 0; id < t->n_ids; id++) {
    t->bytes_off[id] = at;
    const char* s;
    size_t n;
    if (added_of[id]) {
      s = added_of[id], n = added_len[id];
    } else if (t->is_model[id]) {
      s = t->vocab_text + t->vocab_off[id], n = (size_t)(t->vocab_off[id + 1] - t->vocab_off[id]);
    } else {
      continue;
    }
    t->is_token[id] = 1;
    /* letters of the byte alphabet are 1 or 2 UTF-8 bytes */
    int64_t w = at;
    for (size_t i = 0; i < n;) {
      const unsigned char c = (unsigned char)s[i];
      unsigned cp = 0x144;
      size_t k = 1;
      if (c < 0x80)
        cp = c;
      else if ((c & 0xE0) == 0xC0 && i + 1 < n)
        cp = ((c & 0x1Fu) << 6) | ((unsigned char)s[i + 1] & 0x3Fu), k = 2;
      if (cp >= 0x144 || letter_byte[cp] < 0) { /* not all letters: its own UTF-8 */
        memcpy(t->bytes + at, s, n);
        w = at + (int64_t)n;
        break;
      }
      t->bytes[w++] = (char)letter_byte[cp];
      i += k;
    }
    at = w;
  }
  t->bytes_off[t->n_ids] = at;
  free(added_of);
  free(added_len);
  return TL_OK;
}

tl_status tl_hf_tokenizer_create(const char* path, tl_hf_tokenizer** out) {
  *out = NULL;
  tl_hf_tokenizer* t = calloc(1, sizeof *t);
  if (!t) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading tokenizer '%s'", path);
  snprintf(t->path, sizeof t->path, "%s", path);
  FILE* f = fopen(path, "rb");
  if (!f) {
    tl_status st = TL_ERRF(TL_ERR_IO, "cannot open tokenizer '%s': %s", path, strerror(errno));
    free(t);
    return st;
  }
  fclose(f);
  json_error_t err;
  json_t* root = json_load_file(path, 0, &err);
  tl_status st = TL_OK;
  if (!root) {
    st = TL_ERRF(TL_ERR_FORMAT, "tokenizer '%s' is not a readable tokenizer.json: %s (line %d)",
                 path, err.text, err.line);
  } else if (!json_is_object(root)) {
    st = bad(t, TL_ERR_FORMAT, "expected a JSON object (Hugging Face's tokenizer.json)");
  } else {
    const char* top[] = {"truncation", "padding"};
    for (int i = 0; i < 2 && st == TL_OK; i++)
      if (!is_null(json_object_get(root, top[i])))
        st = unsupported(t, top[i], "(set; a token file holds every token of the text)");
    if (st == TL_OK) st = read_normalizer(t, json_object_get(root, "normalizer"));
    int64_t max_added = -1;
    if (st == TL_OK) st = read_added(t, json_object_get(root, "added_tokens"), &max_added);
    if (st == TL_OK) st = read_model(t, json_object_get(root, "model"), max_added);
    if (st == TL_OK) st = read_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"));
    if (st == TL_OK) st = read_post(t, json_object_get(root, "post_processor"), "post_processor");
    const json_t* dec = json_object_get(root, "decoder");
    const char* dty = json_string_value(json_object_get(dec, "type"));
    if (st == TL_OK && (!dty || strcmp(dty, "ByteLevel") != 0))
      st = unsupported(t, "decoder.type", dty ? dty : "(missing)");
    if (st == TL_OK) st = build_bytes(t);
  }
  json_decref(root);
  if (st != TL_OK) {
    tl_hf_tokenizer_destroy(t);
    return st;
  }
  *out = t;
  return TL_OK;
}

void tl_hf_tokenizer_destroy(tl_hf_tokenizer* t) {
  if (!t) return;
  free(t->vocab_text);
  free(t->vocab_off);
  free(t->is_model);
  free(t->vocab_slots);
  free(t->pairs);
  pcre2_code_free(t->split);
  free(t->added);
  free(t->added_text);
  free(t->bytes);
  free(t->bytes_off);
  free(t->is_token);
  free(t);
}

int64_t tl_hf_tokenizer_vocab(const tl_hf_tokenizer* t) {
  return t->n_ids;
}

const char* tl_hf_tokenizer_bytes(const tl_hf_tokenizer* t, int64_t id, size_t* len) {
  if (id < 0 || id >= t->n_ids || !t->is_token[id]) return NULL;
  *len = (size_t)(t->bytes_off[id + 1] - t->bytes_off[id]);
  return t->bytes + t->bytes_off[id];
}

int64_t tl_hf_tokenizer_added(const tl_hf_tokenizer* t, const char* content) {
  for (int i = 0; i < t->n_added; i++)
    if (t->added[i].len == strlen(content) &&
        memcmp(t->added[i].content, content, t->added[i].len) == 0)
      return t->added[i].id;
  return -1;
}
