/* hf_encode.c — text to ids with a tokenizer.json (see hf_tokenizer.h).
 *
 * Shaped for corpora of gigabytes on a few cores:
 * 1. one thread walks the text: added tokens (a byte table says where one
 *    may begin), then the split pattern (PCRE2, JIT, no UTF re-check: the
 *    text is checked once) over each stretch between them, copying pieces
 *    into a batch;
 * 2. when the batch is full, `threads` threads merge its pieces (each its
 *    own contiguous run of pieces, its own cache of pieces already merged:
 *    words repeat) and the runs are appended in order — the same ids for
 *    any number of threads;
 * 3. the walk goes on where it stopped, so the pattern always sees the text
 *    as tokenizers does (a stretch between added tokens whole).
 * Merging follows tokenizers' BPE: the pair of lowest rank first, the
 * leftmost of equal rank, with ignore_merges taking a piece that is itself a
 * token whole. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <xxhash.h>

#include "launcher/data/hf_tokenizer_impl.h"

enum {
  BATCH_PIECES = 1 << 16,
  BATCH_BYTES = 4 << 20,
  CACHE_SLOTS = 1 << 15,
  CACHE_MAX_PIECE = 128
};

typedef struct piece {
  int64_t off; /* in the batch's bytes */
  int32_t len; /* -1: an added token */
  int32_t id;
} piece;

typedef struct u32_vec {
  uint32_t* v;
  size_t n, cap;
} u32_vec;

static int push(u32_vec* a, uint32_t x) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 1024;
    uint32_t* v = realloc(a->v, sizeof(uint32_t) * cap);
    if (!v) return 0;
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = x;
  return 1;
}

/* Pieces already merged, by their bytes: cleared when full. */
typedef struct cache_slot {
  uint64_t hash;
  uint32_t key_off, key_len, ids_off, n_ids; /* key_len 0: empty */
} cache_slot;

typedef struct worker {
  const tl_hf_tokenizer* t;
  const piece* pieces;
  const char* bytes;
  size_t first, last; /* pieces [first, last) */
  u32_vec out;
  cache_slot* cache;
  size_t cache_used;
  char* keys;
  size_t keys_n;
  u32_vec cache_ids;
  /* merge scratch, for pieces up to scratch_cap bytes */
  int32_t *sym, *prev, *next;
  struct heap_item {
    int32_t rank, pos;
  } * heap;
  size_t scratch_cap;
  char* letters;
  int failed;
} worker;

static int grow_scratch(worker* w, size_t n) {
  if (n <= w->scratch_cap) return 1;
  size_t cap = n < 256 ? 256 : 2 * n;
  free(w->sym), free(w->prev), free(w->next), free(w->heap), free(w->letters);
  w->sym = malloc(sizeof(int32_t) * cap);
  w->prev = malloc(sizeof(int32_t) * cap);
  w->next = malloc(sizeof(int32_t) * cap);
  w->heap = malloc(sizeof(struct heap_item) * 2 * cap);
  w->letters = malloc(2 * cap);
  w->scratch_cap = cap;
  return w->sym && w->prev && w->next && w->heap && w->letters;
}

