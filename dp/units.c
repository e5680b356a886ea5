/* units.c — ZeRO-3's parameters: the units (the embedding, a block, the
 * head) gathered from every rank's shard into two slots, one ahead of the
 * pass (one slot where two would cost what sharding saves:
 * tl_dp_zero3_slots), a late parameter gathered with the units that read
 * it into their slots' tails where it fits, and the other late parameters
 * whole for a step (see buckets.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/timer.h"
#include "dp/buckets.h"
#include "dp/buckets_impl.h"

/* The unit of forward node f, or -1 outside the stage's units. */
static int unit_of(const tl_dp_buckets* b, int f) {
  for (int u = 0; u < b->n_units; u++)
    if (f >= b->unit_node[u] && f < b->unit_node[u + 1]) return u;
  return -1;
}

/* Each unit's range of the layout's front: its early parameters, whose
 * first use lies in the unit, are consecutive there (the layout orders by
 * first use). */
tl_status tl__dp_units_build(tl_dp_buckets* b, const struct tl_dp_buckets_config* c) {
  const tl_dp_layout* l = c->layout;
  int n = c->n_units;
  b->n_units = n;
  b->unit_node = malloc(sizeof(int) * (size_t)(n + 1));
  b->unit_lb = malloc(sizeof(int64_t) * (size_t)n);
  b->unit_le = malloc(sizeof(int64_t) * (size_t)n);
  b->unit_b0 = calloc((size_t)n, sizeof(int));
  b->unit_b1 = calloc((size_t)n, sizeof(int));
  b->ulate_off = malloc(sizeof(int64_t) * (size_t)n);
  b->ulate_n = calloc((size_t)n, sizeof(int64_t));
  b->ulate_at = calloc((size_t)n, sizeof(int64_t));
  b->ulate_b0 = calloc((size_t)n, sizeof(int));
  b->ulate_b1 = calloc((size_t)n, sizeof(int));
  if (!b->unit_node || !b->unit_lb || !b->unit_le || !b->unit_b0 || !b->unit_b1 || !b->ulate_off ||
      !b->ulate_n || !b->ulate_at || !b->ulate_b0 || !b->ulate_b1)
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for ZeRO-3's units");
  for (int u = 0; u < n; u++) b->ulate_off[u] = -1;
  memcpy(b->unit_node, c->unit_begin, sizeof(int) * (size_t)(n + 1));
  int64_t* held = calloc((size_t)n, sizeof(int64_t));
  if (!held) return TL_ERRF(TL_ERR_NOMEM, "out of memory for ZeRO-3's units");
  for (int u = 0; u < n; u++) b->unit_lb[u] = INT64_MAX, b->unit_le[u] = -1;
  tl_status st = TL_OK;
  for (int i = 0; i < l->n_segments && st == TL_OK; i++) {
    const tl_dp_segment* s = &l->segments[i];
    if (s->offset >= l->n_early) continue;
    int u = unit_of(b, s->first_use);
    if (u < 0) {
      st = TL_ERRF(TL_ERR_INVALID, "ZeRO-3: a parameter first read by node %d lies in no unit",
                   s->first_use);
      break;
    }
    if (s->offset < b->unit_lb[u]) b->unit_lb[u] = s->offset;
    if (s->offset + s->n > b->unit_le[u]) b->unit_le[u] = s->offset + s->n;
    held[u] += s->n;
  }
  /* an empty unit sits, empty, where the units after it in node order end */
  int64_t next = 0;
  for (int u = n - 1; u >= 0 && st == TL_OK; u--) {
    if (b->unit_le[u] < 0) b->unit_lb[u] = b->unit_le[u] = next;
    if (b->unit_lb[u] != next || b->unit_le[u] - b->unit_lb[u] != held[u])
      st = TL_ERRF(TL_ERR_INTERNAL, "ZeRO-3: unit %d's parameters are not one range of the layout",
                   u);
    next = b->unit_le[u];
    if (b->unit_le[u] - b->unit_lb[u] > b->unit_max) b->unit_max = b->unit_le[u] - b->unit_lb[u];
  }
  if (st == TL_OK && next != l->n_early)
    st = TL_ERRF(TL_ERR_INTERNAL, "ZeRO-3: the units hold %lld of the stage's %lld early elements",
                 (long long)next, (long long)l->n_early);
  free(held);
  return st;
}

