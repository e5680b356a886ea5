/* search.c — enumerate splits, price each with the cost model, keep what
 * fits, rank by step time. The cost model is built once by the caller, so a
 * plan costs a few dozen floating-point operations; thousands of plans take
 * milliseconds. */
#include "planner/search.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* const k_reject_names[TL_REJECT_COUNT] = {"tp_heads",  "tp_vocab",  "tp_split",
                                                            "tp_node",   "pp_layers", "batch",
                                                            "sp_tokens", "trainer",   "memory"};

const char* tl_reject_name(tl_reject_reason r) {
  return r >= 0 && r < TL_REJECT_COUNT ? k_reject_names[r] : "unknown";
}

void tl_search_options_defaults(struct tl_search_options* o, int global_batch, tl_dtype dtype) {
  memset(o, 0, sizeof *o);
  o->global_batch = global_batch;
  o->dtype = dtype;
  o->fix_dp = o->fix_tp = o->fix_pp = o->fix_micro_batch = o->fix_n_micro = -1;
  o->fix_zero = o->fix_recompute = o->fix_schedule = o->fix_sp = o->fix_virtual_stages = -1;
  o->fix_cp = -1;
  o->dp_bucket_mb = 25;
}

void tl_search_free(tl_search_result* r) {
  if (!r) return;
  free(r->plans);
  memset(r, 0, sizeof *r);
}

static int by_step_time(const void* a, const void* b) {
  const tl_plan *x = a, *y = b;
  if (x->t_step != y->t_step) return x->t_step < y->t_step ? -1 : 1;
  /* ties: less memory first, then smaller tp, pp (simpler meshes) */
  if (x->mem_total != y->mem_total) return x->mem_total < y->mem_total ? -1 : 1;
  if (x->tp != y->tp) return x->tp - y->tp;
  if (x->pp != y->pp) return x->pp - y->pp;
  if (tl_plan_cp(x) != tl_plan_cp(y)) return tl_plan_cp(x) - tl_plan_cp(y);
  return (int)x->sequence_parallel - (int)y->sequence_parallel;
}

static bool fixed_ok(int fix, int v) {
  return fix < 0 || fix == v;
}

/* The cost models a search prices: its own (cp 1), then o's for cp > 1;
 * NULL past the last. */
static const tl_cost_model* model_at(const tl_cost_model* cm, const struct tl_search_options* o,
                                     int i) {
  if (i == 0) return cm;
  return i - 1 < o->n_cp_models ? o->cp_models[i - 1] : NULL;
}

static tl_status push(tl_search_result* r, int* cap, const tl_plan* p) {
  if (r->n_plans == *cap) {
    int nc = *cap ? *cap * 2 : 256;
    tl_plan* np = realloc(r->plans, sizeof *np * (size_t)nc);
    if (!np) return TL_ERRF(TL_ERR_NOMEM, "search: %d plans", nc);
    r->plans = np;
    *cap = nc;
  }
  r->plans[r->n_plans++] = *p;
  return TL_OK;
}

/* The trainer's cut of the layers into n virtual stages depends on tp,
 * sequence parallelism and n alone, and meshes of one search share many
 * (pp 16 with 2 chunks a rank and pp 32 with one, say): each is made once. */
struct cut_cache {
  struct cut_entry {
    int tp, sp, n;
    int layers[TL_MODEL_MAX_LAYERS];
  } * e;
  int n, cap;
};

static tl_status cut_of(const tl_cost_model* cm, struct cut_cache* cc, int tp, bool sp, int n,
                        const int** out) {
  for (int i = 0; i < cc->n; i++)
    if (cc->e[i].tp == tp && cc->e[i].sp == sp && cc->e[i].n == n) {
      *out = cc->e[i].layers;
      return TL_OK;
    }
  if (cc->n == cc->cap) {
    int cap = cc->cap ? 2 * cc->cap : 64;
    struct cut_entry* e = realloc(cc->e, sizeof *e * (size_t)cap);
    if (!e) return TL_ERRF(TL_ERR_NOMEM, "out of memory for %d stage cuts", cap);
    cc->e = e, cc->cap = cap;
  }
  struct cut_entry* e = &cc->e[cc->n];
  TL_CHECK(tl_cost_stage_layers(cm, tp, sp, n, e->layers));
  e->tp = tp, e->sp = sp, e->n = n;
  cc->n++;
  *out = e->layers;
  return TL_OK;
}

