/* buckets.c — the buckets, the shard, the gradient reductions of ZeRO 0-2
 * (see buckets.h); ZeRO-3's parameter units are in units.c. */
#include "dp/buckets.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/timer.h"
#include "dp/buckets_impl.h"

int64_t tl__dp_at_least_one(int64_t n) {
  return n > 0 ? n : 1;
}

static int64_t per_bucket(double bucket_mb) {
  int64_t per = (int64_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float));
  return per < 1 ? 1 : per;
}

static int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t tl_dp_bucket_elems(int zero, int64_t n_early, double bucket_mb) {
  int64_t per = per_bucket(bucket_mb);
  if (zero >= 2 && n_early > 0 && bucket_mb < TL_DP_ONE_BUCKET_MB) {
    const int64_t cap = ceil_div(n_early, TL_DP_SHARDED_BUCKETS);
    if (cap < per) per = cap;
  }
  return per;
}

/* Buckets of each part [bounds[k], bounds[k + 1]) of the buffer, per[k]
 * elements each (the last of each part shorter): their count, and the
 * boundaries into begin (n_buckets + 1 of them) when it is not NULL. The
 * buckets of the first n_early_parts parts are the early ones. */
static int cut(const int64_t* bounds, int n_parts, int n_early_parts, const int64_t* per,
               int64_t* begin, int* n_early_buckets) {
  int k = 0;
  for (int part = 0; part < n_parts; part++) {
    if (part == n_early_parts && n_early_buckets) *n_early_buckets = k;
    for (int64_t b = bounds[part]; b < bounds[part + 1]; b += per[part])
      if (begin)
        begin[k++] = b;
      else
        k++;
  }
  if (n_parts == n_early_parts && n_early_buckets) *n_early_buckets = k;
  if (begin) begin[k] = bounds[n_parts];
  return k;
}

void tl__dp_chunk_of(const tl_dp_buckets* b, int i, int64_t* off, int64_t* len) {
  if (b->zero == 0) {
    *off = b->begin[i];
    *len = b->begin[i + 1] - b->begin[i];
    return;
  }
  size_t o, l;
  tl_group_chunk((size_t)(b->begin[i + 1] - b->begin[i]), b->size, b->rank, &o, &l);
  *off = b->begin[i] + (int64_t)o;
  *len = (int64_t)l;
}

int64_t tl_dp_layout_staging(const tl_dp_layout* l) {
  int64_t most = 0;
  for (int i = 0; i < l->n_segments && l->segments[i].offset < l->n_early;) {
    int j = i;
    int64_t sum = 0;
    for (; j < l->n_segments && l->segments[j].offset < l->n_early &&
           l->segments[j].first_use == l->segments[i].first_use;
         j++)
      sum += l->segments[j].n;
    if (sum > most) most = sum;
    i = j;
  }
  return most;
}

/* Each part cut into buckets of `per` (the last shorter), each bucket's
 * chunk on a rank its length / size rounded up: whole buckets times their
 * chunk, plus the short one's. */
static int64_t shard_elems(int64_t n, int64_t n_late, int size, int64_t per) {
  int64_t total = 0;
  int64_t parts[2] = {n - n_late, n_late};
  const int d = size < 1 ? 1 : size;
  for (int p = 0; p < 2; p++) {
    if (parts[p] <= 0) continue;
    const int64_t whole = parts[p] / per, rest = parts[p] % per;
    total += whole * ceil_div(per, d) + (rest > 0 ? ceil_div(rest, d) : 0);
  }
  return total;
}

int64_t tl_dp_shard_elems(int zero, int64_t n, int64_t n_late, int size, double bucket_mb) {
  return shard_elems(n, n_late, size, tl_dp_bucket_elems(zero, n - n_late, bucket_mb));
}

/* zero 2's buffers, in elements: gradient buffer, one slot, one temp, and
 * a bf16 reduction's image of one bucket (the longest of either part: the
 * late buckets are reduced from the gradient buffer, not through a slot,
 * but their bf16 image needs room as well); the pieces' buckets, at most
 * piece_max long, pass through the slots */