int64_t tl_dp_piece_room(const tl_dp_layout* l, int n_units, const int* unit_begin,
                         const bool* unit_pieces) {
  if (n_units < 1 || !unit_pieces) return 0;
  int64_t most = 0, reader = -1;
  for (int u = 0; u < n_units; u++) {
    int64_t held = 0; /* the unit's early parameters: those first read by its nodes */
    for (int i = 0; i < l->n_segments && l->segments[i].offset < l->n_early; i++)
      if (l->segments[i].first_use >= unit_begin[u] && l->segments[i].first_use < unit_begin[u + 1])
        held += l->segments[i].n;
    if (held > most) most = held;
    if (unit_pieces[u] && held > reader) reader = held;
  }
  return reader < 0 ? 0 : most - reader;
}

/* What the unit slots' tails hold beside their units: the room for the
 * piece slots (beside the largest unit that reads a parameter in pieces),
 * and the late parameters gathered with their unit. */
void tl__dp_units_tails(tl_dp_buckets* b, const struct tl_dp_buckets_config* c) {
  const tl_dp_layout* l = c->layout;
  /* the room for the piece slots: a unit slot's tail beside the largest
   * unit that reads a parameter in pieces */
  if (b->group && b->piece_from < l->n && c->unit_pieces)
    b->piece_room = tl_dp_piece_room(l, c->n_units, c->unit_begin, c->unit_pieces);
  /* the late parameters gathered with their units, into their slots'
   * tails: each unit's where it fits behind its parameters (not a unit
   * that reads a parameter in pieces); one several units read only with
   * one slot, behind the largest of them (so at one place for all) */
  if (!b->group || !c->unit_late) return;
  const int slots = tl_dp_zero3_slots(l->n, l->n - l->n_early, b->unit_max, b->size);
  for (int i = 0; i < l->n_segments; i++) {
    const tl_dp_segment* s = &l->segments[i];
    if (s->offset < l->n_early || s->offset >= b->piece_from) continue;
    int readers = 0;
    int64_t at = 0;
    bool free_units = true;
    for (int u = 0; u < b->n_units; u++) {
      if (c->unit_late[u] != s->value) continue;
      readers++;
      if (b->unit_le[u] - b->unit_lb[u] > at) at = b->unit_le[u] - b->unit_lb[u];
      if (b->ulate_off[u] >= 0 || (c->unit_pieces && c->unit_pieces[u])) free_units = false;
    }
    if (readers == 0 || !free_units || (readers > 1 && slots > 1) || s->n > b->unit_max - at)
      continue;
    for (int u = 0; u < b->n_units; u++)
      if (c->unit_late[u] == s->value)
        b->ulate_off[u] = s->offset, b->ulate_n[u] = s->n, b->ulate_at[u] = at;
    b->late_in_units += s->n;
  }
}

tl_status tl__dp_create_zero3(tl_dp_buckets* b) {
  const tl_dp_layout* l = b->layout;
  tl_device dev = b->be->device;
  int64_t n_late = l->n - l->n_early;
  for (int u = 0; u < b->n_units; u++) {
    b->unit_b0[u] = b->unit_b1[u] = 0;
    for (int i = 0; i < b->n_early_buckets; i++)
      if (b->begin[i] >= b->unit_lb[u] && b->begin[i] < b->unit_le[u]) {
        if (b->unit_b1[u] == 0) b->unit_b0[u] = i;
        b->unit_b1[u] = i + 1;
      }
  }
  /* the slots and the late parameters in bf16 under bf16 training */
  const size_t es = b->pbf16 ? sizeof(uint16_t) : sizeof(float);
  b->n_slots = tl_dp_zero3_slots(l->n, n_late, b->unit_max, b->size);
  const int64_t slots = b->n_slots * b->unit_max;
  TL_CHECK(tl__dp_piece_slots(b, slots, es));
  TL_CHECK(
      tl_buffer_create(dev, sizeof(float) * (size_t)tl__dp_at_least_one(b->shard_n), &b->pshard));
  b->poff = malloc(sizeof(int64_t) * (size_t)tl__dp_at_least_one(l->n_values));
  if (!b->poff) return TL_ERRF(TL_ERR_NOMEM, "out of memory for ZeRO-3's parameters");
  for (int v = 0; v < l->n_values; v++) b->poff[v] = -1;
  for (int i = 0; i < l->n_segments; i++) {
    const tl_dp_segment* s = &l->segments[i];
    if (b->piece_params && s->offset >= b->piece_from) {
      b->poff[s->value] = -1; /* read a piece at a time (tl_dp_buckets_piece_param) */
    } else if (s->offset >= l->n_early && tl__dp_late_in_unit(b, s->offset)) {
      int u = 0;
      while (b->ulate_off[u] != s->offset) u++;
      b->poff[s->value] = (u % b->n_slots) * b->unit_max + b->ulate_at[u];
    } else if (s->offset >= l->n_early) {
      b->poff[s->value] = slots + tl__dp_late_at(b, s->offset);
    } else {
      int u = unit_of(b, s->first_use);
      b->poff[s->value] = (u % b->n_slots) * b->unit_max + (s->offset - b->unit_lb[u]);
    }
  }
  b->punit[0] = b->punit[1] = -1;
  b->ucur = -1;
  return TL_OK;
}