/* Every plan of mesh dp x tp x pp (sequence parallel or not): the stages as
 * the trainer cuts them (one cut per mesh), then every way to cut the
 * replica's batch, every schedule, ZeRO stage and recomputation. */
/* The interleaved schedule's chunk counts the search tries per rank. */
#define MAX_SEARCHED_CHUNKS 8

static tl_status add_mesh(const tl_cost_model* cm, const tl_cluster* c,
                          const struct tl_search_options* o, int dp, int tp, int pp, bool sp,
                          struct cut_cache* cc, tl_search_result* out, int* cap) {
  const int cp = cm->cp > 1 ? cm->cp : 1;
  /* the cut per chunk count: into pp * v virtual stages (v = 1: the
   * stages); interleaving only where every chunk gets a layer */
  int max_v = 1;
  if (pp >= 2 && cm->kind != TL_MODEL_MLP &&
      (o->fix_schedule < 0 || o->fix_schedule == TL_SCHEDULE_INTERLEAVED))
    for (int v = 2; v <= MAX_SEARCHED_CHUNKS && pp * v <= cm->n_layers && pp * v <= TL_MAX_STAGES;
         v++)
      max_v = v;
  int per_replica = o->global_batch / dp;
  for (int mb = 1; mb <= per_replica; mb++) {
    if (per_replica % mb || !fixed_ok(o->fix_micro_batch, mb)) continue;
    int n_micro = per_replica / mb;
    if (!fixed_ok(o->fix_n_micro, n_micro)) continue;
    if (sp && (int64_t)mb * (cm->seq / cp) % tp) { /* the trainer splits token rows evenly */
      out->rejected[TL_REJECT_SP_TOKENS]++;
      continue;
    }
    for (int sk = TL_SCHEDULE_GPIPE; sk <= TL_SCHEDULE_ZERO_BUBBLE; sk++) {
      if (!fixed_ok(o->fix_schedule, sk)) continue;
      /* interleaving: GPT plans of 2 to 8 chunks a rank, micro-batches in
       * groups of pp */
      const bool inter = sk == TL_SCHEDULE_INTERLEAVED;
      if (inter && (pp < 2 || max_v < 2 || n_micro % pp != 0)) continue;
      /* one stage: the schedules are the same run; keep 1F1B */
      if (pp == 1 && sk != TL_SCHEDULE_1F1B && o->fix_schedule < 0) continue;
      /* zero-bubble is priced for the GPT (an MLP's graphs are one-pass) */
      if (sk == TL_SCHEDULE_ZERO_BUBBLE && (cm->kind == TL_MODEL_MLP || pp > TL_MAX_STAGES))
        continue;
      for (int v = inter ? 2 : 1; v <= (inter ? max_v : 1); v++) {
        if (!fixed_ok(o->fix_virtual_stages, v)) continue;
        const int* layers = NULL; /* each cut when first needed */
        TL_CHECK(cut_of(cm, cc, tp, sp, pp * v, &layers));
        for (int zero = 0; zero <= 3; zero++) {
          if (!fixed_ok(o->fix_zero, zero)) continue;
          if (dp == 1 && zero > 0 && o->fix_zero < 0) continue; /* nothing to shard over */
          /* the trainer runs zero-bubble and interleaving with ZeRO 0 and 1 */
          if ((sk == TL_SCHEDULE_ZERO_BUBBLE || inter) && zero >= 2) continue;
          /* an MLP is priced without recomputation */
          for (int rc = 0; rc <= (cm->kind != TL_MODEL_MLP ? TL_RECOMPUTE_FULL : 0); rc++) {
            if (!fixed_ok(o->fix_recompute, rc)) continue;
            tl_plan p;
            memset(&p, 0, sizeof p);
            p.dp = dp, p.tp = tp, p.pp = pp, p.cp = cp, p.micro_batch = mb, p.n_micro = n_micro;
            p.schedule = (tl_schedule_kind)sk;
            p.zero = zero;
            p.recompute = (tl_recompute)rc;
            p.sequence_parallel = sp;
            p.dp_bucket_mb = o->dp_bucket_mb;
            p.grad_reduce = o->grad_reduce;
            p.no_overlap = o->no_overlap;
            p.recompute_whole_forward = o->recompute_whole_forward;
            p.virtual_stages = v;
            tl_cost_evaluate(cm, c, o->dtype, layers, &p);
            out->n_evaluated++;
            if (o->trainer_only && !p.runnable) {
              out->rejected[TL_REJECT_TRAINER]++;
              continue;
            }
            if (!p.fits) {
              out->rejected[TL_REJECT_MEMORY]++;
              if (isfinite(p.t_step) && (!out->has_closest || p.mem_total < out->closest.mem_total))
                out->closest = p, out->has_closest = true;
              continue;
            }
            TL_CHECK(push(out, cap, &p));
          }
        }
      }
    }
  }
  return TL_OK;
}

