/* pieces.c — the parameters whose gradients are written a piece of rows
 * at a time (the config's piece_cols: the tied embedding, on a stage that
 * holds both its readers or on each of two that hold one), under ZeRO 2
 * and 3: each piece written straight into a bucket buffer and
 * reduce-scattered as it ends; under ZeRO-3 over a group read a piece at a
 * time too, each gathered into a piece slot (see buckets.h). */
#include <stdint.h>
#include <stdlib.h>

#include "core/timer.h"
#include "dp/buckets.h"
#include "dp/buckets_impl.h"
#include "graph/exec.h"

/* The parameters written in pieces (c->piece_cols): the tail of the
 * layout's back, from b->piece_from. */
tl_status tl__dp_pieced_tail(tl_dp_buckets* b, const struct tl_dp_buckets_config* c) {
  const tl_dp_layout* l = c->layout;
  b->piece_from = l->n;
  b->piece_slot = -1;
  if (!c->piece_cols || c->zero < 2) return TL_OK;
  const size_t nv = (size_t)tl__dp_at_least_one(l->n_values);
  b->piece_cols = calloc(nv, sizeof(int64_t));
  b->piece_rows = calloc(nv, sizeof(int64_t));
  b->piece_b0 = calloc(nv, sizeof(int));
  b->piece_b1 = calloc(nv, sizeof(int));
  if (!b->piece_cols || !b->piece_rows || !b->piece_b0 || !b->piece_b1)
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
  for (int i = 0; i < l->n_segments; i++) {
    const tl_dp_segment* s = &l->segments[i];
    const int64_t cols = c->piece_cols[s->value];
    if (cols <= 0) {
      if (b->piece_from < l->n)
        return TL_ERRF(TL_ERR_INTERNAL,
                       "gradient buckets: parameter value %d lies behind those written in pieces",
                       s->value);
      continue;
    }
    if (s->offset < l->n_early || s->n % cols != 0)
      return TL_ERRF(TL_ERR_INTERNAL,
                     "gradient buckets: parameter value %d (%lld elements) cannot be written in "
                     "pieces of rows of %lld%s",
                     s->value, (long long)s->n, (long long)cols,
                     s->offset < l->n_early ? " (it is not late)" : "");
    if (b->piece_from == l->n) b->piece_from = s->offset;
    b->piece_cols[s->value] = cols;
  }
  return TL_OK;
}

/* ---- the gradient in pieces -------------------------------------------- */

int64_t tl_dp_buckets_piece_rows(const tl_dp_buckets* b, int v) {
  return b->piece_rows && v >= 0 && v < b->layout->n_values ? b->piece_rows[v] : 0;
}

tl_status tl_dp_buckets_piece_begin(tl_dp_buckets* b, int v, int64_t row0, int64_t rows,
                                    float** grad) {
  *grad = NULL;
  const int64_t per = tl_dp_buckets_piece_rows(b, v);
  const int i = per > 0 && row0 % per == 0 ? b->piece_b0[v] + (int)(row0 / per) : -1;
  if (i < 0 || i >= b->n_buckets || b->piece_slot >= 0 ||
      b->begin[i + 1] - b->begin[i] != rows * b->piece_cols[v])
    return TL_ERRF(TL_ERR_INTERNAL,
                   "ZeRO-%d: rows [%lld, %lld) of parameter value %d are not one of its pieces "
                   "(%lld rows each)%s",
                   b->zero, (long long)row0, (long long)(row0 + rows), v, (long long)per,
                   b->piece_slot >= 0 ? ", or came before the last piece ended" : "");
  /* a slot the stream is not filling; its last reduction lands first */
  int s = b->slot_fill[b->pslot] >= 0 ? 1 - b->pslot : b->pslot;
  TL_CHECK(tl__dp_retire(b, s));
  TL_CHECK(tl_memzero(b->be->device, b->slot[s]->data,
                      sizeof(float) * (size_t)(rows * b->piece_cols[v])));
  b->piece_slot = s, b->piece_bucket = i;
  *grad = b->slot[s]->data;
  return TL_OK;
}

tl_status tl_dp_buckets_piece_end(tl_dp_buckets* b, int v, int64_t row0, int64_t rows) {
  (void)v, (void)row0, (void)rows;
  const int s = b->piece_slot, i = b->piece_bucket;
  if (s < 0) return TL_ERRF(TL_ERR_INTERNAL, "ZeRO-%d: a piece ended that never began", b->zero);
  b->piece_slot = -1;
  TL_CHECK(tl__dp_progress(b));
  TL_CHECK(tl__dp_reduce_bucket(b, i, s, b->slot[s]->data));
  if (!b->group) TL_CHECK(tl__dp_retire(b, s)); /* added now: the slot is reused next */
  b->pslot = 1 - s;
  return TL_OK;
}