/* bf16 gathers over a group: this rank's chunks of buckets [i0, i1)
 * rounded from the fp32 shard straight into their places in the slots'
 * buffer — bucket i lands at element base + (begin[i] - from) — finished
 * before the group reads them; each gather is then in place (the shard
 * changes with every update, so each gather rounds afresh). */
tl_status tl__dp_round_chunks(tl_dp_buckets* b, int i0, int i1, int64_t base, int64_t from) {
  uint16_t* to = (uint16_t*)b->pbuf->data;
  const float* shard = b->pshard->data;
  for (int i = i0; i < i1; i++) {
    int64_t off, len;
    tl__dp_chunk_of(b, i, &off, &len);
    if (len)
      TL_CHECK(b->be->ops->to_bf16(b->be->ctx, to + base + (off - from), shard + b->at[i], len));
  }
  return TL_OK; /* the gathers wait for the rounding on the device (group.h) */
}

/* Gathers bucket i (this rank's chunk at shard offset at[i]) to `dst`, an
 * element offset in the slots' buffer (bf16 or f32, as b->pbf16): blocking
 * when req is NULL. bf16 over a group: from the chunk round_chunks put in
 * its place, in place. Without a group, the rank's own chunk (the whole
 * bucket), rounded to bf16 or copied. */
tl_status tl__dp_gather_bucket(tl_dp_buckets* b, int i, int64_t dst, tl_group_request** req) {
  const size_t count = (size_t)(b->begin[i + 1] - b->begin[i]);
  const float* shard = (const float*)b->pshard->data + b->at[i];
  if (b->pbf16) {
    uint16_t* to = (uint16_t*)b->pbuf->data + dst;
    if (!b->group) return b->be->ops->to_bf16(b->be->ctx, to, shard, (int64_t)count);
    int64_t off, len;
    tl__dp_chunk_of(b, i, &off, &len);
    return tl_group_all_gather(b->group, to + (off - b->begin[i]), to, count, TL_BF16, req);
  }
  float* to = (float*)b->pbuf->data + dst;
  if (!b->group) return tl_memcpy(b->be->device, to, b->be->device, shard, sizeof(float) * count);
  return tl_group_all_gather(b->group, shard, to, count, TL_F32, req);
}

/* Starts gathering unit u's parameters from every rank's shard into its slot. */
static tl_status gather_unit(tl_dp_buckets* b, int u) {
  int s = u % b->n_slots;
  /* kernels queued on the device may still read the unit the slot held:
   * the gather waits for them on the device (group.h) */
  b->punit[s] = u;
  /* the piece slots in the slot's tail hold nothing past this */
  if (b->piece_tail && b->pat >= s * b->unit_max && b->pat < (s + 1) * b->unit_max)
    TL_CHECK(tl__dp_pieces_drop(b));
  /* a deliberate bug (core/env.h): every rank skips the gather alike */
  if (u == 1 && b->group && tl_fault_on(TL_FAULT_ZERO_GATHER_SKIPPED)) return TL_OK;
  b->pending[s] = true;
  if (b->pbf16 && b->group)
    TL_CHECK(tl__dp_round_chunks(b, b->unit_b0[u], b->unit_b1[u], s * b->unit_max, b->unit_lb[u]));
  for (int i = b->unit_b0[u]; i < b->unit_b1[u]; i++)
    TL_CHECK(tl__dp_gather_bucket(b, i, s * b->unit_max + (b->begin[i] - b->unit_lb[u]),
                                  b->group ? &b->req[i] : NULL));
  /* and the late parameter gathered with it, behind its parameters */
  const int64_t tail = s * b->unit_max + b->ulate_at[u];
  for (int i = b->ulate_b0[u]; i < b->ulate_b1[u]; i++) {
    const int64_t dst = tail + (b->begin[i] - b->ulate_off[u]);
    if (b->pbf16 && b->group) TL_CHECK(tl__dp_round_chunks(b, i, i + 1, dst, b->begin[i]));
    TL_CHECK(tl__dp_gather_bucket(b, i, dst, b->group ? &b->req[i] : NULL));
  }
  return TL_OK;
}

bool tl__dp_late_in_unit(const tl_dp_buckets* b, int64_t off) {
  for (int u = 0; b->ulate_off && u < b->n_units; u++)
    if (b->ulate_off[u] >= 0 && off >= b->ulate_off[u] && off < b->ulate_off[u] + b->ulate_n[u])
      return true;
  return false;
}