/* The first mesh rule dp x tp x pp breaks; TL_REJECT_COUNT: none. */
static tl_reject_reason mesh_rule(const tl_cost_model* cm, const tl_cluster* c,
                                  const struct tl_search_options* o, int dp, int tp, int pp) {
  const bool mlp = cm->kind == TL_MODEL_MLP;
  if (mlp && !tl_cost_has_shard(cm, tp)) return TL_REJECT_TP_SPLIT;
  if (!mlp && (cm->n_heads % tp || cm->n_kv_heads % tp)) return TL_REJECT_TP_HEADS;
  if (!mlp && cm->ffn_hidden % tp) return TL_REJECT_TP_SPLIT; /* a Llama's MLP width */
  if (!mlp && cm->padded_vocab % tp) return TL_REJECT_TP_VOCAB;
  if (tp > c->devices_per_node && !o->allow_tp_across_nodes) return TL_REJECT_TP_NODE;
  if (pp > cm->n_layers) return TL_REJECT_PP_LAYERS;
  if (o->global_batch % dp) return TL_REJECT_BATCH;
  return TL_REJECT_COUNT;
}

/* The rule the smallest mesh with the fixed dp, tp and pp breaks (the
 * others at 1), or TL_REJECT_COUNT: every mesh with them breaks it too, on
 * any number of devices. */
static tl_reject_reason fixed_rule(const tl_cost_model* cm, const tl_cluster* c,
                                   const struct tl_search_options* o) {
  return mesh_rule(cm, c, o, o->fix_dp >= 1 ? o->fix_dp : 1, o->fix_tp >= 1 ? o->fix_tp : 1,
                   o->fix_pp >= 1 ? o->fix_pp : 1);
}

/* The largest tp mesh_rule can allow: a GPT's heads, an MLP's widest
 * split. */
static int tp_bound(const tl_cost_model* cm) {
  if (cm->kind != TL_MODEL_MLP) return cm->n_heads > 1 ? cm->n_heads : 1;
  int t = 1;
  for (int i = 0; i < cm->n_shards; i++)
    if (cm->shards[i].from_graph && cm->shards[i].tp > t) t = cm->shards[i].tp;
  return t;
}

/* Calls fn for every mesh the rules and the fixed choices allow whose
 * devices number at most `limit`, whatever the cluster's count. */
static void each_allowed_mesh(const tl_cost_model* cm, const tl_cluster* c,
                              const struct tl_search_options* o, int64_t limit,
                              void (*fn)(void* arg, int dp, int tp, int pp, int cp), void* arg) {
  int max_tp =
      o->allow_tp_across_nodes ? (int)(limit < INT32_MAX ? limit : INT32_MAX) : c->devices_per_node;
  if (max_tp > tp_bound(cm)) max_tp = tp_bound(cm);
  for (int i = 0; model_at(cm, o, i); i++) {
    const int cp = model_at(cm, o, i)->cp > 1 ? model_at(cm, o, i)->cp : 1;
    if (!fixed_ok(o->fix_cp, cp)) continue;
    for (int tp = 1; tp <= max_tp && (int64_t)tp * cp <= limit; tp++) {
      if (!fixed_ok(o->fix_tp, tp)) continue;
      for (int pp = 1; pp <= cm->n_layers && (int64_t)tp * pp * cp <= limit; pp++) {
        if (!fixed_ok(o->fix_pp, pp)) continue;
        for (int dp = 1; dp <= o->global_batch && (int64_t)dp * tp * pp * cp <= limit; dp++) {
          if (!fixed_ok(o->fix_dp, dp)) continue;
          if (mesh_rule(cm, c, o, dp, tp, pp) == TL_REJECT_COUNT) fn(arg, dp, tp, pp, cp);
        }
      }
    }
  }
}

