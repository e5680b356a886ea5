/* schedule.c — GPipe, 1F1B, interleaved 1F1B and zero-bubble instruction
 * lists, and their simulation. */
#include "pp/schedule.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void emit_chunk(tl_pp_schedule* s, tl_pp_op op, int micro, int chunk) {
  s->instr[s->n++] = (tl_pp_instr){op, micro, chunk};
}

static void emit(tl_pp_schedule* s, tl_pp_op op, int micro) {
  emit_chunk(s, op, micro, 0);
}

/* Virtual stage q = c * p + s: the first receives nothing, the last sends
 * nothing on. */
static int first_virtual(const tl_pp_schedule* s, int c) {
  return c == 0 && s->stage == 0;
}
static int last_virtual(const tl_pp_schedule* s, int c) {
  return c == s->n_chunks - 1 && s->stage == s->n_stages - 1;
}

static void forward_chunk(tl_pp_schedule* s, int i, int c) {
  if (!first_virtual(s, c)) emit_chunk(s, TL_PP_RECV_ACT, i, c);
  emit_chunk(s, TL_PP_FORWARD, i, c);
  if (!last_virtual(s, c)) emit_chunk(s, TL_PP_SEND_ACT, i, c);
}

static void backward_chunk(tl_pp_schedule* s, int i, int c) {
  if (!last_virtual(s, c)) emit_chunk(s, TL_PP_RECV_GRAD, i, c);
  emit_chunk(s, TL_PP_BACKWARD, i, c);
  if (!first_virtual(s, c)) emit_chunk(s, TL_PP_SEND_GRAD, i, c);
}

static void forward(tl_pp_schedule* s, int i) {
  forward_chunk(s, i, 0);
}

static void backward(tl_pp_schedule* s, int i) {
  backward_chunk(s, i, 0);
}

/* Each chunk's most micro-batches held (from its F to its B, or its W
 * under zero-bubble), and the largest of them. */
static void count_in_flight(tl_pp_schedule* s) {
  int h[TL_PP_MAX_CHUNKS] = {0};
  s->max_in_flight = 0;
  memset(s->chunk_in_flight, 0, sizeof s->chunk_in_flight);
  const tl_pp_op release = s->kind == TL_SCHEDULE_ZERO_BUBBLE ? TL_PP_WEIGHT : TL_PP_BACKWARD;
  for (int k = 0; k < s->n; k++) {
    int c = s->instr[k].chunk;
    h[c] += s->instr[k].op == TL_PP_FORWARD;
    h[c] -= s->instr[k].op == release;
    if (h[c] > s->chunk_in_flight[c]) s->chunk_in_flight[c] = h[c];
    if (h[c] > s->max_in_flight) s->max_in_flight = h[c];
  }
}

/* Megatron-LM's interleaved order (schedule.h). */
static void interleaved(tl_pp_schedule* s) {
  const int p = s->n_stages, v = s->n_chunks, total = s->n_micro * v;
  int warmup = 2 * (p - s->stage - 1) + (v - 1) * p;
  if (warmup > total) warmup = total;
#define MICRO(k) ((k) / (p * v) * p + (k) % p)
#define CHUNK(k) ((k) / p % v)
  int f = 0, b = 0;
  for (; f < warmup; f++) forward_chunk(s, MICRO(f), CHUNK(f));
  for (; f < total; f++, b++) { /* steady state: one forward, one backward */
    forward_chunk(s, MICRO(f), CHUNK(f));
    backward_chunk(s, MICRO(b), v - 1 - CHUNK(b));
  }
  for (; b < total; b++) backward_chunk(s, MICRO(b), v - 1 - CHUNK(b));
#undef MICRO
#undef CHUNK
}

static tl_status interleaved_ok(int n_stages, int n_micro, int n_chunks);

static int chunk_in_flight(int p, int stage, int m, int v, int* held);

int tl_pp_schedule_chunk_in_flight(int p, int stage, int m, int v, int* held) {
  if (stage < 0 || stage >= p || interleaved_ok(p, m, v) != TL_OK) {
    tl_clear_error();
    return -1;
  }
  /* the planner asks stage after stage of one (p, m, v): every stage's
   * counts of the last one are kept */
  static int cache_p, cache_m, cache_v, cache_sum[TL_MAX_STAGES];
  static int cache_held[TL_MAX_STAGES][TL_PP_MAX_CHUNKS];
  if (p > TL_MAX_STAGES) return chunk_in_flight(p, stage, m, v, held);
  if (cache_p != p || cache_m != m || cache_v != v) {
    for (int s = 0; s < p; s++) cache_sum[s] = chunk_in_flight(p, s, m, v, cache_held[s]);
    cache_p = p, cache_m = m, cache_v = v;
  }
  memcpy(held, cache_held[stage], sizeof(int) * (size_t)v);
  return cache_sum[stage];
}