static void zero2_sizes(int64_t n, int64_t n_late, int64_t n_pieced, int64_t piece_max,
                        int64_t staging, int size, int64_t per, int64_t* gbuf, int64_t* slot,
                        int64_t* temp, int64_t* image) {
  int64_t early = n - n_late, whole_late = n_late - n_pieced;
  int64_t longest = early > whole_late ? early : whole_late;
  if (longest > per) longest = per;
  if (piece_max > longest) longest = piece_max;
  *gbuf = tl__dp_at_least_one(staging + whole_late);
  int64_t s = early < per ? early : per;
  *slot = tl__dp_at_least_one(s > piece_max ? s : piece_max);
  *temp = size > 1 ? tl__dp_at_least_one(ceil_div(longest, size)) : 0;
  *image = tl__dp_at_least_one(longest);
}

int64_t tl_dp_buckets_bytes(int zero, int64_t n, int64_t n_late, int64_t n_pieced, int64_t piece,
                            int64_t staging, int64_t unit_max, int64_t piece_room,
                            int64_t late_in_units, int size, double bucket_mb, tl_dtype wire,
                            tl_dtype params) {
  const bool bf16 = wire == TL_BF16 && size > 1;
  const int64_t per = tl_dp_bucket_elems(zero, n - n_late, bucket_mb);
  const int64_t shard = tl__dp_at_least_one(shard_elems(n, n_late, size, per));
  /* ZeRO 1 and 2 under bf16 training: the working parameters whole in
   * bf16 and the fp32 master of the shard */
  const int64_t master =
      zero > 0 && zero < 3 && params == TL_BF16 && size > 1
          ? (int64_t)sizeof(uint16_t) * tl__dp_at_least_one(n) + (int64_t)sizeof(float) * shard
          : 0;
  if (zero < 2) return master + (bf16 ? (int64_t)sizeof(uint16_t) * tl__dp_at_least_one(n) : 0);
  int64_t gbuf, slot, temp, image;
  if (n_pieced <= 0 || piece > n_pieced) piece = n_pieced > 0 ? n_pieced : 0;
  zero2_sizes(n, n_late, n_pieced, piece, staging, size, per, &gbuf, &slot, &temp, &image);
  int64_t bytes = master + (int64_t)sizeof(float) * (gbuf + 2 * slot + 2 * temp + shard);
  if (bf16) bytes += (int64_t)sizeof(uint16_t) * (2 * image + 2 * temp);
  if (zero == 3) { /* the parameters: the unit slots, the late ones and the piece slots
                    * (bf16 under bf16 training), and the fp32 shard */
    const int64_t es = params == TL_BF16 ? (int64_t)sizeof(uint16_t) : (int64_t)sizeof(float);
    const int slots = tl_dp_zero3_slots(n, n_late, unit_max, size);
    /* read in pieces over a group: two piece slots for them (one where
     * the parameter is one piece), none where a unit slot's tail holds them */
    const int64_t in_pieces = size > 1 ? n_pieced : 0;
    int64_t pieces = in_pieces > piece ? 2 * piece : in_pieces;
    if (in_pieces > 0 && tl_dp_pieces_in_room(in_pieces > piece ? 2 : 1, piece, piece_room))
      pieces = 0;
    const int64_t with_units = size > 1 ? late_in_units : 0;
    bytes += es * tl__dp_at_least_one(slots * unit_max + n_late - in_pieces - with_units + pieces) +
             (int64_t)sizeof(float) * shard;
  }
  return bytes;
}