/* A part of the cluster holding d devices: whole nodes, or part of one. */
static bool part_of(const tl_cluster* c, int64_t d, tl_cluster* part) {
  *part = *c;
  if (d <= c->devices_per_node) {
    part->nodes = 1, part->devices_per_node = (int)d;
    return true;
  }
  if (d % c->devices_per_node) return false;
  part->nodes = (int)(d / c->devices_per_node);
  return true;
}

struct largest {
  const tl_cluster* c;
  int64_t devices;
  int dp, tp, pp, cp;
};

static void keep_largest(void* arg, int dp, int tp, int pp, int cp) {
  struct largest* l = arg;
  const int64_t d = (int64_t)dp * tp * pp * cp;
  tl_cluster part;
  if (d > l->devices && part_of(l->c, d, &part))
    l->devices = d, l->dp = dp, l->tp = tp, l->pp = pp, l->cp = cp;
}

int64_t tl_search_max_devices(const tl_cost_model* cm, const tl_cluster* c,
                              const struct tl_search_options* o, int* dp, int* tp, int* pp,
                              int* cp) {
  struct largest l = {c, 0, 0, 0, 0, 0};
  if (o->global_batch >= 1) each_allowed_mesh(cm, c, o, tl_cluster_devices(c), keep_largest, &l);
  *dp = l.dp, *tp = l.tp, *pp = l.pp, *cp = l.cp;
  return l.devices;
}

struct counts {
  const tl_cluster* c;
  int64_t* v;
  int n, cap;
  bool nomem;
};

static void add_count(void* arg, int dp, int tp, int pp, int cp) {
  struct counts* s = arg;
  const int64_t d = (int64_t)dp * tp * pp * cp;
  tl_cluster part;
  if (d >= tl_cluster_devices(s->c) || !part_of(s->c, d, &part)) return;
  for (int i = 0; i < s->n; i++)
    if (s->v[i] == d) return;
  if (s->n == s->cap) {
    int nc = s->cap ? 2 * s->cap : 64;
    int64_t* nv = realloc(s->v, sizeof *nv * (size_t)nc);
    if (!nv) {
      s->nomem = true;
      return;
    }
    s->v = nv, s->cap = nc;
  }
  s->v[s->n++] = d;
}