static int chunk_in_flight(int p, int stage, int m, int v, int* held) {
  const int total = m * v;
  int warmup = 2 * (p - stage - 1) + (v - 1) * p;
  if (warmup > total) warmup = total;
  int now[TL_PP_MAX_CHUNKS] = {0};
  for (int c = 0; c < v; c++) held[c] = 0;
  /* the warm-up, then steady steps (F then B) for one period of the
   * chunks' pattern, p v, and one more */
  const int steady = total - warmup < p * v + 1 ? total - warmup : p * v + 1;
  for (int f = 0; f < warmup + steady; f++) {
    int c = f / p % v;
    if (++now[c] > held[c]) held[c] = now[c];
    if (f >= warmup) now[v - 1 - (f - warmup) / p % v]--;
  }
  int sum = 0;
  for (int c = 0; c < v; c++) sum += held[c];
  return sum;
}

/* Why (p, m, v) cannot make an interleaved schedule, or TL_OK. */
static tl_status interleaved_ok(int n_stages, int n_micro, int n_chunks) {
  if (n_chunks < 2 || n_chunks > TL_PP_MAX_CHUNKS)
    return TL_ERRF(TL_ERR_INVALID,
                   "an interleaved schedule of %d chunks per stage: expected 2 to %d", n_chunks,
                   TL_PP_MAX_CHUNKS);
  if (n_stages < 2)
    return TL_ERRF(TL_ERR_INVALID, "an interleaved schedule needs at least 2 stages, not %d",
                   n_stages);
  if (n_micro % n_stages != 0)
    return TL_ERRF(TL_ERR_INVALID,
                   "an interleaved schedule of %d stages for %d micro-batches: the micro-batches "
                   "must be a multiple of the stages",
                   n_stages, n_micro);
  return TL_OK;
}

static const struct tl_pp_costs k_unit = {1, 1, 1};

/* Zero-bubble: every stage's list at once, from the greedy simulation
 * schedule.h describes (F, B, W taking c's ticks). all[0 .. n_stages) are
 * filled (instr allocated by the caller, room for 7 * n_micro each). */