static tl_status create_zero2(tl_dp_buckets* b) {
  const tl_dp_layout* l = b->layout;
  tl_device dev = b->be->device;
  b->staging = tl_dp_layout_staging(l);
  int64_t gbuf, slot, temp, image, piece_max = 0;
  for (int i = b->n_whole_buckets; i < b->n_buckets; i++)
    if (b->begin[i + 1] - b->begin[i] > piece_max) piece_max = b->begin[i + 1] - b->begin[i];
  zero2_sizes(l->n, l->n - l->n_early, l->n - b->piece_from, piece_max, b->staging, b->size, b->per,
              &gbuf, &slot, &temp, &image);
  TL_CHECK(tl_buffer_create(dev, sizeof(float) * (size_t)gbuf, &b->gbuf));
  TL_CHECK(tl_memzero(dev, b->gbuf->data, b->gbuf->bytes)); /* staging_written: zeroed once */
  for (int s = 0; s < 2; s++) {
    TL_CHECK(tl_buffer_create(dev, sizeof(float) * (size_t)slot, &b->slot[s]));
    if (temp) TL_CHECK(tl_buffer_create(dev, sizeof(float) * (size_t)temp, &b->temp[s]));
    if (b->bf16) {
      TL_CHECK(tl_buffer_create(dev, sizeof(uint16_t) * (size_t)image, &b->wslot[s]));
      TL_CHECK(tl_buffer_create(dev, sizeof(uint16_t) * (size_t)temp, &b->wtemp[s]));
    }
    b->slot_bucket[s] = b->slot_fill[s] = -1;
  }
  TL_CHECK(
      tl_buffer_create(dev, sizeof(float) * (size_t)tl__dp_at_least_one(b->shard_n), &b->shard));
  /* where each gradient goes: an early one at its place among the
   * gradients its backward node writes, a late one behind the staging */
  for (int i = 0; i < l->n_segments;) {
    const tl_dp_segment* s = &l->segments[i];
    if (s->offset >= l->n_early) { /* none for those written in pieces */
      b->goff[s->value] = s->offset < b->piece_from ? b->staging + (s->offset - l->n_early) : -1;
      i++;
      continue;
    }
    int j = i;
    for (; j < l->n_segments && l->segments[j].offset < l->n_early &&
           l->segments[j].first_use == s->first_use;
         j++)
      b->goff[l->segments[j].value] = l->segments[j].offset - s->offset;
    i = j;
  }
  return tl_dp_buckets_zero_grads(b);
}

/* ZeRO 1 and 2 under bf16 training: the fp32 master of this rank's chunks
 * (the only fp32 copy of the parameters, which the optimizer updates) and
 * the whole stage's bf16 working parameters, at the layout's offsets. */
static tl_status create_master(tl_dp_buckets* b) {
  tl_device dev = b->be->device;
  TL_CHECK(tl_buffer_create(dev, sizeof(uint16_t) * (size_t)tl__dp_at_least_one(b->n), &b->pbuf));
  return tl_buffer_create(dev, sizeof(float) * (size_t)tl__dp_at_least_one(b->shard_n), &b->pshard);
}