int64_t tl_dp_piece_rows(int64_t per, int64_t cols, int64_t all, int64_t room) {
  int64_t rows = per / cols < 1 ? 1 : per / cols > all ? all : per / cols;
  /* at least half a bucket's rows: smaller pieces would cost more
   * collectives than their slots' bytes are worth */
  const int64_t half = room / 2 / cols;
  if (rows < all && half >= 1 && rows > half && 2 * half >= rows) rows = half;
  return rows;
}

bool tl_dp_solo_pieces_pay(int64_t n, int64_t staging, int64_t after, int64_t pieced, int64_t piece,
                           double temps, int size, double bucket_mb, tl_dtype wire,
                           tl_dtype params) {
  if (pieced <= 0 || piece <= 0 || size <= 1 || after >= staging) return false;
  const int64_t whole =
      tl_dp_buckets_bytes(2, n, 0, 0, 0, staging, 0, 0, 0, size, bucket_mb, wire, params);
  const int64_t pieces = tl_dp_buckets_bytes(2, n, pieced, pieced, piece, after, 0, 0, 0, size,
                                             bucket_mb, wire, params);
  return (double)pieces + temps < (double)whole;
}

int tl_dp_solo_candidates(const tl_graph* g, int begin, int end, const tl_dp_layout* l, int* out,
                          int max, int64_t* pieced, int64_t* after) {
  *pieced = *after = 0;
  if (l->n_early < l->n) return 0;
  /* the groups of segments by the node that first reads them: the largest
   * (the first of equals, as tl_dp_layout_staging takes it) and the next */
  int64_t most = -1, next = 0;
  int first = -1;
  for (int i = 0; i < l->n_segments;) {
    int j = i;
    int64_t sum = 0;
    for (; j < l->n_segments && l->segments[j].first_use == l->segments[i].first_use; j++)
      sum += l->segments[j].n;
    if (sum > most) {
      if (most > next) next = most;
      most = sum, first = i;
    } else if (sum > next) {
      next = sum;
    }
    i = j;
  }
  int n = 0;
  for (int i = first;
       first >= 0 && i < l->n_segments && l->segments[i].first_use == l->segments[first].first_use;
       i++) {
    const int v = l->segments[i].value;
    if (g->values[v].n_dims != 2 || tl_dp_readers(g, begin, end, v) != 1 ||
        !tl_exec_can_piece(g, begin, end, v))
      continue;
    if (n < max) out[n] = v;
    n++;
    *pieced += l->segments[i].n;
  }
  if (n > 0) *after = most - *pieced > next ? most - *pieced : next;
  return n;
}

int64_t tl_dp_solo_piece_rows(int64_t n, int64_t cols, int64_t all, double bucket_mb) {
  return tl_dp_piece_rows(tl_dp_bucket_elems(2, n, bucket_mb), cols, all, 0);
}

bool tl_dp_pieces_in_room(int n_pslots, int64_t piece_max, int64_t room) {
  return room > 0 && n_pslots * piece_max <= room;
}

/* ---- zero 3: the parameter read in pieces ------------------------------ */

/* The piece slots, in the tail of the reading unit's slot where they fit
 * (piece_room), else behind the unit slots (`slots` elements) and the late
 * parameters, and the param buffer that holds them all (`es` bytes an
 * element). */
tl_status tl__dp_piece_slots(tl_dp_buckets* b, int64_t slots, size_t es) {
  const tl_dp_layout* l = b->layout;
  /* the parameters read in pieces (over one rank, whole with the late
   * ones: there is nothing to shard) */
  b->piece_params = b->group && b->piece_from < l->n;
  b->piece_base =
      slots + ((b->piece_params ? b->piece_from : l->n) - l->n_early) - b->late_in_units;
  for (int i = b->n_whole_buckets; b->piece_params && i < b->n_buckets; i++)
    if (b->begin[i + 1] - b->begin[i] > b->piece_max) b->piece_max = b->begin[i + 1] - b->begin[i];
  /* two piece slots (the next gathered ahead), one where each such
   * parameter is one piece */
  b->n_pslots = 1;
  for (int i = 0; i < l->n_segments; i++)
    if (b->piece_params && b->piece_cols[l->segments[i].value] > 0 &&
        b->piece_b1[l->segments[i].value] - b->piece_b0[l->segments[i].value] > 1)
      b->n_pslots = 2;
  b->ppiece[0] = b->ppiece[1] = -1;
  b->pat = -1;
  b->piece_tail = b->piece_params && tl_dp_pieces_in_room(b->n_pslots, b->piece_max, b->piece_room);
  const int64_t behind = b->piece_tail ? 0 : b->n_pslots * b->piece_max;
  return tl_buffer_create(b->be->device, es * (size_t)tl__dp_at_least_one(b->piece_base + behind),
                          &b->pbuf);
}