static int zero_bubble_lists(int p, int m, struct tl_pp_costs c, tl_pp_schedule* all, int* fdone,
                             int* bdone, int* held) {
  /* fdone/bdone[s * m + i]: when F / B of micro-batch i ends on stage s (-1: not yet) */
  for (int i = 0; i < p * m; i++) fdone[i] = bdone[i] = -1;
  int nf[TL_MAX_STAGES] = {0}, nb[TL_MAX_STAGES] = {0}, nw[TL_MAX_STAGES] = {0};
  int busy[TL_MAX_STAGES] = {0}, h[TL_MAX_STAGES] = {0};
  for (int s = 0; s < p; s++) held[s] = 0;
  const int bound = p < m ? p : m;
  /* Each stage, when free, starts the first of: the backward whose
   * gradient has arrived, a forward whose input has (at most `bound` held
   * before their weight passes), a weight pass owed; else it waits. A pass
   * ends at least a tick after it starts, so what stages start at one time
   * depends only on passes ended by then: the simulation goes from one end
   * to the next, looking only at the stages an end can have changed (the
   * stage itself, and the neighbour a forward's output or a backward's
   * gradient reaches). At most one pass runs per stage. */
  /* The passes running end within the longest pass's ticks: a wheel of
   * that many slots (a power of two) holds, per slot, the stages whose pass
   * ends then and which of those were forwards and backwards. */
  const int longest = c.forward > c.backward ? (c.forward > c.weight ? c.forward : c.weight)
                                             : (c.backward > c.weight ? c.backward : c.weight);
  int slots = 1;
  while (slots <= longest) slots *= 2;
  uint64_t* wheel = calloc((size_t)slots * 3, sizeof(uint64_t)); /* ends, forwards, backwards */
  if (!wheel) return -1;
  int end = 0, running = 0;
  uint64_t wake = p >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << p) - 1); /* time 0: all */
  for (int now = 0;;) {
    for (uint64_t w = wake; w; w &= w - 1) {
      const int s = __builtin_ctzll(w);
      if (busy[s] > now) continue;
      tl_pp_schedule* x = all ? &all[s] : NULL;
      int b = nb[s], f = nf[s];
      int grad_at = b < nf[s] ? (s == p - 1 ? fdone[s * m + b] : bdone[(s + 1) * m + b]) : -1;
      int took, kind;
      if (grad_at >= 0 && grad_at <= now) {
        if (x) backward(x, b);
        took = c.backward, kind = 2;
        bdone[s * m + b] = now + took, nb[s]++;
      } else if (f < m && f - nw[s] < bound &&
                 (s == 0 || (fdone[(s - 1) * m + f] >= 0 && fdone[(s - 1) * m + f] <= now))) {
        if (x) forward(x, f);
        took = c.forward, kind = 1;
        fdone[s * m + f] = now + took, nf[s]++;
        if (++h[s] > held[s]) held[s] = h[s];
      } else if (nw[s] < nb[s]) {
        if (x) emit(x, TL_PP_WEIGHT, nw[s]);
        nw[s]++, h[s]--;
        took = c.weight, kind = 0;
      } else {
        continue;
      }
      busy[s] = now + took;
      if (busy[s] > end) end = busy[s];
      uint64_t* slot = &wheel[3 * ((now + took) & (slots - 1))];
      slot[0] |= (uint64_t)1 << s;
      if (kind) slot[kind] |= (uint64_t)1 << s;
      running++;
    }
    if (running == 0) break;
    /* the next time a pass ends: each pass ending then wakes its stage and
     * the neighbour it feeds (a forward the next stage, a backward the one
     * before) */
    do now++;
    while (wheel[3 * (now & (slots - 1))] == 0);
    uint64_t* slot = &wheel[3 * (now & (slots - 1))];
    wake = slot[0] | (slot[1] << 1) | (slot[2] >> 1);
    if (p < 64) wake &= ((uint64_t)1 << p) - 1;
    running -= __builtin_popcountll(slot[0]);
    slot[0] = slot[1] = slot[2] = 0;
  }
  free(wheel);
  return end; /* the simulation's length: the last pass's end */
}

/* Every stage's zero-bubble list into all[0 .. p) (zeroed by the caller;
 * NULL: none, the counts only), each stage's most micro-batches held into
 * held[0 .. p) and the simulation's length into *ticks. */
static tl_status zero_bubble_all(int p, int m, struct tl_pp_costs c, tl_pp_schedule* all,
                                 int* held, int* ticks) {
  if (p > TL_MAX_STAGES)
    return TL_ERRF(TL_ERR_UNSUPPORTED, "a zero-bubble schedule of %d stages; at most %d", p,
                   TL_MAX_STAGES);
  if (c.forward < 1 || c.backward < 1 || c.weight < 1)
    return TL_ERRF(TL_ERR_INVALID, "zero-bubble costs %d, %d, %d: expected >= 1 each", c.forward,
                   c.backward, c.weight);
  int* fdone = malloc(sizeof(int) * (size_t)p * (size_t)m);
  int* bdone = malloc(sizeof(int) * (size_t)p * (size_t)m);
  tl_status st = fdone && bdone ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for a schedule");
  for (int s = 0; all && s < p && st == TL_OK; s++) {
    all[s] = (tl_pp_schedule){
        .kind = TL_SCHEDULE_ZERO_BUBBLE, .n_stages = p, .stage = s, .n_micro = m, .n_chunks = 1};
    all[s].instr = malloc(sizeof(tl_pp_instr) * 7 * (size_t)m);
    if (!all[s].instr) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a schedule");
  }
  if (st == TL_OK) {
    *ticks = zero_bubble_lists(p, m, c, all, fdone, bdone, held);
    if (*ticks < 0) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a schedule");
    for (int s = 0; all && s < p; s++) count_in_flight(&all[s]);
  }
  if (st != TL_OK && all) {
    for (int s = 0; s < p; s++) tl_pp_schedule_free(&all[s]);
  }
  free(fdone), free(bdone);
  return st;
}

/* Zero-bubble's list of one stage (out may be NULL), and its most
 * micro-batches held. Every stage's counts of the last (p, m, costs) are
 * kept per thread, in a table indexed by their hash: the planner asks stage
 * after stage, for meshes whose replicas cut the batch alike, and plans
 * that differ in their recomputation (the costs) alternate. */