tl_status tl_dp_buckets_create(const struct tl_dp_buckets_config* c, tl_dp_buckets** out) {
  *out = NULL;
  if (c->bucket_mb <= 0)
    return TL_ERRF(TL_ERR_CONFIG, "parallel.bucket_mb=%g must be > 0", c->bucket_mb);
  if (c->zero < 0 || c->zero > 3)
    return TL_ERRF(TL_ERR_INVALID, "gradient buckets run ZeRO stages 0-3, not %d", c->zero);
  if ((c->zero >= 2) != !c->grads)
    return TL_ERRF(
        TL_ERR_INVALID, "gradient buckets: a gradient buffer is %s",
        c->zero >= 2 ? "given with zero 2, 3 (the buckets own it)" : "missing with zero 0, 1");
  if (c->zero == 3 && (c->n_units < 1 || !c->unit_begin))
    return TL_ERRF(TL_ERR_INVALID, "ZeRO-3 buckets need the units of the stage (%d given)",
                   c->n_units);
  tl_dp_buckets* b = calloc(1, sizeof *b);
  if (!b) return TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
  b->group = c->dp && tl_group_size(c->dp) > 1 ? c->dp : NULL;
  b->size = b->group ? tl_group_size(b->group) : 1;
  b->rank = b->group ? tl_group_rank(b->group) : 0;
  b->zero = c->zero;
  b->staging_written = c->staging_written;
  b->bf16 = c->wire == TL_BF16 && b->group;
  /* bf16 training: ZeRO-3's gathered units, and under ZeRO 1 and 2 over a
   * group the whole stage's working parameters, in bf16 beside the fp32
   * master shard (over one rank the master would be the whole stage: the
   * caller's fp32 parameters, read rounded, hold less) */
  b->pbf16 = c->params == TL_BF16 && (c->zero == 3 || (c->zero > 0 && b->group));
  b->layout = c->layout;
  b->be = c->be;
  b->grads = c->grads;
  b->n = c->layout->n;
  b->per = tl_dp_bucket_elems(c->zero, c->layout->n_early, c->bucket_mb);
  /* the parts buckets are cut from: the front (with zero 3 each unit's
   * range of it), the back's whole gradients, and each parameter written
   * in pieces, in buckets of whole rows */
  const tl_dp_layout* l = c->layout;
  tl_status st = tl__dp_pieced_tail(b, c);
  if (st == TL_OK && b->zero == 3) st = tl__dp_units_build(b, c);
  if (st == TL_OK && b->zero == 3) tl__dp_units_tails(b, c);
  const int max_parts = (b->zero == 3 ? 3 * b->n_units : 1) + 1 + l->n_segments;
  int64_t* bounds = malloc(sizeof(int64_t) * (size_t)(max_parts + 1));
  int64_t* per = malloc(sizeof(int64_t) * (size_t)max_parts);
  int* part_value = malloc(sizeof(int) * (size_t)max_parts);
  int n_parts = 0, n_early_parts = 0;
  if (st == TL_OK && (!bounds || !per || !part_value))
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
  if (st == TL_OK) {
    if (b->zero == 3) /* the units lie in the front back to front: the last unit first */
      for (int u = b->n_units - 1; u >= 0; u--) bounds[n_parts++] = b->unit_lb[u];
    else
      bounds[n_parts++] = 0;
    n_early_parts = n_parts;
    part_value[n_parts] = -1;
    bounds[n_parts++] = l->n_early;
    /* each late parameter gathered with a unit its own part */
    for (int i = 0; i < l->n_segments; i++) {
      const tl_dp_segment* s = &l->segments[i];
      if (s->offset < l->n_early || !tl__dp_late_in_unit(b, s->offset)) continue;
      if (bounds[n_parts - 1] < s->offset) part_value[n_parts] = -1, bounds[n_parts++] = s->offset;
      part_value[n_parts - 1] = -1;
      if (s->offset + s->n < b->piece_from)
        part_value[n_parts] = -1, bounds[n_parts++] = s->offset + s->n;
    }
    for (int i = 0; i < l->n_segments; i++)
      if (l->segments[i].offset >= b->piece_from) {
        part_value[n_parts] = l->segments[i].value;
        bounds[n_parts++] = l->segments[i].offset;
      }
    bounds[n_parts] = b->n;
    for (int k = 0; k < n_parts; k++) {
      per[k] = b->per;
      if (k > n_early_parts && part_value[k] >= 0) { /* a parameter in pieces: whole rows, at
                                                      * least one, at most all */
        const int64_t cols = b->piece_cols[part_value[k]];
        const int64_t all = (bounds[k + 1] - bounds[k]) / cols;
        const int64_t set = c->piece_rows ? c->piece_rows[part_value[k]] : 0;
        const int64_t rows =
            set > 0 ? (set < all ? set : all) : tl_dp_piece_rows(b->per, cols, all, b->piece_room);
        per[k] = rows * cols;
        b->piece_rows[part_value[k]] = rows;
      }
    }
    b->n_buckets = cut(bounds, n_parts, n_early_parts, per, NULL, NULL);
  }
  b->begin = malloc(sizeof(int64_t) * (size_t)(b->n_buckets + 1));
  b->at = malloc(sizeof(int64_t) * (size_t)(b->n_buckets + 1));
  b->req = calloc((size_t)(b->n_buckets + 1), sizeof(tl_group_request*));
  if (st == TL_OK && (!b->begin || !b->at || !b->req))
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
  if (st == TL_OK) {
    cut(bounds, n_parts, n_early_parts, per, b->begin, &b->n_early_buckets);
    b->n_whole_buckets = b->n_buckets;
    for (int i = b->n_buckets - 1; i >= 0; i--) {
      if (b->begin[i] < b->piece_from) break;
      b->n_whole_buckets = i;
      for (int k = n_early_parts + 1; k < n_parts; k++)
        if (part_value[k] >= 0 && bounds[k] == b->begin[i]) b->piece_b0[part_value[k]] = i;
    }
    for (int k = n_early_parts + 1; k < n_parts; k++) /* ends where the next begins */
      if (part_value[k] >= 0)
        b->piece_b1[part_value[k]] =
            k + 1 < n_parts ? b->piece_b0[part_value[k + 1]] : b->n_buckets;
    for (int u = 0; b->zero == 3 && u < b->n_units; u++) /* a late parameter's buckets */
      for (int i = b->n_early_buckets; b->ulate_off[u] >= 0 && i < b->n_buckets; i++)
        if (b->begin[i] >= b->ulate_off[u] && b->begin[i] < b->ulate_off[u] + b->ulate_n[u]) {
          if (b->ulate_b1[u] == 0) b->ulate_b0[u] = i;
          b->ulate_b1[u] = i + 1;
        }
    for (int i = 0; i < b->n_buckets; i++) {
      int64_t off, len;
      tl__dp_chunk_of(b, i, &off, &len);
      b->at[i] = b->shard_n;
      b->shard_n += len;
    }
  }
  free(bounds);
  free(per);
  free(part_value);
  if (st == TL_OK && b->zero >= 2) {
    int n_values = c->layout->n_values;
    b->goff = malloc(sizeof(int64_t) * (size_t)tl__dp_at_least_one(n_values));
    if (!b->goff) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for gradient buckets");
    for (int v = 0; st == TL_OK && v < n_values; v++) b->goff[v] = -1;
    if (st == TL_OK) st = create_zero2(b);
  }
  if (st == TL_OK && b->zero == 3) st = tl__dp_create_zero3(b);
  if (st == TL_OK && b->pbf16 && b->zero < 3) st = create_master(b);
  if (st == TL_OK && b->bf16 && b->zero < 2)
    st = tl_buffer_create(b->be->device, sizeof(uint16_t) * (size_t)tl__dp_at_least_one(b->n),
                          &b->wbuf);
  if (st == TL_OK && c->wire != TL_F32 && c->wire != TL_BF16)
    st = TL_ERRF(TL_ERR_INVALID, "gradient buckets reduce in f32 or bf16, not %s",
                 tl_dtype_name(c->wire));
  if (st == TL_OK && c->params != TL_F32 && c->params != TL_BF16)
    st = TL_ERRF(TL_ERR_INVALID, "ZeRO gathers parameters in f32 or bf16, not %s",
                 tl_dtype_name(c->params));
  if (st != TL_OK) {
    tl_dp_buckets_destroy(b);
    return st;
  }
  *out = b;
  return TL_OK;
}