/* Where piece slot s lies in the param buffer: behind the late parameters,
 * or behind the parameters of the unit being run, in its slot's tail. */
static int64_t piece_at(const tl_dp_buckets* b, int s) {
  if (!b->piece_tail) return b->piece_base + s * b->piece_max;
  const int u = b->ucur;
  return (u % b->n_slots) * b->unit_max + (b->unit_le[u] - b->unit_lb[u]) + s * b->piece_max;
}

/* Waits for piece slot s's gather. */
static tl_status land_piece(tl_dp_buckets* b, int s) {
  if (!b->ppending[s]) return TL_OK;
  int64_t t0 = tl_time_ns();
  tl_status st = tl_group_wait(b->req[b->ppiece[s]]);
  b->req[b->ppiece[s]] = NULL;
  b->wait_s += (double)(tl_time_ns() - t0) * 1e-9;
  b->ppending[s] = false;
  if (st != TL_OK) b->ppiece[s] = -1;
  return st;
}

/* Starts gathering bucket i (a piece) into piece slot s. */
static tl_status gather_piece(tl_dp_buckets* b, int i, int s) {
  TL_CHECK(land_piece(b, s));
  const int64_t dst = piece_at(b, s);
  b->ppiece[s] = i;
  if (b->pbf16 && b->group) TL_CHECK(tl__dp_round_chunks(b, i, i + 1, dst, b->begin[i]));
  b->ppending[s] = b->group != NULL;
  return tl__dp_gather_bucket(b, i, dst, b->group ? &b->req[i] : NULL);
}

tl_status tl_dp_buckets_piece_param(tl_dp_buckets* b, int v, int64_t row0, int64_t rows,
                                    const void** at) {
  *at = NULL;
  const int64_t per = tl_dp_buckets_piece_rows(b, v);
  const int i =
      b->piece_params && per > 0 && row0 % per == 0 ? b->piece_b0[v] + (int)(row0 / per) : -1;
  if (i < 0 || i >= b->n_buckets || b->begin[i + 1] - b->begin[i] != rows * b->piece_cols[v])
    return TL_ERRF(TL_ERR_INTERNAL,
                   "ZeRO-%d: rows [%lld, %lld) of parameter value %d are not one of its pieces",
                   b->zero, (long long)row0, (long long)(row0 + rows), v);
  if (b->piece_tail && (b->ucur < 0 || b->unit_max - (b->unit_le[b->ucur] - b->unit_lb[b->ucur]) <
                                           b->n_pslots * b->piece_max))
    return TL_ERRF(TL_ERR_INTERNAL,
                   "ZeRO-3: parameter value %d is read in pieces by a node of unit %d, whose "
                   "slot has no room for them",
                   v, b->ucur);
  TL_CHECK(tl__dp_progress(b));
  /* the pieces held were gathered behind another unit's parameters */
  if (piece_at(b, 0) != b->pat) {
    TL_CHECK(tl__dp_pieces_drop(b));
    b->pat = piece_at(b, 0);
  }
  int s = b->ppiece[0] == i ? 0 : b->ppiece[1] == i ? 1 : -1;
  if (s < 0) {
    s = b->pnext;
    TL_CHECK(gather_piece(b, i, s));
  }
  TL_CHECK(land_piece(b, s));
  const int64_t off = piece_at(b, s);
  *at = b->pbf16 ? (const void*)((const uint16_t*)b->pbuf->data + off)
                 : (const void*)((const float*)b->pbuf->data + off);
  /* the next piece of the pass: after the first, the second; before the
   * last, the one before it; else the way the last two went */
  const int first = b->piece_b0[v], last = b->piece_b1[v] - 1;
  const int next = i == first ? i + 1 : i == last || i < b->plast ? i - 1 : i + 1;
  b->plast = i;
  if (b->n_pslots < 2) return TL_OK;
  b->pnext = 1 - s;
  if (next >= b->piece_b0[v] && next < b->piece_b1[v] && b->ppiece[1 - s] != next)
    TL_CHECK(gather_piece(b, next, 1 - s));
  return TL_OK;
}

bool tl_dp_buckets_piece_params(const tl_dp_buckets* b) {
  return b->piece_params;
}

/* Lands the piece slots' gathers and forgets what they hold (gathered
 * before the update: stale). */
tl_status tl__dp_pieces_drop(tl_dp_buckets* b) {
  tl_status st = TL_OK;
  for (int s = 0; s < 2; s++) {
    tl_status w = land_piece(b, s);
    if (st == TL_OK) st = w;
    b->ppiece[s] = -1;
  }
  b->pat = -1;
  return st;
}