#define ZB_CACHED 4096
struct zb_cached {
  int p, m, ticks;
  struct tl_pp_costs c;
  unsigned char held[TL_MAX_STAGES];
};
static _Thread_local struct zb_cached g_zb[ZB_CACHED];

static struct zb_cached* zb_slot(int p, int m, struct tl_pp_costs c) {
  unsigned h = (unsigned)p * 2654435761u ^ (unsigned)m * 40503u ^ (unsigned)c.forward * 7919u ^
               (unsigned)c.backward * 104729u ^ (unsigned)c.weight * 1299709u;
  return &g_zb[(h ^ (h >> 15)) % ZB_CACHED];
}

static tl_status zero_bubble_stage(int p, int m, struct tl_pp_costs c, int stage,
                                   tl_pp_schedule* out, int* held, int* ticks) {
  struct zb_cached* e = zb_slot(p, m, c);
  if (!out && e->p == p && e->m == m && memcmp(&e->c, &c, sizeof c) == 0) {
    *held = e->held[stage];
    *ticks = e->ticks;
    return TL_OK;
  }
  tl_pp_schedule* all = NULL;
  if (out && !(all = calloc((size_t)p, sizeof *all)))
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for a schedule");
  int n_ticks = 0, h[TL_MAX_STAGES];
  tl_status st = zero_bubble_all(p, m, c, all, h, &n_ticks);
  if (st == TL_OK) {
    /* at most min(p, m) <= TL_MAX_STAGES: a byte holds it */
    for (int s = 0; s < p; s++) e->held[s] = (unsigned char)h[s];
    e->p = p, e->m = m, e->c = c, e->ticks = n_ticks;
    *held = h[stage];
    *ticks = n_ticks;
    if (out) {
      *out = all[stage];
      all[stage].instr = NULL;
      for (int s = 0; s < p; s++) free(all[s].instr);
    }
  }
  free(all);
  return st;
}

tl_status tl_pp_schedule_build(tl_schedule_kind kind, int n_stages, int stage, int n_micro,
                               tl_pp_schedule* s) {
  return tl_pp_schedule_build_costs(kind, n_stages, stage, n_micro, 1, NULL, s);
}

tl_status tl_pp_schedule_build_costs(tl_schedule_kind kind, int n_stages, int stage, int n_micro,
                                     int n_chunks, const struct tl_pp_costs* costs,
                                     tl_pp_schedule* s) {
  memset(s, 0, sizeof *s);
  if (n_stages < 1 || stage < 0 || stage >= n_stages || n_micro < 1)
    return TL_ERRF(TL_ERR_INVALID, "schedule of stage %d of %d for %d micro-batches", stage,
                   n_stages, n_micro);
  if (kind == TL_SCHEDULE_INTERLEAVED)
    TL_CHECK(interleaved_ok(n_stages, n_micro, n_chunks));
  else if (n_chunks != 1)
    return TL_ERRF(TL_ERR_INVALID,
                   "a %s schedule of %d chunks per stage: only interleaved has more than one",
                   tl_schedule_kind_name(kind), n_chunks);
  if (kind == TL_SCHEDULE_ZERO_BUBBLE) {
    int held, ticks;
    return zero_bubble_stage(n_stages, n_micro, costs ? *costs : k_unit, stage, s, &held, &ticks);
  }
  if (kind != TL_SCHEDULE_GPIPE && kind != TL_SCHEDULE_1F1B && kind != TL_SCHEDULE_INTERLEAVED)
    return TL_ERRF(TL_ERR_INVALID, "schedule kind %d", (int)kind);
  s->kind = kind;
  s->n_stages = n_stages;
  s->stage = stage;
  s->n_micro = n_micro;
  s->n_chunks = n_chunks;
  s->instr = malloc(sizeof(tl_pp_instr) * 6 * (size_t)n_micro * (size_t)n_chunks);
  if (!s->instr) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a schedule");
  if (kind == TL_SCHEDULE_INTERLEAVED) {
    interleaved(s);
  } else if (kind == TL_SCHEDULE_GPIPE) {
    for (int i = 0; i < n_micro; i++) forward(s, i);
    for (int i = 0; i < n_micro; i++) backward(s, i);
  } else {
    int warmup = n_stages - stage - 1;
    if (warmup > n_micro) warmup = n_micro;
    int f = 0, b = 0;
    for (; f < warmup; f++) forward(s, f);
    while (f < n_micro) { /* steady state: one forward, one backward */
      forward(s, f++);
      backward(s, b++);
    }
    while (b < n_micro) backward(s, b++);
  }
  count_in_flight(s);
  return TL_OK;
}