void tl_dp_buckets_destroy(tl_dp_buckets* b) {
  if (!b) return;
  free(b->begin);
  free(b->at);
  free(b->req);
  free(b->goff);
  tl_buffer_destroy(b->gbuf);
  for (int s = 0; s < 2; s++) {
    tl_buffer_destroy(b->slot[s]);
    tl_buffer_destroy(b->temp[s]);
    tl_buffer_destroy(b->wslot[s]);
    tl_buffer_destroy(b->wtemp[s]);
  }
  tl_buffer_destroy(b->wbuf);
  tl_buffer_destroy(b->shard);
  free(b->unit_node);
  free(b->unit_lb);
  free(b->unit_le);
  free(b->unit_b0);
  free(b->unit_b1);
  free(b->ulate_off);
  free(b->ulate_n);
  free(b->ulate_at);
  free(b->ulate_b0);
  free(b->ulate_b1);
  free(b->poff);
  free(b->piece_cols);
  free(b->piece_rows);
  free(b->piece_b0);
  free(b->piece_b1);
  tl_buffer_destroy(b->pbuf);
  tl_buffer_destroy(b->pshard);
  free(b);
}

/* ---- zero 0 and 1: in place in the caller's buffer ---------------------- */

static tl_status launch(tl_dp_buckets* b, int i) {
  if (!b->group) return TL_OK;
  /* the gradients' kernels may still be queued on the device: the
   * collective waits for them there (group.h) */
  size_t count = (size_t)(b->begin[i + 1] - b->begin[i]);
  float* p = b->grads + b->begin[i];
  int64_t off, len;
  tl__dp_chunk_of(b, i, &off, &len);
  if (b->bf16) { /* rounded into the image; widened back by finish */
    uint16_t* w = (uint16_t*)b->wbuf->data;
    TL_CHECK(b->be->ops->to_bf16(b->be->ctx, w + b->begin[i], p, (int64_t)count));
    if (b->zero == 0)
      return tl_group_all_reduce(b->group, w + b->begin[i], w + b->begin[i], count, TL_BF16,
                                 TL_REDUCE_SUM, &b->req[i]);
    return tl_group_reduce_scatter(b->group, w + b->begin[i], w + off, count, TL_BF16,
                                   TL_REDUCE_SUM, &b->req[i]);
  }
  if (b->zero == 0)
    return tl_group_all_reduce(b->group, p, p, count, TL_F32, TL_REDUCE_SUM, &b->req[i]);
  return tl_group_reduce_scatter(b->group, p, b->grads + off, count, TL_F32, TL_REDUCE_SUM,
                                 &b->req[i]);
}