static int heap_less(struct heap_item a, struct heap_item b) {
  return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct heap_item* h, size_t* n, struct heap_item x) {
  size_t i = (*n)++;
  while (i > 0 && heap_less(x, h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = x;
}

static struct heap_item heap_pop(struct heap_item* h, size_t* n) {
  struct heap_item top = h[0], x = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && heap_less(h[c + 1], h[c])) c++;
    if (!heap_less(h[c], x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = x;
  return top;
}

/* Merges piece b[0 .. n) into w->out. */
static int merge_piece(worker* w, const unsigned char* b, size_t n) {
  const tl_hf_tokenizer* t = w->t;
  if (!grow_scratch(w, n)) return 0;
  if (t->ignore_merges) { /* the piece is a token: taken whole */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += (size_t)tl__hf_byte_letter_utf8(b[i], w->letters + m);
    const int32_t id = tl__hf_vocab_find(t, w->letters, m);
    if (id >= 0) return push(&w->out, (uint32_t)id);
  }
  int32_t *sym = w->sym, *prev = w->prev, *next = w->next;
  size_t nh = 0;
  for (size_t i = 0; i < n; i++) {
    sym[i] = t->byte_id[b[i]];
    prev[i] = (int32_t)i - 1;
    next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    const tl__hf_pair_slot* p = tl__hf_pair_find(t, sym[i], sym[i + 1]);
    if (p) heap_push(w->heap, &nh, (struct heap_item){p->rank, (int32_t)i});
  }
  while (nh) {
    const struct heap_item top = heap_pop(w->heap, &nh);
    const int32_t i = top.pos, j = next[i];
    if (sym[i] < 0 || j < 0) continue;
    const tl__hf_pair_slot* p = tl__hf_pair_find(t, sym[i], sym[j]);
    if (!p || p->rank != top.rank) continue; /* this pair changed since */
    sym[i] = p->id;
    sym[j] = -1;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    if (prev[i] >= 0) {
      const tl__hf_pair_slot* q = tl__hf_pair_find(t, sym[prev[i]], sym[i]);
      if (q) heap_push(w->heap, &nh, (struct heap_item){q->rank, prev[i]});
    }
    if (next[i] >= 0) {
      const tl__hf_pair_slot* q = tl__hf_pair_find(t, sym[i], sym[next[i]]);
      if (q) heap_push(w->heap, &nh, (struct heap_item){q->rank, i});
    }
  }
  for (int32_t i = 0; i >= 0; i = next[i])
    if (!push(&w->out, (uint32_t)sym[i])) return 0;
  return 1;
}

static void cache_clear(worker* w) {
  memset(w->cache, 0, sizeof(cache_slot) * CACHE_SLOTS);
  w->cache_used = 0, w->keys_n = 0, w->cache_ids.n = 0;
}

/* Merges a piece through the cache. */
static int encode_piece(worker* w, const char* s, size_t n) {
  if (n == 0) return 1;
  if (n > CACHE_MAX_PIECE) return merge_piece(w, (const unsigned char*)s, n);
  const uint64_t h = XXH3_64bits(s, n);
  size_t i = h & (CACHE_SLOTS - 1);
  for (; w->cache[i].key_len; i = (i + 1) & (CACHE_SLOTS - 1)) {
    const cache_slot* c = &w->cache[i];
    if (c->hash == h && c->key_len == n && memcmp(w->keys + c->key_off, s, n) == 0) {
      for (uint32_t k = 0; k < c->n_ids; k++)
        if (!push(&w->out, w->cache_ids.v[c->ids_off + k])) return 0;
      return 1;
    }
  }
  const size_t from = w->out.n;
  if (!merge_piece(w, (const unsigned char*)s, n)) return 0;
  if (w->cache_used >= CACHE_SLOTS / 2) {
    cache_clear(w);
    i = h & (CACHE_SLOTS - 1);
  }
  cache_slot c = {h, (uint32_t)w->keys_n, (uint32_t)n, (uint32_t)w->cache_ids.n,
                  (uint32_t)(w->out.n - from)};
  memcpy(w->keys + w->keys_n, s, n); /* keys holds CACHE_SLOTS / 2 pieces of the largest size */
  w->keys_n += n;
  for (size_t k = from; k < w->out.n; k++)
    if (!push(&w->cache_ids, w->out.v[k])) return 0;
  w->cache[i] = c;
  w->cache_used++;
  return 1;
}

static void* run_worker(void* arg) {
  worker* w = arg;
  w->out.n = 0;
  for (size_t i = w->first; i < w->last && !w->failed; i++) {
    const piece* p = &w->pieces[i];
    if (p->len < 0)
      w->failed = !push(&w->out, (uint32_t)p->id);
    else
      w->failed = !encode_piece(w, w->bytes + p->off, (size_t)p->len);
  }
  return NULL;
}

/* The encoding's state: the batch, the workers, the result. */
typedef struct encoder {
  const tl_hf_tokenizer* t;
  piece* pieces;
  size_t n_pieces;
  char* bytes;
  size_t n_bytes, bytes_cap;
  worker* workers;
  int n_workers;
  u32_vec ids;
  pcre2_match_data* match;
  size_t done, total; /* text bytes walked */
  tl_hf_progress progress;
  void* progress_arg;
} encoder;

static tl_status nomem(const encoder* e) {
  return TL_ERRF(TL_ERR_NOMEM, "out of memory encoding %zu bytes with tokenizer '%s'", e->total,
                 e->t->path);
}

/* 2. Merges the batch's pieces on the workers and appends their ids. */
static tl_status flush(encoder* e) {
  if (e->n_pieces == 0) return TL_OK;
  int nw = e->n_workers;
  if (e->n_bytes < 65536) nw = 1;
  /* runs of about equal bytes */
  size_t at = 0;
  for (int k = 0; k < nw; k++) {
    worker* w = &e->workers[k];
    w->pieces = e->pieces, w->bytes = e->bytes, w->failed = 0;
    w->first = at;
    const size_t goal = e->n_bytes * (size_t)(k + 1) / (size_t)nw;
    while (at < e->n_pieces && (k == nw - 1 || e->pieces[at].off < (int64_t)goal)) at++;
    w->last = at;
  }
  pthread_t tid[64];
  int started = 0;
  for (int k = 1; k < nw; k++, started++)
    if (pthread_create(&tid[k], NULL, run_worker, &e->workers[k]) != 0) break;
  run_worker(&e->workers[0]);
  for (int k = started; k < nw - 1; k++) run_worker(&e->workers[k + 1]); /* not started: here */
  for (int k = 1; k <= started; k++) pthread_join(tid[k], NULL);
  for (int k = 0; k < nw; k++) {
    const worker* w = &e->workers[k];
    if (w->failed) return nomem(e);
    if (e->ids.n + w->out.n > e->ids.cap) {
      size_t cap = e->ids.cap ? e->ids.cap : 1 << 16;
      while (cap < e->ids.n + w->out.n) cap *= 2;
      uint32_t* v = realloc(e->ids.v, sizeof(uint32_t) * cap);
      if (!v) return nomem(e);
      e->ids.v = v, e->ids.cap = cap;
    }
    memcpy(e->ids.v + e->ids.n, w->out.v, sizeof(uint32_t) * w->out.n);
    e->ids.n += w->out.n;
  }
  e->n_pieces = 0, e->n_bytes = 0;
  if (e->progress) e->progress(e->progress_arg, e->done, e->total);
  return TL_OK;
}

/* Adds a piece (with a space in front when `space`) to the batch. */
static tl_status add_piece(encoder* e, const char* s, size_t n, int space) {
  if (n == 0) return TL_OK;
  if (e->n_pieces == BATCH_PIECES ||
      (e->n_bytes > BATCH_BYTES && e->n_bytes + n + 1 > e->bytes_cap))
    TL_CHECK(flush(e));
  if (e->n_bytes + n + 1 > e->bytes_cap) {
    size_t cap = 2 * (e->n_bytes + n + 1);
    char* b = realloc(e->bytes, cap);
    if (!b) return nomem(e);
    e->bytes = b, e->bytes_cap = cap;
  }
  e->pieces[e->n_pieces++] = (piece){(int64_t)e->n_bytes, (int32_t)(n + (size_t)space), -1};
  if (space) e->bytes[e->n_bytes++] = ' ';
  memcpy(e->bytes + e->n_bytes, s, n);
  e->n_bytes += n;
  return TL_OK;
}

static tl_status add_token(encoder* e, int32_t id) {
  if (e->n_pieces == BATCH_PIECES) TL_CHECK(flush(e));
  e->pieces[e->n_pieces++] = (piece){0, -1, id};
  return TL_OK;
}

/* 1b. A stretch of text between added tokens: the pattern's pieces and the
 * text between them (Isolated), each with ByteLevel's space if asked. */
static tl_status pre_tokenize(encoder* e, const char* s, size_t n) {
  const tl_hf_tokenizer* t = e->t;
  if (n == 0) return TL_OK;
  char* spaced = NULL;
  if (t->prefix_space && t->prefix_on_segment && s[0] != ' ') {
    if (!t->split) return add_piece(e, s, n, 1);
    spaced = malloc(n + 1);
    if (!spaced) return nomem(e);
    spaced[0] = ' ';
    memcpy(spaced + 1, s, n);
    s = spaced, n++;
  }
  if (!t->split) return add_piece(e, s, n, 0);
  const int space = t->prefix_space && !t->prefix_on_segment;
  tl_status st = TL_OK;
  size_t pos = 0, from = 0;
  while (st == TL_OK && pos <= n) {
    const int rc =
        pcre2_match(t->split, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, e->match, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      st = TL_ERRF(TL_ERR_INTERNAL, "tokenizer '%s': the split pattern failed: %s", t->path,
                   (const char*)msg);
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(e->match);
    const size_t ms = ov[0], me = ov[1];
    if (me == ms) { /* an empty match splits nothing: look again one letter on */
      from = ms + 1;
      while (from < n && ((unsigned char)s[from] & 0xC0) == 0x80) from++;
      if (from > n) break;
      continue;
    }
    if (ms > pos) st = add_piece(e, s + pos, ms - pos, space && s[pos] != ' ');
    if (st == TL_OK) st = add_piece(e, s + ms, me - ms, space && s[ms] != ' ');
    pos = from = me;
  }
  if (st == TL_OK && pos < n) st = add_piece(e, s + pos, n - pos, space && s[pos] != ' ');
  free(spaced);
  return st;
}

/* The first added token of set `normalized` in s[0 .. n), leftmost then
 * longest: its offset, or n. */
static size_t find_added(const tl_hf_tokenizer* t, int normalized, const char* s, size_t n,
                         const tl__hf_added** which) {
  const uint8_t* first = t->added_first[normalized];
  for (size_t i = 0; i < n; i++) {
    if (!first[(unsigned char)s[i]]) continue;
    for (int k = 0; k < t->n_added; k++) {
      const tl__hf_added* a = &t->added[k];
      if (a->normalized == normalized && a->len <= n - i &&
          memcmp(s + i, a->content, a->len) == 0) {
        *which = a;
        return i;
      }
    }
  }
  return n;
}

/* 1a. The text, split at the added tokens: those not normalized first, then
 * the normalized ones in what is left (tokenizers' two passes). */
/* The normalizer's steps over s[0 .. n): *out (malloc'd, the caller's) of
 * *len bytes, or NULL with no steps. */
static tl_status normalize(const encoder* e, const char* s, size_t n, char** out, size_t* len) {
  *out = NULL, *len = n;
  const tl_hf_tokenizer* t = e->t;
  for (int k = 0; k < t->n_norm; k++) {
    utf8proc_uint8_t* dst = NULL;
    const utf8proc_ssize_t m =
        utf8proc_map((const utf8proc_uint8_t*)(*out ? *out : s), (utf8proc_ssize_t)*len, &dst,
                     (utf8proc_option_t)t->norm[k]);
    free(*out);
    *out = NULL;
    if (m < 0)
      return TL_ERRF(m == UTF8PROC_ERROR_NOMEM ? TL_ERR_NOMEM : TL_ERR_FORMAT,
                     "tokenizer '%s': the normalizer failed on the text: %s", t->path,
                     utf8proc_errmsg(m));
    *out = (char*)dst, *len = (size_t)m;
  }
  return TL_OK;
}

/* 1a. The text, split at the added tokens: those not normalized first, on
 * the text as it is; then each stretch between them normalized and the
 * normalized ones matched in it (tokenizers' two passes). */
static tl_status walk(encoder* e, const char* s, size_t n) {
  const tl_hf_tokenizer* t = e->t;
  for (size_t pos = 0; pos < n;) {
    const tl__hf_added* a = NULL;
    const size_t at = find_added(t, 0, s + pos, n - pos, &a) + pos;
    char* norm = NULL;
    size_t len = at - pos;
    TL_CHECK(normalize(e, s + pos, at - pos, &norm, &len));
    const char* seg = norm ? norm : s + pos;
    tl_status st = TL_OK;
    for (size_t p = 0; p < len && st == TL_OK;) { /* the normalized ones, inside */
      const tl__hf_added* b = NULL;
      const size_t bt = find_added(t, 1, seg + p, len - p, &b) + p;
      st = pre_tokenize(e, seg + p, bt - p);
      if (st != TL_OK || bt == len) break;
      st = add_token(e, b->id);
      p = bt + b->len;
    }
    free(norm);
    TL_CHECK(st);
    e->done = at;
    if (at == n) break;
    TL_CHECK(add_token(e, a->id));
    pos = at + a->len;
    e->done = pos;
  }
  e->done = n;
  return TL_OK;
}

/* Offset of the first byte that does not begin a well-formed UTF-8
 * character, or n. */
static size_t utf8_check(const unsigned char* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t k;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF)
      k = 1, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
      k = 2, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
      k = 3, cp = c & 0x07;
    else
      return i;
    for (size_t j = 1; j <= k; j++) {
      if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return i;
    i += k + 1;
  }
  return n;
}

tl_status tl_hf_tokenizer_encode(const tl_hf_tokenizer* t, const char* text, size_t len,
                                 int add_special, int threads, tl_hf_progress progress,
                                 void* progress_arg, uint32_t** ids, int64_t* n) {
  *ids = NULL, *n = 0;
  const size_t bad = utf8_check((const unsigned char*)text, len);
  if (bad < len)
    return TL_ERRF(TL_ERR_FORMAT,
                   "the text is not UTF-8: byte %zu (0x%02x) begins no character; tokenizer '%s' "
                   "reads UTF-8 text",
                   bad, (unsigned char)text[bad], t->path);
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  encoder e = {.t = t,
               .n_workers = threads,
               .total = len,
               .progress = progress,
               .progress_arg = progress_arg};
  tl_status st = TL_OK;
  e.pieces = malloc(sizeof(piece) * BATCH_PIECES);
  e.workers = calloc((size_t)threads, sizeof(worker));
  e.match = t->split ? pcre2_match_data_create_from_pattern(t->split, NULL) : NULL;
  if (!e.pieces || !e.workers || (t->split && !e.match)) st = nomem(&e);
  for (int k = 0; st == TL_OK && k < threads; k++) {
    worker* w = &e.workers[k];
    w->t = t;
    w->cache = calloc(CACHE_SLOTS, sizeof(cache_slot));
    w->keys = malloc((size_t)CACHE_SLOTS / 2 * CACHE_MAX_PIECE);
    if (!w->cache || !w->keys) st = nomem(&e);
  }
  for (int i = 0; st == TL_OK && add_special && i < t->n_before; i++)
    if (!push(&e.ids, (uint32_t)t->before[i])) st = nomem(&e);
  if (st == TL_OK) st = walk(&e, text, len);
  if (st == TL_OK) st = flush(&e);
  for (int i = 0; st == TL_OK && add_special && i < t->n_after; i++)
    if (!push(&e.ids, (uint32_t)t->after[i])) st = nomem(&e);
  for (int k = 0; e.workers && k < threads; k++) {
    worker* w = &e.workers[k];
    free(w->out.v), free(w->cache), free(w->keys), free(w->cache_ids.v);
    free(w->sym), free(w->prev), free(w->next), free(w->heap), free(w->letters);
  }
  free(e.workers);
  free(e.pieces);
  free(e.bytes);
  pcre2_match_data_free(e.match);
  if (st != TL_OK) {
    free(e.ids.v);
    return st;
  }
  *ids = e.ids.v;
  *n = (int64_t)e.ids.n;
  return TL_OK;
}