int tl_pp_schedule_in_flight(tl_schedule_kind kind, int n_stages, int stage, int n_micro) {
  return tl_pp_schedule_in_flight_costs(kind, n_stages, stage, n_micro, 1, NULL);
}

int tl_pp_schedule_in_flight_costs(tl_schedule_kind kind, int n_stages, int stage, int n_micro,
                                   int n_chunks, const struct tl_pp_costs* costs) {
  if (kind == TL_SCHEDULE_GPIPE) return n_micro;
  if (kind == TL_SCHEDULE_INTERLEAVED) {
    int held[TL_PP_MAX_CHUNKS];
    return tl_pp_schedule_chunk_in_flight(n_stages, stage, n_micro, n_chunks, held);
  }
  if (kind == TL_SCHEDULE_ZERO_BUBBLE) {
    int held = n_stages < n_micro ? n_stages : n_micro,
        ticks; /* its bound, if it cannot simulate */
    if (n_stages >= 1 && n_micro >= 1 && stage >= 0 && stage < n_stages &&
        zero_bubble_stage(n_stages, n_micro, costs ? *costs : k_unit, stage, NULL, &held, &ticks) !=
            TL_OK)
      tl_clear_error();
    return held;
  }
  /* warm-up forwards, then one more before the first backward */
  int warmup = n_stages - stage - 1 < n_micro ? n_stages - stage - 1 : n_micro;
  return warmup + 1 < n_micro ? warmup + 1 : n_micro;
}

static tl_status simulate(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                          struct tl_pp_costs c, tl_pp_span* spans, int* n_spans, int* ticks);

tl_status tl_pp_schedule_ticks(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                               const struct tl_pp_costs* costs, int* ticks) {
  if (n_stages < 1 || n_micro < 1)
    return TL_ERRF(TL_ERR_INVALID, "a schedule of %d stages for %d micro-batches", n_stages,
                   n_micro);
  struct tl_pp_costs c = costs ? *costs : k_unit;
  if (kind == TL_SCHEDULE_GPIPE || kind == TL_SCHEDULE_1F1B) {
    *ticks = (n_micro + n_stages - 1) * (c.forward + c.backward + c.weight);
    return TL_OK;
  }
  if (kind == TL_SCHEDULE_INTERLEAVED) {
    TL_CHECK(interleaved_ok(n_stages, n_micro, n_chunks));
    *ticks = (n_micro * n_chunks + n_stages - 1) * (c.forward + c.backward + c.weight);
    return TL_OK;
  }
  int held;
  return zero_bubble_stage(n_stages, n_micro, c, 0, NULL, &held, ticks);
}

tl_status tl_pp_schedule_build_forward(int n_stages, int stage, int n_micro, int n_chunks,
                                       tl_pp_schedule* s) {
  memset(s, 0, sizeof *s);
  if (n_stages < 1 || stage < 0 || stage >= n_stages || n_micro < 1 || n_chunks < 1 ||
      n_chunks > TL_PP_MAX_CHUNKS)
    return TL_ERRF(TL_ERR_INVALID,
                   "forward schedule of stage %d of %d for %d micro-batches, %d chunks", stage,
                   n_stages, n_micro, n_chunks);
  s->kind = TL_SCHEDULE_GPIPE;
  s->n_stages = n_stages;
  s->stage = stage;
  s->n_micro = n_micro;
  s->n_chunks = n_chunks;
  s->instr = malloc(sizeof(tl_pp_instr) * 3 * (size_t)n_micro * (size_t)n_chunks);
  if (!s->instr) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a schedule");
  for (int i = 0; i < n_micro; i++)
    for (int c = 0; c < n_chunks; c++) forward_chunk(s, i, c);
  s->max_in_flight = 1;
  for (int c = 0; c < n_chunks; c++) s->chunk_in_flight[c] = 1;
  return TL_OK;
}

void tl_pp_schedule_free(tl_pp_schedule* s) {
  if (!s) return;
  free(s->instr);
  memset(s, 0, sizeof *s);
}