/* bf16: every bucket's reduced chunk, widened into the gradients */
static tl_status widen(tl_dp_buckets* b) {
  const uint16_t* w = (const uint16_t*)b->wbuf->data;
  for (int i = 0; i < b->n_buckets; i++) {
    int64_t off, len;
    tl__dp_chunk_of(b, i, &off, &len);
    if (len) TL_CHECK(b->be->ops->from_bf16(b->be->ctx, b->grads + off, w + off, len));
  }
  return TL_OK;
}

/* ---- zero 2: the stream of staged gradients ------------------------------ */

/* Waits for slot s's bucket, adds its reduced chunk into the shard. */
tl_status tl__dp_retire(tl_dp_buckets* b, int s) {
  int i = b->slot_bucket[s];
  if (i < 0) return TL_OK;
  int64_t t0 = tl_time_ns();
  tl_status st = tl_group_wait(b->slot_req[s]);
  b->wait_s += (double)(tl_time_ns() - t0) * 1e-9;
  b->slot_req[s] = NULL;
  b->slot_bucket[s] = -1;
  TL_CHECK(st);
  int64_t off, len;
  tl__dp_chunk_of(b, i, &off, &len);
  float* dst = (float*)b->shard->data + b->at[i];
  if (b->bf16 && len)
    TL_CHECK(b->be->ops->from_bf16(b->be->ctx, b->temp[s]->data, b->wtemp[s]->data, len));
  return len ? b->be->ops->add_forward(b->be->ctx, dst, dst, b->slot_sum[s], len) : TL_OK;
}

/* Reduce-scatters bucket i from `src` (its elements, contiguous) through slot s. */
tl_status tl__dp_reduce_bucket(tl_dp_buckets* b, int i, int s, const float* src) {
  b->slot_bucket[s] = i;
  if (!b->group) {
    b->slot_sum[s] = src; /* a group of one: the chunk is the bucket */
    return TL_OK;
  }
  const size_t count = (size_t)(b->begin[i + 1] - b->begin[i]);
  b->slot_sum[s] = b->temp[s]->data;
  if (b->bf16) { /* rounded in; retire widens the chunk into temp */
    TL_CHECK(b->be->ops->to_bf16(b->be->ctx, b->wslot[s]->data, src, (int64_t)count));
    return tl_group_reduce_scatter(b->group, b->wslot[s]->data, b->wtemp[s]->data, count, TL_BF16,
                                   TL_REDUCE_SUM, &b->slot_req[s]);
  }
  /* the copies in are done before the group reads: it waits for them */
  return tl_group_reduce_scatter(b->group, src, b->temp[s]->data, count, TL_F32, TL_REDUCE_SUM,
                                 &b->slot_req[s]);
}

/* Elements [a, e) of the layout's front, staged from gbuf's start, into
 * their buckets; every bucket they complete is reduced. */
static tl_status stream(tl_dp_buckets* b, int64_t a, int64_t e) {
  tl_device dev = b->be->device;
  const float* staged = b->gbuf->data;
  if (a != b->filled)
    return TL_ERRF(TL_ERR_INTERNAL,
                   "ZeRO-2: gradients [%lld, %lld) of the stage arrived where the stream expected "
                   "element %lld (the backward finished them out of the layout's order)",
                   (long long)a, (long long)e, (long long)b->filled);
  for (int64_t p = a; p < e;) {
    int i = b->cur, s = i % 2;
    if (b->slot_fill[s] != i) { /* a bucket starts: the one this slot reduced last must land */
      TL_CHECK(tl__dp_retire(b, s));
      b->slot_fill[s] = i;
    }
    int64_t end = e < b->begin[i + 1] ? e : b->begin[i + 1];
    float* dst = (float*)b->slot[s]->data + (p - b->begin[i]);
    TL_CHECK(tl_memcpy(dev, dst, dev, staged + (p - a), sizeof(float) * (size_t)(end - p)));
    p = end;
    if (p == b->begin[i + 1]) { /* the bucket is whole */
      b->slot_fill[s] = -1;
      TL_CHECK(tl__dp_reduce_bucket(b, i, s, b->slot[s]->data));
      if (!b->group) TL_CHECK(tl__dp_retire(b, s)); /* added now: the slot is refilled next */
      b->early++;
      b->cur = i + 1 < b->n_early_buckets ? i + 1 : 0;
    }
  }
  b->filled = e < b->layout->n_early ? e : 0;
  /* the next node's gradients are written over them, or added to zeros */
  return b->staging_written ? TL_OK
                            : tl_memzero(dev, b->gbuf->data, sizeof(float) * (size_t)(e - a));
}