static int descending(const void* a, const void* b) {
  const int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* How many plans of each device count tl_search_fewer keeps: enough for a
 * table, bounded for a search of many counts. */
#define FEWER_KEEP 32
/* The most device counts tl_search_fewer prices. */
#define FEWER_MAX_COUNTS 64

tl_status tl_search_fewer(const tl_cost_model* cm, const tl_cluster* c,
                          const struct tl_search_options* o, int max_counts,
                          tl_search_result* out) {
  memset(out, 0, sizeof *out);
  struct counts s = {c, NULL, 0, 0, false};
  if (o->global_batch >= 1) each_allowed_mesh(cm, c, o, tl_cluster_devices(c) - 1, add_count, &s);
  if (s.nomem) {
    free(s.v);
    return TL_ERRF(TL_ERR_NOMEM, "search: %d device counts", s.cap);
  }
  if (s.n > 1) qsort(s.v, (size_t)s.n, sizeof *s.v, descending);
  int cap = 0;
  tl_status st = TL_OK;
  /* where memory is what fails, fewer devices only need more of it: a
   * search that finds nothing stops after FEWER_MAX_COUNTS counts */
  for (int i = 0; i < s.n && out->n_counts_fitting < max_counts && out->n_counts < FEWER_MAX_COUNTS;
       i++) {
    tl_cluster part;
    part_of(c, s.v[i], &part);
    tl_search_result r;
    TL_CHECK_GOTO(tl_search_run(cm, &part, o, &r), st, fail);
    out->n_counts++;
    out->n_evaluated += r.n_evaluated;
    if (r.n_plans) out->n_counts_fitting++;
    for (int k = 0; k < r.n_plans && k < FEWER_KEEP && st == TL_OK; k++)
      st = push(out, &cap, &r.plans[k]);
    tl_search_free(&r);
    if (st != TL_OK) goto fail;
  }
  free(s.v);
  if (out->n_plans > 1) qsort(out->plans, (size_t)out->n_plans, sizeof *out->plans, by_step_time);
  return TL_OK;
fail:
  free(s.v);
  tl_search_free(out);
  return st;
}

/* the node counts above the cluster's that a mesh fills: seen[n] */
struct more_counts {
  const tl_cluster* c;
  int64_t max_nodes;
  bool* seen;
};

static void add_more_count(void* arg, int dp, int tp, int pp, int cp) {
  struct more_counts* m = arg;
  const int64_t d = (int64_t)dp * tp * pp * cp;
  if (d <= tl_cluster_devices(m->c) || d % m->c->devices_per_node) return;
  if (d / m->c->devices_per_node <= m->max_nodes) m->seen[d / m->c->devices_per_node] = true;
}

tl_status tl_search_more_nodes(const tl_cost_model* cm, const tl_cluster* c,
                               const struct tl_search_options* o, int64_t max_devices,
                               int max_counts, int* nodes, int* searched_to,
                               tl_search_result* out) {
  memset(out, 0, sizeof *out);
  *nodes = *searched_to = 0;
  if (o->global_batch < 1) return TL_OK;
  /* no mesh uses more than batch x layers x the widest tp x the widest cp */
  int widest_cp = 1;
  for (int i = 0; model_at(cm, o, i); i++)
    if (model_at(cm, o, i)->cp > widest_cp) widest_cp = model_at(cm, o, i)->cp;
  const int64_t largest = (int64_t)o->global_batch * cm->n_layers * tp_bound(cm) * widest_cp;
  if (max_devices > largest) max_devices = largest;
  int64_t max_nodes = max_devices / c->devices_per_node;
  if (max_nodes > INT32_MAX / c->devices_per_node) max_nodes = INT32_MAX / c->devices_per_node;
  if (max_nodes <= c->nodes) return TL_OK;
  struct more_counts mc = {c, max_nodes, calloc((size_t)max_nodes + 1, sizeof(bool))};
  if (!mc.seen) return TL_ERRF(TL_ERR_NOMEM, "search: %lld node counts", (long long)max_nodes);
  each_allowed_mesh(cm, c, o, max_nodes * c->devices_per_node, add_more_count, &mc);
  /* fewest first, every count: fitting does not grow evenly with the
   * devices (a count whose meshes split the layers or the batch unevenly
   * can fail between two that fit) */
  int counts = 0;
  int64_t evaluated = 0;
  tl_status st = TL_OK;
  for (int64_t k = c->nodes + 1; k <= max_nodes && counts < max_counts && !*nodes; k++) {
    if (!mc.seen[k]) continue;
    tl_cluster more = *c;
    more.nodes = (int)k;
    tl_search_result r;
    if ((st = tl_search_run(cm, &more, o, &r)) != TL_OK) break;
    counts++;
    evaluated += r.n_evaluated;
    *searched_to = (int)k;
    if (r.n_plans)
      *out = r, *nodes = (int)k;
    else
      tl_search_free(&r);
  }
  free(mc.seen);
  if (st != TL_OK) return st; /* out holds no plan: the search stops at the first */
  out->n_counts = counts;
  out->n_counts_fitting = *nodes ? 1 : 0;
  out->n_evaluated = evaluated;
  return TL_OK;
}

/* ---- why nothing fits */

static void appendf(char* buf, size_t size, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void appendf(char* buf, size_t size, const char* fmt, ...) {
  size_t n = strlen(buf);
  if (n + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, size - n, fmt, ap);
  va_end(ap);
}

/* The fixed choices as "dp 5, tp 2": the mesh's (mesh = true) or the
 * others'. */
static void fixed_list(const struct tl_search_options* o, bool mesh, char* buf, size_t size) {
  buf[0] = '\0';
  const struct {
    const char* name;
    int v;
    bool mesh;
  } f[] = {{"dp", o->fix_dp, true},
           {"tp", o->fix_tp, true},
           {"pp", o->fix_pp, true},
           {"cp", o->fix_cp, true},
           {"micro_batch", o->fix_micro_batch, false},
           {"micro_batches", o->fix_n_micro, false},
           {"zero", o->fix_zero, false},
           {"sp", o->fix_sp, false},
           {"virtual_stages", o->fix_virtual_stages, false}};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (f[i].v >= 0 && f[i].mesh == mesh)
      appendf(buf, size, "%s%s=%d", buf[0] ? ", " : "", f[i].name, f[i].v);
  if (!mesh && o->fix_schedule >= 0)
    appendf(buf, size, "%sschedule=%s", buf[0] ? ", " : "",
            tl_schedule_kind_name((tl_schedule_kind)o->fix_schedule));
  if (!mesh && o->fix_recompute >= 0)
    appendf(buf, size, "%srecompute=%s", buf[0] ? ", " : "",
            o->fix_recompute == TL_RECOMPUTE_FULL        ? "full"
            : o->fix_recompute == TL_RECOMPUTE_SELECTIVE ? "selective"
                                                         : "none");
}

/* A mesh rule in words. */
static void rule_words(tl_reject_reason k, const tl_cost_model* cm, const tl_cluster* c,
                       const struct tl_search_options* o, char* buf, size_t size) {
  switch (k) {
    case TL_REJECT_TP_HEADS:
      if (cm->n_kv_heads != cm->n_heads)
        appendf(buf, size, "tp must divide the %d heads and %d key/value heads", cm->n_heads,
                cm->n_kv_heads);
      else
        appendf(buf, size, "tp must divide the %d heads", cm->n_heads);
      break;
    case TL_REJECT_TP_VOCAB:
      appendf(buf, size, "tp must divide the padded vocabulary (%d)", cm->padded_vocab);
      break;
    case TL_REJECT_TP_SPLIT:
      if (cm->kind == TL_MODEL_LLAMA)
        appendf(buf, size, "tp must divide the MLP width (%d)", cm->ffn_hidden);
      else
        appendf(buf, size, "tp must divide the sizes of the MLP's split layers");
      break;
    case TL_REJECT_TP_NODE:
      appendf(buf, size,
              "tp must stay within a node's %d devices (--allow-tp-across-nodes lifts this)",
              c->devices_per_node);
      break;
    case TL_REJECT_PP_LAYERS:
      appendf(buf, size, "pp must be at most the %d layers", cm->n_layers);
      break;
    case TL_REJECT_BATCH:
      appendf(buf, size, "dp must divide the global batch (%d sequences)", o->global_batch);
      break;
    default:
      break;
  }
}

bool tl_search_mesh_bound(const tl_search_result* r) {
  if (r->n_plans > 0) return false;
  if (r->n_meshes == 0) return true;
  int64_t broken = 0;
  for (int k = 0; k <= TL_REJECT_BATCH; k++) broken += r->rejected[k];
  return r->n_evaluated == 0 && broken == r->n_meshes;
}

void tl_search_explain(const tl_cost_model* cm, const tl_cluster* c,
                       const struct tl_search_options* o, const tl_search_result* r, char* buf,
                       size_t size) {
  if (!size) return;
  buf[0] = '\0';
  if (r->n_plans > 0) return;
  const int devices = tl_cluster_devices(c);
  char fixed[96], others[192];
  fixed_list(o, true, fixed, sizeof fixed);
  fixed_list(o, false, others, sizeof others);
  /* 1. the fixed choices leave no factorisation of the devices */
  if (r->n_meshes == 0) {
    appendf(buf, size,
            "no dp x tp x pp of the cluster's %d devices has %s (dp x tp x pp must be all "
            "of them; --nodes N plans for N nodes)",
            devices, fixed[0] ? fixed : "the fixed choices");
    /* a whole mesh fixed: whether it could run on fewer devices */
    if (o->fix_dp >= 1 && o->fix_tp >= 1 && o->fix_pp >= 1) {
      const int64_t d = (int64_t)o->fix_dp * o->fix_tp * o->fix_pp;
      const tl_reject_reason why = mesh_rule(cm, c, o, o->fix_dp, o->fix_tp, o->fix_pp);
      tl_cluster part;
      if (why != TL_REJECT_COUNT) {
        appendf(buf, size, "; that mesh of %lld devices breaks a mesh rule too: ", (long long)d);
        rule_words(why, cm, c, o, buf, size);
      } else if (d < devices && !part_of(c, d, &part)) {
        appendf(buf, size, "; its %lld devices are not whole nodes of %d", (long long)d,
                c->devices_per_node);
      }
    } else if (fixed[0]) {
      const tl_reject_reason why = fixed_rule(cm, c, o);
      if (why != TL_REJECT_COUNT) {
        appendf(buf, size, "; no mesh of any size has %s: ", fixed);
        rule_words(why, cm, c, o, buf, size);
      }
    }
    return;
  }
  /* 2. the shapes that keep the mesh rules have no plan with the other
   * fixed choices (or sequence parallelism's token rule) */
  if (!tl_search_mesh_bound(r) && r->n_evaluated == 0) {
    appendf(buf, size, "no plan of the dp x tp x pp shapes that keep the mesh rules has %s",
            others[0] ? others : "the fixed choices");
    if (r->rejected[TL_REJECT_SP_TOKENS])
      appendf(buf, size,
              "; sequence parallelism needs tp to divide a micro-batch's tokens (%lld "
              "micro-batch sizes rejected)",
              (long long)r->rejected[TL_REJECT_SP_TOKENS]);
    /* the rules the fixed choices can break, each said where it applies */
    if (o->fix_micro_batch >= 0 || o->fix_n_micro >= 0)
      appendf(buf, size,
              "; micro_batch x micro_batches must make a replica's share of the %d sequences",
              o->global_batch);
    if (o->fix_schedule == TL_SCHEDULE_INTERLEAVED)
      appendf(buf, size,
              "; interleaving runs a GPT on pp >= 2 stages of 2 to %d chunks a rank, every "
              "chunk a layer (pp x virtual_stages <= the %d layers), micro_batches a multiple "
              "of pp, with ZeRO 0 or 1",
              MAX_SEARCHED_CHUNKS, cm->n_layers);
    else if (o->fix_virtual_stages > 1)
      appendf(buf, size,
              "; virtual_stages > 1 is the interleaved schedule's (schedule=interleaved)");
    if (o->fix_schedule == TL_SCHEDULE_ZERO_BUBBLE)
      appendf(buf, size, "; zero-bubble runs a GPT, with ZeRO 0 or 1");
    return;
  }
  /* 3. every shape breaks a mesh rule */
  if (r->n_evaluated == 0) {
    appendf(buf, size, "every dp x tp x pp of the %d devices%s%s breaks a mesh rule:", devices,
            fixed[0] ? " with " : "", fixed);
    const char* sep = " ";
    for (int k = 0; k <= TL_REJECT_BATCH; k++) {
      if (!r->rejected[k]) continue;
      appendf(buf, size, "%s", sep);
      sep = "; ";
      rule_words((tl_reject_reason)k, cm, c, o, buf, size);
      appendf(buf, size, " (%lld shape%s)", (long long)r->rejected[k],
              r->rejected[k] == 1 ? "" : "s");
    }
    int dp, tp, pp, cp;
    int64_t most = tl_search_max_devices(cm, c, o, &dp, &tp, &pp, &cp);
    if (most > 0 && cp > 1)
      appendf(buf, size,
              ". The rules allow at most %lld devices of whole nodes (dp %d x tp %d x pp %d x "
              "cp %d)",
              (long long)most, dp, tp, pp, cp);
    else if (most > 0)
      appendf(buf, size,
              ". The rules allow at most %lld devices of whole nodes (dp %d x tp %d x pp %d)",
              (long long)most, dp, tp, pp);
    else {
      const tl_reject_reason why = fixed_rule(cm, c, o);
      if (why != TL_REJECT_COUNT && fixed[0]) {
        appendf(buf, size, ". No mesh of any size has %s: ", fixed);
        rule_words(why, cm, c, o, buf, size);
      } else {
        appendf(buf, size, ". No mesh of any size meets them");
      }
    }
    return;
  }
  /* 4. plans were priced; none is one to run */
  appendf(buf, size, "all %lld plans priced were rejected:", (long long)r->n_evaluated);
  const char* sep = " ";
  if (r->rejected[TL_REJECT_SP_TOKENS]) {
    appendf(buf, size, "%ssequence parallelism needs tp to divide a micro-batch's tokens (%lld)",
            sep, (long long)r->rejected[TL_REJECT_SP_TOKENS]);
    sep = "; ";
  }
  if (r->rejected[TL_REJECT_TRAINER]) {
    appendf(buf, size, "%s%lld are not what `trellis train` runs on this cluster", sep,
            (long long)r->rejected[TL_REJECT_TRAINER]);
    sep = "; ";
  }
  if (r->rejected[TL_REJECT_MEMORY]) {
    appendf(buf, size, "%s%lld need more than a device's %.2f GB", sep,
            (long long)r->rejected[TL_REJECT_MEMORY], c->device_memory_bytes / 1e9);
    sep = "; ";
  }
  if (r->has_closest) {
    const tl_plan* p = &r->closest;
    appendf(buf, size,
            ". The least memory any needs is %.2f GB a device (dp %d, tp %d, pp %d, cp %d, "
            "micro-batch %d x %d, ZeRO %d, recompute %s: state %.2f, activations %.2f, "
            "reserve %.2f GB), %.2f GB over; its step would take %.4g s",
            p->mem_total / 1e9, p->dp, p->tp, p->pp, tl_plan_cp(p), p->micro_batch, p->n_micro,
            p->zero,
            p->recompute == TL_RECOMPUTE_FULL        ? "full"
            : p->recompute == TL_RECOMPUTE_SELECTIVE ? "selective"
                                                     : "none",
            p->mem_state / 1e9, p->mem_act / 1e9, p->mem_reserve / 1e9,
            (p->mem_total - c->device_memory_bytes) / 1e9, p->t_step);
  }
}

tl_status tl_search_run(const tl_cost_model* cm, const tl_cluster* c,
                        const struct tl_search_options* o, tl_search_result* out) {
  memset(out, 0, sizeof *out);
  const int devices = tl_cluster_devices(c), B = o->global_batch;
  if (B < 1) return TL_ERRF(TL_ERR_INVALID, "global batch %d; expected >= 1", B);
  if (tl_cluster_peak(c, o->dtype) <= 0)
    return TL_ERRF(TL_ERR_CONFIG, "cluster %s has no peak_flops for %s", c->name,
                   o->dtype == TL_BF16 ? "bf16" : "fp32");
  int cap = 0;
  struct cut_cache cc = {0};
  tl_status st = TL_OK;
  for (int i = 0; model_at(cm, o, i); i++) {
    /* each context-parallel degree on its own model (and stage cuts) */
    const tl_cost_model* mc = model_at(cm, o, i);
    const int cp = mc->cp > 1 ? mc->cp : 1;
    if (!fixed_ok(o->fix_cp, cp) || devices % cp) continue;
    cc.n = 0;
    const int rest = devices / cp;
    for (int tp = 1; tp <= rest; tp++) {
      if (rest % tp || !fixed_ok(o->fix_tp, tp)) continue;
      for (int pp = 1; pp <= rest / tp; pp++) {
        if ((rest / tp) % pp || !fixed_ok(o->fix_pp, pp)) continue;
        int dp = rest / tp / pp;
        if (!fixed_ok(o->fix_dp, dp)) continue;
        out->n_meshes++;
        /* 1. the mesh's own rules */
        const bool mlp = mc->kind == TL_MODEL_MLP;
        tl_reject_reason why = mesh_rule(mc, c, o, dp, tp, pp);
        if (why != TL_REJECT_COUNT) {
          out->rejected[why]++;
          continue;
        }
        /* 2. with and without sequence parallelism (tp > 1) */
        for (int sp = 0; sp <= (tp > 1 && !mlp); sp++) { /* an MLP has no sequence */
          if (!fixed_ok(o->fix_sp, sp) && !(tp == 1 && o->fix_sp == 1)) continue;
          TL_CHECK_GOTO(add_mesh(mc, c, o, dp, tp, pp, sp, &cc, out, &cap), st, fail);
        }
      }
    }
  }
  free(cc.e);
  if (out->n_plans > 1) qsort(out->plans, (size_t)out->n_plans, sizeof *out->plans, by_step_time);
  return TL_OK;
fail:
  free(cc.e);
  tl_search_free(out);
  return st;
}