void tl_pp_schedule_print(const tl_pp_schedule* s, FILE* f, int all) {
  static const char* const short_names[] = {"ra", "F", "sa", "rg", "B", "sg", "W"};
  for (int k = 0, first = 1; k < s->n; k++) {
    tl_pp_op op = s->instr[k].op;
    if (!all && op != TL_PP_FORWARD && op != TL_PP_BACKWARD && op != TL_PP_WEIGHT) continue;
    fprintf(f, "%s%s%d", first ? "" : " ", short_names[op], s->instr[k].micro);
    if (s->n_chunks > 1) fprintf(f, ".%d", s->instr[k].chunk);
    first = 0;
  }
  fputc('\n', f);
}

/* Simulation: time advances in ticks; each stage executes its next
 * instruction when its inputs are there, a pass taking its costs' ticks.
 * Messages and passes are counted per virtual stage q = chunk * p + stage
 * and micro-batch. */
tl_status tl_pp_schedule_check(tl_schedule_kind kind, int n_stages, int n_micro, int* ticks) {
  return simulate(kind, n_stages, n_micro, 1, k_unit, NULL, NULL, ticks);
}

tl_status tl_pp_schedule_check_costs(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                                     const struct tl_pp_costs* costs, int* ticks) {
  return simulate(kind, n_stages, n_micro, n_chunks, costs ? *costs : k_unit, NULL, NULL, ticks);
}

tl_status tl_pp_schedule_timeline(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                                  const struct tl_pp_costs* costs, tl_pp_span* spans, int* n_spans,
                                  int* ticks) {
  *n_spans = 0;
  return simulate(kind, n_stages, n_micro, n_chunks, costs ? *costs : k_unit, spans, n_spans,
                  ticks);
}