tl_status tl_dp_buckets_zero_grads(tl_dp_buckets* b) {
  if (b->zero < 2) return TL_OK;
  if (!b->staging_written) TL_CHECK(tl_memzero(b->be->device, b->gbuf->data, b->gbuf->bytes));
  return tl_memzero(b->be->device, b->shard->data, b->shard->bytes);
}

/* Pushes the collectives in flight along: MPICH advances a nonblocking
 * operation only inside MPI calls, so without this a bucket started during
 * the backward would wait for tl_dp_buckets_finish to move at all. */
tl_status tl__dp_progress(tl_dp_buckets* b) {
  if (!b->group) return TL_OK;
  bool done;
  for (int i = 0; i < b->n_buckets; i++)
    if (b->req[i]) TL_CHECK(tl_group_test(b->req[i], &done));
  for (int s = 0; s < 2; s++)
    if (b->slot_req[s]) TL_CHECK(tl_group_test(b->slot_req[s], &done));
  return TL_OK;
}

tl_status tl_dp_buckets_node_done(tl_dp_buckets* b, int forward_node) {
  TL_CHECK(tl__dp_progress(b));
  if (b->zero >= 2) {
    /* the early segments node `forward_node` finished: contiguous */
    const tl_dp_layout* l = b->layout;
    int64_t a = -1, e = -1;
    for (int i = 0; i < l->n_segments && l->segments[i].offset < l->n_early; i++) {
      const tl_dp_segment* s = &l->segments[i];
      if (s->first_use != forward_node) continue;
      if (a < 0) a = s->offset;
      e = s->offset + s->n;
    }
    return a < 0 ? TL_OK : stream(b, a, e);
  }
  if (!b->group) return TL_OK;
  const int64_t upto = tl_dp_layout_final_upto(b->layout, forward_node);
  while (b->launched < b->n_early_buckets && b->begin[b->launched + 1] <= upto) {
    TL_CHECK(launch(b, b->launched));
    b->launched++;
    b->early++;
  }
  return TL_OK;
}

tl_status tl_dp_buckets_finish(tl_dp_buckets* b) {
  tl_status st = TL_OK;
  int64_t t0 = tl_time_ns();
  if (b->zero >= 2) {
    if (b->filled != 0 || b->cur != 0)
      st = TL_ERRF(TL_ERR_INTERNAL,
                   "ZeRO-2: a backward pass streamed %lld of the stage's %lld early gradient "
                   "elements",
                   (long long)b->filled, (long long)b->layout->n_early);
    /* the late buckets, from their whole gradients behind the staging */
    const float* late = (const float*)b->gbuf->data + b->staging;
    for (int i = b->n_early_buckets; i < b->n_whole_buckets && st == TL_OK; i++) {
      int s = i % 2;
      st = tl__dp_retire(b, s);
      if (st == TL_OK)
        st = tl__dp_reduce_bucket(b, i, s, late + (b->begin[i] - b->layout->n_early));
    }
    for (int s = 0; s < 2; s++) {
      tl_status w = tl__dp_retire(b, s);
      if (st == TL_OK) st = w;
    }
  } else if (b->group) {
    while (b->launched < b->n_buckets && st == TL_OK) st = launch(b, b->launched++);
    tl_status w = tl_group_wait_all(b->launched, b->req);
    if (st == TL_OK) st = w;
    if (st == TL_OK && b->bf16) st = widen(b);
  }
  if (b->zero < 2) b->wait_s += (double)(tl_time_ns() - t0) * 1e-9;
  b->launched = 0;
  b->early_last = b->early;
  b->early = 0;
  b->wait_last = b->wait_s;
  b->wait_s = 0;
  return st;
}

int tl_dp_buckets_count(const tl_dp_buckets* b) {
  return b->n_buckets;
}

int tl_dp_buckets_early(const tl_dp_buckets* b) {
  return b->early_last;
}

double tl_dp_buckets_wait_seconds(const tl_dp_buckets* b) {
  return b->wait_last;
}

/* ---- the shard ---------------------------------------------------------- */

int64_t tl_dp_buckets_shard_n(const tl_dp_buckets* b) {
  return b->shard_n;
}