int64_t tl__dp_late_at(const tl_dp_buckets* b, int64_t off) {
  int64_t at = off - b->layout->n_early;
  for (int u = 0; b->ulate_off && u < b->n_units; u++) {
    bool first = true; /* each parameter once, however many units read it */
    for (int w = 0; w < u && first; w++) first = b->ulate_off[w] != b->ulate_off[u];
    if (first && b->ulate_off[u] >= 0 && b->ulate_off[u] < off) at -= b->ulate_n[u];
  }
  return at;
}

/* Waits for slot s's gather. */
static tl_status land_unit(tl_dp_buckets* b, int s) {
  if (!b->pending[s]) return TL_OK;
  int u = b->punit[s];
  int64_t t0 = tl_time_ns();
  tl_status st = tl_group_wait_all(b->unit_b1[u] - b->unit_b0[u], b->req + b->unit_b0[u]);
  tl_status w = tl_group_wait_all(b->ulate_b1[u] - b->ulate_b0[u], b->req + b->ulate_b0[u]);
  if (st == TL_OK) st = w;
  b->wait_s += (double)(tl_time_ns() - t0) * 1e-9;
  b->pending[s] = false;
  if (st != TL_OK) b->punit[s] = -1;
  return st;
}

tl_status tl_dp_buckets_begin_step(tl_dp_buckets* b) {
  b->wait_s = 0; /* this step's waits only (not an evaluation's before it) */
  if (b->zero != 3) return TL_OK;
  tl_status st = TL_OK;
  for (int s = 0; s < b->n_slots; s++) {
    tl_status w = land_unit(b, s);
    if (st == TL_OK) st = w;
    b->punit[s] = -1; /* gathered before the update: stale */
  }
  tl_status w = tl__dp_pieces_drop(b);
  if (st == TL_OK) st = w;
  /* the late parameters, whole on every rank for the step (not those read
   * in pieces or gathered with their unit) */
  const int late_end = b->piece_params ? b->n_whole_buckets : b->n_buckets;
  for (int i = b->n_early_buckets; i < late_end && st == TL_OK; i++) {
    if (tl__dp_late_in_unit(b, b->begin[i])) continue;
    const int64_t dst = b->n_slots * b->unit_max + tl__dp_late_at(b, b->begin[i]);
    if (b->pbf16 && b->group) st = tl__dp_round_chunks(b, i, i + 1, dst, b->begin[i]);
    if (st == TL_OK) st = tl__dp_gather_bucket(b, i, dst, NULL);
  }
  return st;
}

tl_status tl_dp_buckets_before_node(tl_dp_buckets* b, int forward_node, bool backward) {
  if (b->zero != 3) return TL_OK;
  TL_CHECK(tl__dp_progress(b));
  int u = unit_of(b, forward_node);
  if (u < 0) return TL_OK;
  int s = u % b->n_slots;
  b->ucur = u;
  if (b->punit[s] != u) {
    TL_CHECK(land_unit(b, s)); /* the unit two away, prefetched and never read */
    TL_CHECK(gather_unit(b, u));
  }
  TL_CHECK(land_unit(b, s));
  if (b->n_slots < 2) return TL_OK;
  /* the next unit this pass reads, into the other slot (its unit is done) */
  int next = backward ? u - 1 : u + 1;
  if (next >= 0 && next < b->n_units && b->punit[next % 2] != next) {
    TL_CHECK(land_unit(b, next % 2));
    TL_CHECK(gather_unit(b, next));
  }
  return TL_OK;
}

tl_buffer* tl_dp_buckets_param_buffer(const tl_dp_buckets* b) {
  return b->pbuf;
}

const int64_t* tl_dp_buckets_param_offset(const tl_dp_buckets* b) {
  return b->pbuf && b->zero < 3 ? b->layout->offset : b->poff;
}

tl_dtype tl_dp_buckets_param_dtype(const tl_dp_buckets* b) {
  return b->pbf16 ? TL_BF16 : TL_F32;
}

tl_buffer* tl_dp_buckets_shard_params(const tl_dp_buckets* b) {
  return b->pshard;
}

int tl_dp_zero3_slots(int64_t n, int64_t n_late, int64_t unit_max, int size) {
  const int64_t early = n - n_late, d = size < 1 ? 1 : size;
  /* 2 * unit_max <= (early - early / d) / 2, in integers */
  return 4 * unit_max * d <= early * (d - 1) ? 2 : 1;
}

int tl_dp_buckets_slots(const tl_dp_buckets* b) {
  return b->zero == 3 ? b->n_slots : 0;
}

int64_t tl_dp_buckets_unit_max(const tl_dp_buckets* b) {
  return b->unit_max;
}