static tl_status simulate(tl_schedule_kind kind, int n_stages, int n_micro, int n_chunks,
                          struct tl_pp_costs c, tl_pp_span* spans, int* n_spans, int* ticks) {
  if (n_stages < 1 || n_micro < 1 || n_chunks < 1)
    return TL_ERRF(TL_ERR_INVALID, "a schedule of %d stages, %d micro-batches, %d chunks", n_stages,
                   n_micro, n_chunks);
  const int P = n_stages * n_chunks; /* virtual stages */
  const size_t cells = (size_t)P * (size_t)n_micro;
  tl_pp_schedule* s = calloc((size_t)n_stages, sizeof *s);
  int* pc = calloc((size_t)n_stages, sizeof(int));
  int* busy_until = calloc((size_t)n_stages, sizeof(int));
  /* when each message becomes available (-1: not sent yet) */
  int* act_ready = malloc(sizeof(int) * cells);
  int* grad_ready = malloc(sizeof(int) * cells);
  int* fwd_done = calloc(cells, sizeof(int));
  int* bwd_done = calloc(cells, sizeof(int));
  int* wgt_done = calloc(cells, sizeof(int));
  const bool zb = kind == TL_SCHEDULE_ZERO_BUBBLE;
  /* one-pass backwards take B and W together */
  const int f_ticks = c.forward, b_ticks = zb ? c.backward : c.backward + c.weight;
  tl_status st = TL_OK;
  if (!s || !pc || !busy_until || !act_ready || !grad_ready || !fwd_done || !bwd_done ||
      !wgt_done) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory simulating a schedule");
    goto done;
  }
  for (size_t i = 0; i < cells; i++) act_ready[i] = grad_ready[i] = -1;
  int zb_ticks, zb_held[TL_MAX_STAGES];
  if (zb && n_chunks == 1) /* all at once: one simulation */
    st = zero_bubble_all(n_stages, n_micro, c, s, zb_held, &zb_ticks);
  else
    for (int p = 0; p < n_stages && st == TL_OK; p++)
      st = tl_pp_schedule_build_costs(kind, n_stages, p, n_micro, n_chunks, &c, &s[p]);
  if (st != TL_OK) goto done;
  int now = 0, remaining = 0;
  for (int p = 0; p < n_stages; p++) remaining += s[p].n;
  while (remaining > 0) {
    int progressed = 0, again = 1;
    /* settle this instant: a send by a later stage can unblock an earlier one */
    while (again) {
      again = 0;
      for (int p = 0; p < n_stages; p++) {
        while (pc[p] < s[p].n && busy_until[p] <= now) {
          tl_pp_instr in = s[p].instr[pc[p]];
          int i = in.micro, q = in.chunk * n_stages + p, at = q * n_micro + i;
          if (in.op == TL_PP_RECV_ACT && (act_ready[at] < 0 || act_ready[at] > now)) break;
          if (in.op == TL_PP_RECV_GRAD && (grad_ready[at] < 0 || grad_ready[at] > now)) break;
          tl_pp_span span = {p, i, in.op, now, now, in.chunk};
          if (in.op == TL_PP_FORWARD) {
            if (q > 0 && act_ready[at] < 0) {
              st = TL_ERRF(TL_ERR_INTERNAL,
                           "stage %d runs forward %d of chunk %d before receiving it", p, i,
                           in.chunk);
              goto done;
            }
            busy_until[p] = span.end = now + f_ticks;
            fwd_done[at]++;
          } else if (in.op == TL_PP_BACKWARD) {
            if (!fwd_done[at] || (q < P - 1 && grad_ready[at] < 0)) {
              st = TL_ERRF(TL_ERR_INTERNAL,
                           "stage %d runs backward %d of chunk %d before its inputs", p, i,
                           in.chunk);
              goto done;
            }
            busy_until[p] = span.end = now + b_ticks;
            bwd_done[at]++;
          } else if (in.op == TL_PP_WEIGHT) {
            if (!bwd_done[at]) {
              st = TL_ERRF(TL_ERR_INTERNAL, "stage %d runs weight pass %d before its backward", p,
                           i);
              goto done;
            }
            busy_until[p] = span.end = now + c.weight;
            wgt_done[at]++;
          } else if (in.op == TL_PP_SEND_ACT) {
            act_ready[(q + 1) * n_micro + i] = busy_until[p];
          } else if (in.op == TL_PP_SEND_GRAD) {
            grad_ready[(q - 1) * n_micro + i] = busy_until[p];
          }
          if (spans && span.end > span.start) spans[(*n_spans)++] = span;
          pc[p]++;
          remaining--;
          progressed = again = 1;
        }
      }
    }
    int next = -1; /* the next time anything can change */
    for (int p = 0; p < n_stages; p++)
      if (pc[p] < s[p].n && busy_until[p] > now && (next < 0 || busy_until[p] < next))
        next = busy_until[p];
    for (size_t k = 0; k < cells; k++) {
      if (act_ready[k] > now && (next < 0 || act_ready[k] < next)) next = act_ready[k];
      if (grad_ready[k] > now && (next < 0 || grad_ready[k] < next)) next = grad_ready[k];
    }
    if (remaining > 0 && !progressed && next < 0) {
      st = TL_ERRF(TL_ERR_INTERNAL, "%s with %d stages, %d micro-batches and %d chunks deadlocks",
                   tl_schedule_kind_name(kind), n_stages, n_micro, n_chunks);
      goto done;
    }
    if (next > now) now = next;
  }
  for (size_t k = 0; k < cells; k++)
    if (fwd_done[k] != 1 || bwd_done[k] != 1 || wgt_done[k] != (zb ? 1 : 0)) {
      st = TL_ERRF(
          TL_ERR_INTERNAL, "micro-batch %d of virtual stage %d ran %d forwards, %d backwards",
          (int)(k % (size_t)n_micro), (int)(k / (size_t)n_micro), fwd_done[k], bwd_done[k]);
      goto done;
    }
  for (int p = 0; p < n_stages; p++)
    if (busy_until[p] > now) now = busy_until[p];
  *ticks = now;
done:
  for (int p = 0; s && p < n_stages; p++) tl_pp_schedule_free(&s[p]);
  free(s), free(pc), free(busy_until), free(act_ready), free(grad_ready), free(fwd_done),
      free(bwd_done), free(wgt_done);
  return st;
}

struct tl_pp_costs tl_pp_costs_of(const tl_graph* g, int begin, int end) {
  double f = 0, b = 0, w = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    int fw = i < g->n_forward ? i : g->nodes[i].forward_of;
    if (fw < begin || fw >= end) continue;
    if (i < g->n_forward)
      f += g->nodes[i].flops;
    else if (g->weight_begin && i >= g->weight_begin)
      w += g->nodes[i].flops;
    else
      b += g->nodes[i].flops;
  }
  if (f <= 0) return k_unit;
  if (!g->weight_begin) b = w = f;
  struct tl_pp_costs c = {8, (int)(8.0 * b / f + 0.5), (int)(8.0 * w / f + 0.5)};
  if (c.backward < 1) c.backward = 1;
  if (c.weight < 1) c.weight = 1;
  return c;
}