int tl_dp_buckets_pieces(const tl_dp_buckets* b, struct tl_dp_piece* out) {
  const tl_dp_layout* l = b->layout;
  int k = 0, seg = 0;
  for (int i = 0; i < b->n_buckets; i++) {
    int64_t c0, len;
    tl__dp_chunk_of(b, i, &c0, &len);
    int64_t c1 = c0 + len;
    while (seg < l->n_segments && l->segments[seg].offset + l->segments[seg].n <= c0) seg++;
    for (int j = seg; j < l->n_segments && l->segments[j].offset < c1; j++) {
      const tl_dp_segment* s = &l->segments[j];
      int64_t p0 = s->offset > c0 ? s->offset : c0;
      int64_t p1 = s->offset + s->n < c1 ? s->offset + s->n : c1;
      if (p1 <= p0) continue;
      if (out) out[k] = (struct tl_dp_piece){j, p0, p1 - p0, b->at[i] + (p0 - c0)};
      /* a deliberate bug (core/env.h): the shard read one element on */
      if (out && k == 0 && b->group && b->size > 1 && b->rank == b->size - 1 && p1 - p0 > 1 &&
          tl_fault_on(TL_FAULT_ZERO_SHARD_OFFSET))
        out[k].at++, out[k].n--;
      k++;
    }
  }
  return k;
}

tl_status tl_dp_buckets_gather_params(tl_dp_buckets* b, float* params) {
  if (b->zero == 0 || b->zero == 3) return TL_OK;
  tl_status st = TL_OK;
  if (b->pbf16) { /* the updated master chunks, rounded into their place */
    uint16_t* img = (uint16_t*)b->pbuf->data;
    const float* master = (const float*)b->pshard->data;
    for (int i = 0; i < b->n_buckets && st == TL_OK; i++) {
      int64_t off, len;
      tl__dp_chunk_of(b, i, &off, &len);
      if (len) st = b->be->ops->to_bf16(b->be->ctx, img + off, master + b->at[i], len);
    }
  }
  if (!b->group) return st;
  for (int i = 0; i < b->n_buckets && st == TL_OK; i++) {
    int64_t off, len;
    tl__dp_chunk_of(b, i, &off, &len);
    const size_t count = (size_t)(b->begin[i + 1] - b->begin[i]);
    st = b->pbf16 ? tl_group_all_gather(b->group, (uint16_t*)b->pbuf->data + off,
                                        (uint16_t*)b->pbuf->data + b->begin[i], count, TL_BF16,
                                        &b->req[i])
                  : tl_group_all_gather(b->group, params + off, params + b->begin[i], count, TL_F32,
                                        &b->req[i]);
  }
  tl_status w = tl_group_wait_all(b->n_buckets, b->req);
  return st == TL_OK ? w : st;
}

tl_status tl_dp_buckets_unshard(tl_dp_buckets* b, const float* src, bool src_is_shard,
                                float* full) {
  tl_device dev = b->be->device;
  tl_status st = TL_OK;
  for (int i = 0; i < b->n_buckets && st == TL_OK; i++) {
    int64_t off, len;
    tl__dp_chunk_of(b, i, &off, &len);
    const float* mine = src_is_shard ? src + b->at[i] : src + off;
    if (mine != full + off && len)
      st = tl_memcpy(dev, full + off, dev, mine, sizeof(float) * (size_t)len);
    if (st == TL_OK && b->group)
      st = tl_group_all_gather(b->group, full + off, full + b->begin[i],
                               (size_t)(b->begin[i + 1] - b->begin[i]), TL_F32, NULL);
  }
  return st;
}

tl_status tl_dp_buckets_to_shard(const tl_dp_buckets* b, const float* full, float* shard) {
  tl_status st = TL_OK;
  for (int i = 0; i < b->n_buckets && st == TL_OK; i++) {
    int64_t off, len;
    tl__dp_chunk_of(b, i, &off, &len);
    if (len)
      st = tl_memcpy(b->be->device, shard + b->at[i], tl_cpu(), full + off,
                     sizeof(float) * (size_t)len);
  }
  return st;
}

tl_buffer* tl_dp_buckets_grad_buffer(const tl_dp_buckets* b) {
  return b->gbuf;
}

const int64_t* tl_dp_buckets_grad_offset(const tl_dp_buckets* b) {
  return b->goff;
}

float* tl_dp_buckets_shard_grads(const tl_dp_buckets* b) {
  return b->shard ? b->shard->data : NULL;
}
