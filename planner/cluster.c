/* cluster.c — reading a cluster spec (jansson). Strict like the training
 * config: every key known, every number positive, each error naming the
 * JSON path, the value found and what was expected. */
#include "planner/cluster.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_kind.h"

double tl_cluster_peak(const tl_cluster* c, tl_dtype dtype) {
  return dtype == TL_BF16 || dtype == TL_F16 ? c->peak_bf16 : c->peak_fp32;
}

double tl_cluster_kernel_peak(const tl_cluster* c) {
  return c->peak_bf16 > 0 ? c->peak_bf16 : c->peak_fp32;
}

/* Index of the grid cell [a[i], a[i+1]] holding x (clamped) and x's place
 * in it, 0 .. 1, in log2 space. */
static int cell(const double* a, int n, double x, double* frac) {
  if (n == 1 || x <= a[0]) {
    *frac = 0;
    return 0;
  }
  if (x >= a[n - 1]) {
    *frac = 1;
    return n - 2;
  }
  int i = 0;
  while (i + 2 < n && x >= a[i + 1]) i++;
  *frac = log2(x / a[i]) / log2(a[i + 1] / a[i]);
  return i;
}

/* A table's value at (m, n, k): trilinear in log2 of each size, held at
 * its edges; an axis of one point is a constant. */
static double table_at(const struct tl_gemm_table* t, double m, double n, double k) {
  double fm, fn, fk;
  int i = cell(t->m, t->n_m, m, &fm), j = cell(t->n, t->n_n, n, &fn),
      l = cell(t->k, t->n_k, k, &fk);
  double e = 0;
  for (int di = 0; di <= (t->n_m > 1); di++)
    for (int dj = 0; dj <= (t->n_n > 1); dj++)
      for (int dl = 0; dl <= (t->n_k > 1); dl++) {
        double w = (di ? fm : 1 - fm) * (dj ? fn : 1 - fn) * (dl ? fk : 1 - fk);
        e += w * t->eff[((i + di) * t->n_n + (j + dj)) * t->n_k + (l + dl)];
      }
  return e;
}

double tl_cluster_gemm_efficiency(const tl_cluster* c, double m, double n, double k) {
  return c->gemm.n_m == 0 ? c->efficiency : table_at(&c->gemm, m, n, k);
}

void tl_cluster_use_fused_attention(tl_cluster* c) {
  c->attention_efficiency = TL_CLUSTER_FUSED_ATTENTION * c->efficiency;
  memset(&c->attention, 0, sizeof c->attention);
}

double tl_cluster_attention_efficiency(const tl_cluster* c, double head_dim, double seq) {
  if (c->attention.n_m > 0) return table_at(&c->attention, head_dim, seq, 1);
  return c->attention_efficiency > 0 ? c->attention_efficiency : c->efficiency;
}

/* A number > 0 (>= 0 when zero_ok) at obj[key]; required unless `dflt` >= 0. */
static tl_status number(const char* src, const json_t* obj, const char* path, const char* key,
                        double dflt, int zero_ok, double* out) {
  const json_t* v = json_object_get(obj, key);
  if (!v) {
    if (dflt >= 0) {
      *out = dflt;
      return TL_OK;
    }
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s%s: missing; expected a number %s", src, path, key,
                   zero_ok ? ">= 0" : "> 0");
  }
  if (!json_is_number(v))
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s%s: expected a number %s, got %s", src, path, key,
                   zero_ok ? ">= 0" : "> 0", tl_json_kind(v));
  double x = json_number_value(v);
  if (zero_ok ? x < 0 : x <= 0)
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s%s = %g: expected a number %s", src, path, key, x,
                   zero_ok ? ">= 0" : "> 0");
  *out = x;
  return TL_OK;
}

static tl_status integer(const char* src, const json_t* obj, const char* key, int* out) {
  const json_t* v = json_object_get(obj, key);
  if (!v) return TL_ERRF(TL_ERR_CONFIG, "%s: %s: missing; expected an integer >= 1", src, key);
  if (!json_is_integer(v))
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s: expected an integer 1 .. 1000000, got %s", src, key,
                   tl_json_kind(v));
  if (json_integer_value(v) < 1 || json_integer_value(v) > 1000000)
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s = %lld: expected an integer 1 .. 1000000", src, key,
                   (long long)json_integer_value(v));
  *out = (int)json_integer_value(v);
  return TL_OK;
}

static tl_status known_keys(const char* src, const json_t* obj, const char* path,
                            const char* const* keys) {
  const char* k;
  json_t* v;
  json_object_foreach((json_t*)obj, k, v) {
    int ok = 0;
    for (int i = 0; keys[i]; i++) ok |= strcmp(k, keys[i]) == 0;
    if (!ok) {
      char list[512] = "";
      for (int i = 0; keys[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", keys[i]);
      return TL_ERRF(TL_ERR_CONFIG, "%s: %s%s: unknown key; expected one of: %s", src, path, k,
                     list);
    }
  }
  (void)v;
  return TL_OK;
}

/* "shared_core_speed": one number in (0, 1e6) for each count of computing
 * ranks 1 .. devices_per_node, the last 1 (all computing: the spec's own
 * rates), on a cpu cluster whose ranks outnumber the cores it says. */
static tl_status parse_shared_speed(const char* src, const json_t* v, tl_cluster* c) {
  const int n = c->devices_per_node;
  if (c->device != TL_DEVICE_CPU || c->cores_per_node <= 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: shared_core_speed: it describes ranks sharing a cpu node's cores and needs "
                   "cores_per_node (device \"%s\"%s); remove it",
                   src, c->device == TL_DEVICE_CPU ? "cpu" : "cuda",
                   c->device == TL_DEVICE_CPU ? ", no cores_per_node" : "");
  if (c->cores_per_node >= n)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: shared_core_speed: the %d ranks of a node have %d cores, a core each: "
                   "none shares; remove it",
                   src, n, c->cores_per_node);
  if (n > TL_SHARED_SPEED_MAX)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: shared_core_speed: describes at most %d ranks a node, and "
                   "devices_per_node is %d; remove it",
                   src, TL_SHARED_SPEED_MAX, n);
  char got[64];
  if (json_is_array(v))
    snprintf(got, sizeof got, "%zu", json_array_size(v));
  else
    snprintf(got, sizeof got, "%s", tl_json_kind(v));
  if (!json_is_array(v) || json_array_size(v) != (size_t)n)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: shared_core_speed: expected an array of %d numbers (one for each count "
                   "of computing ranks, 1 .. devices_per_node = %d), got %s",
                   src, n, n, got);
  for (int i = 0; i < n; i++) {
    const json_t* x = json_array_get(v, (size_t)i);
    if (!json_is_number(x))
      return TL_ERRF(TL_ERR_CONFIG,
                     "%s: shared_core_speed[%d]: expected a number in (0, 1e6) (the rate one of "
                     "%d computing ranks gets, over the rate while all compute), got %s",
                     src, i, i + 1, tl_json_kind(x));
    double d = json_number_value(x);
    if (!(d > 0 && d < 1e6))
      return TL_ERRF(TL_ERR_CONFIG,
                     "%s: shared_core_speed[%d] = %g: expected a number in (0, 1e6) (the rate "
                     "one of %d computing ranks gets, over the rate while all compute)",
                     src, i, d, i + 1);
    c->shared_speed[i] = d;
  }
  if (fabs(c->shared_speed[n - 1] - 1) > 1e-6)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: shared_core_speed[%d] = %g: expected 1 (all %d ranks computing: the "
                   "spec's own rates)",
                   src, n - 1, c->shared_speed[n - 1], n);
  c->n_shared_speed = n;
  return TL_OK;
}

struct tl_link tl_link_at(const struct tl_link* l, double bytes) {
  struct tl_link at = *l;
  at.message_bytes = bytes;
  return at;
}

/* Log-linear in the size between points (x rising), held at the ends. */
static double by_size_at(const double* x, const double* y, int n, double at) {
  if (at <= x[0]) return y[0];
  if (at >= x[n - 1]) return y[n - 1];
  int i = 0;
  while (i + 2 < n && at > x[i + 1]) i++;
  return y[i] + log(at / x[i]) / log(x[i + 1] / x[i]) * (y[i + 1] - y[i]);
}

double tl_link_bandwidth_at(const struct tl_link* l, double bytes) {
  if (l->n_sizes <= 0) return l->bandwidth;
  if (l->message_bytes > 0) bytes = l->message_bytes;
  return by_size_at(l->size_bytes, l->size_bandwidth, l->n_sizes, bytes);
}

double tl_cluster_share_at(const struct tl_cluster* c, bool gather, double bytes) {
  if (c->n_share_sizes <= 0) {
    const double s = gather ? c->bw_all_gather : c->bw_reduce_scatter;
    return s > 0 ? s : 1;
  }
  return by_size_at(c->share_bytes, gather ? c->share_gather : c->share_scatter, c->n_share_sizes,
                    bytes);
}

/* "collective_bandwidth.by_size": [[bytes, all_gather, reduce_scatter],
 * ...], 2 to TL_LINK_SIZES triples, sizes rising, every number above 0. */
static tl_status parse_shares(const char* src, const json_t* a, tl_cluster* c) {
  const size_t n = json_is_array(a) ? json_array_size(a) : 0;
  if (n < 2 || n > TL_LINK_SIZES)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: collective_bandwidth.by_size: expected 2 to %d triples [bytes, "
                   "all_gather, reduce_scatter], got %s",
                   src, TL_LINK_SIZES, json_is_array(a) ? "another count" : tl_json_kind(a));
  for (size_t i = 0; i < n; i++) {
    const json_t* t = json_array_get(a, i);
    bool ok = json_is_array(t) && json_array_size(t) == 3;
    double v[3] = {0, 0, 0};
    for (size_t k = 0; ok && k < 3; k++) {
      const json_t* x = json_array_get(t, k);
      ok = json_is_number(x) && (v[k] = json_number_value(x)) > 0;
    }
    if (!ok || (i > 0 && v[0] <= c->share_bytes[i - 1]))
      return TL_ERRF(TL_ERR_CONFIG,
                     "%s: collective_bandwidth.by_size[%zu]: expected [bytes, all_gather, "
                     "reduce_scatter], each above 0, the sizes rising",
                     src, i);
    c->share_bytes[i] = v[0], c->share_gather[i] = v[1], c->share_scatter[i] = v[2];
  }
  c->n_share_sizes = (int)n;
  return TL_OK;
}

/* "bandwidth_by_size": [[bytes, bytes/s], ...], 2 to TL_LINK_SIZES pairs,
 * sizes rising, every number above 0. */
static tl_status parse_sizes(const char* src, const char* key, const json_t* a,
                             struct tl_link* out) {
  const size_t n = json_is_array(a) ? json_array_size(a) : 0;
  if (n < 2 || n > TL_LINK_SIZES)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: %s.bandwidth_by_size: expected 2 to %d pairs [bytes, bytes/s], got %s", src,
                   key, TL_LINK_SIZES, json_is_array(a) ? "another count" : tl_json_kind(a));
  for (size_t i = 0; i < n; i++) {
    const json_t* p = json_array_get(a, i);
    const json_t *b = json_array_get(p, 0), *w = json_array_get(p, 1);
    if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_number(b) || !json_is_number(w) ||
        json_number_value(b) <= 0 || json_number_value(w) <= 0 ||
        (i > 0 && json_number_value(b) <= out->size_bytes[i - 1]))
      return TL_ERRF(TL_ERR_CONFIG,
                     "%s: %s.bandwidth_by_size[%zu]: expected [bytes, bytes/s], both above 0, "
                     "the sizes rising",
                     src, key, i);
    out->size_bytes[i] = json_number_value(b);
    out->size_bandwidth[i] = json_number_value(w);
  }
  out->n_sizes = (int)n;
  return TL_OK;
}

static tl_status parse_link(const char* src, const json_t* root, const char* key,
                            struct tl_link* out) {
  static const char* const keys[] = {"bandwidth", "latency", "bandwidth_by_size", NULL};
  const json_t* o = json_object_get(root, key);
  if (!o || !json_is_object(o))
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: %s: expected an object {\"bandwidth\": bytes/s, \"latency\": s}, got %s",
                   src, key, o ? tl_json_kind(o) : "nothing");
  char path[32];
  snprintf(path, sizeof path, "%s.", key);
  TL_CHECK(known_keys(src, o, path, keys));
  TL_CHECK(number(src, o, path, "bandwidth", -1, 0, &out->bandwidth));
  TL_CHECK(number(src, o, path, "latency", -1, 1, &out->latency));
  const json_t* sizes = json_object_get(o, "bandwidth_by_size");
  return sizes ? parse_sizes(src, key, sizes, out) : TL_OK;
}

/* A table of efficiencies by size ("gemm_efficiency": m, n, k;
 * "attention_efficiency_table": head_dim, seq): `n_axes` named axes of 1 to
 * TL_GEMM_AXIS_MAX sizes each, rising, and the fractions in (0, 1], the
 * first axis major. A table of two axes keeps k = {1}. */
struct table_form {
  const char* name;
  const char* axes[3];
  int n_axes;
};

static tl_status table_axis(const char* src, const json_t* o, const char* name, const char* key,
                            double* out, int* n) {
  const json_t* a = json_object_get(o, key);
  if (!a || !json_is_array(a) || json_array_size(a) < 1 || json_array_size(a) > TL_GEMM_AXIS_MAX)
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s.%s: expected an array of 1 to %d sizes, got %s", src,
                   name, key, TL_GEMM_AXIS_MAX, a ? tl_json_kind(a) : "nothing");
  *n = (int)json_array_size(a);
  for (int i = 0; i < *n; i++) {
    const json_t* v = json_array_get(a, (size_t)i);
    if (!json_is_number(v))
      return TL_ERRF(TL_ERR_CONFIG, "%s: %s.%s[%d]: expected a size > 0, got %s", src, name, key, i,
                     tl_json_kind(v));
    double x = json_number_value(v);
    if (x <= 0 || (i > 0 && x <= out[i - 1]))
      return TL_ERRF(TL_ERR_CONFIG, "%s: %s.%s[%d] = %g: expected sizes > 0, each above the last",
                     src, name, key, i, x);
    out[i] = x;
  }
  return TL_OK;
}

static tl_status parse_table(const char* src, const json_t* o, const struct table_form* f,
                             struct tl_gemm_table* t) {
  const char* keys[6] = {NULL};
  char shape[128] = "", order[64] = "", path[64];
  for (int a = 0; a < f->n_axes; a++) {
    keys[a] = f->axes[a];
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "\"%s\": [...], ", f->axes[a]);
    snprintf(order + strlen(order), sizeof order - strlen(order), "%s%s", a ? " x " : "",
             f->axes[a]);
  }
  keys[f->n_axes] = "efficiency", keys[f->n_axes + 1] = "comment";
  if (!json_is_object(o))
    return TL_ERRF(TL_ERR_CONFIG, "%s: %s: expected an object {%s\"efficiency\": [...]}, got %s",
                   src, f->name, shape, tl_json_kind(o));
  snprintf(path, sizeof path, "%s.", f->name);
  TL_CHECK(known_keys(src, o, path, keys));
  double* axis[3] = {t->m, t->n, t->k};
  int* count[3] = {&t->n_m, &t->n_n, &t->n_k};
  t->k[0] = 1, t->n_k = 1;
  for (int a = 0; a < f->n_axes; a++)
    TL_CHECK(table_axis(src, o, f->name, f->axes[a], axis[a], count[a]));
  const json_t* e = json_object_get(o, "efficiency");
  const size_t want = (size_t)t->n_m * t->n_n * t->n_k;
  if (!e || !json_is_array(e) || json_array_size(e) != want)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: %s.efficiency: expected an array of %zu fractions (%s, %s-major), got %s "
                   "of %zu",
                   src, f->name, want, order, f->axes[0], e ? tl_json_kind(e) : "nothing",
                   e && json_is_array(e) ? json_array_size(e) : 0);
  for (size_t i = 0; i < want; i++) {
    const json_t* v = json_array_get(e, i);
    if (!json_is_number(v))
      return TL_ERRF(TL_ERR_CONFIG, "%s: %s.efficiency[%zu]: expected a fraction in (0, 1], got %s",
                     src, f->name, i, tl_json_kind(v));
    double x = json_number_value(v);
    if (!(x > 0 && x <= 1))
      return TL_ERRF(TL_ERR_CONFIG, "%s: %s.efficiency[%zu] = %g: expected a fraction in (0, 1]",
                     src, f->name, i, x);
    t->eff[i] = x;
  }
  return TL_OK;
}

static const struct table_form kGemmForm = {"gemm_efficiency", {"m", "n", "k"}, 3};
static const struct table_form kAttentionForm = {
    "attention_efficiency_table", {"head_dim", "seq", NULL}, 2};

static tl_status parse_root(const char* src, const json_t* root, tl_cluster* c) {
  static const char* const keys[] = {"name",
                                     "comment",
                                     "device",
                                     "nodes",
                                     "devices_per_node",
                                     "device_memory_bytes",
                                     "peak_flops",
                                     "intra_node",
                                     "inter_node",
                                     "compute_efficiency",
                                     "efficiency_half_flops",
                                     "attention_efficiency",
                                     "gemm_efficiency",
                                     "attention_efficiency_table",
                                     "collective_bandwidth",
                                     "reserve_bytes",
                                     "allocator_overhead",
                                     "memory_bandwidth",
                                     "cores_per_node",
                                     "shared_core_speed",
                                     NULL};
  static const char* const peak_keys[] = {"fp32", "bf16", NULL};
  if (!json_is_object(root))
    return TL_ERRF(TL_ERR_CONFIG, "%s: expected a JSON object, got %s", src, tl_json_kind(root));
  TL_CHECK(known_keys(src, root, "", keys));
  const json_t* v = json_object_get(root, "name");
  if (v && !json_is_string(v))
    return TL_ERRF(TL_ERR_CONFIG, "%s: name: expected a string, got %s", src, tl_json_kind(v));
  snprintf(c->name, sizeof c->name, "%s", v ? json_string_value(v) : "cluster");
  v = json_object_get(root, "comment");
  if (v && !json_is_string(v))
    return TL_ERRF(TL_ERR_CONFIG, "%s: comment: expected a string, got %s", src, tl_json_kind(v));
  v = json_object_get(root, "device");
  c->device = TL_DEVICE_CUDA;
  if (v) {
    const char* d = json_is_string(v) ? json_string_value(v) : NULL;
    if (!d || (strcmp(d, "cpu") != 0 && strcmp(d, "cuda") != 0))
      return TL_ERRF(TL_ERR_CONFIG, "%s: device: expected \"cpu\" or \"cuda\", got %s", src,
                     d ? d : tl_json_kind(v));
    c->device = strcmp(d, "cpu") == 0 ? TL_DEVICE_CPU : TL_DEVICE_CUDA;
  }
  TL_CHECK(integer(src, root, "nodes", &c->nodes));
  TL_CHECK(integer(src, root, "devices_per_node", &c->devices_per_node));
  TL_CHECK(number(src, root, "", "device_memory_bytes", -1, 0, &c->device_memory_bytes));
  const json_t* pk = json_object_get(root, "peak_flops");
  if (!pk || !json_is_object(pk))
    return TL_ERRF(
        TL_ERR_CONFIG,
        "%s: peak_flops: expected an object {\"fp32\": FLOP/s, \"bf16\": FLOP/s}, got %s", src,
        pk ? tl_json_kind(pk) : "nothing");
  TL_CHECK(known_keys(src, pk, "peak_flops.", peak_keys));
  TL_CHECK(number(src, pk, "peak_flops.", "fp32", -1, 0, &c->peak_fp32));
  TL_CHECK(number(src, pk, "peak_flops.", "bf16", 0, 1, &c->peak_bf16));
  TL_CHECK(parse_link(src, root, "intra_node", &c->intra));
  TL_CHECK(parse_link(src, root, "inter_node", &c->inter));
  TL_CHECK(number(src, root, "", "compute_efficiency", TL_CLUSTER_DEFAULT_EFFICIENCY, 0,
                  &c->efficiency));
  if (c->efficiency > 1)
    return TL_ERRF(TL_ERR_CONFIG, "%s: compute_efficiency = %g: expected a fraction in (0, 1]", src,
                   c->efficiency);
  TL_CHECK(number(src, root, "", "efficiency_half_flops", 0, 1, &c->efficiency_half_flops));
  TL_CHECK(
      number(src, root, "", "attention_efficiency", c->efficiency, 0, &c->attention_efficiency));
  if (c->attention_efficiency > 1)
    return TL_ERRF(TL_ERR_CONFIG, "%s: attention_efficiency = %g: expected a fraction in (0, 1]",
                   src, c->attention_efficiency);
  const json_t* gt = json_object_get(root, "gemm_efficiency");
  if (gt) TL_CHECK(parse_table(src, gt, &kGemmForm, &c->gemm));
  const json_t* at = json_object_get(root, "attention_efficiency_table");
  if (at) TL_CHECK(parse_table(src, at, &kAttentionForm, &c->attention));
  c->bw_all_gather = c->bw_reduce_scatter = c->bw_send_recv = 1;
  const json_t* cb = json_object_get(root, "collective_bandwidth");
  if (cb) {
    static const char* const bw_keys[] = {"all_gather", "reduce_scatter", "send_recv",
                                          "by_size",    "comment",        NULL};
    if (!json_is_object(cb))
      return TL_ERRF(TL_ERR_CONFIG,
                     "%s: collective_bandwidth: expected an object {\"all_gather\": x, "
                     "\"reduce_scatter\": x, \"send_recv\": x} (shares of the links' "
                     "bandwidth), got %s",
                     src, tl_json_kind(cb));
    TL_CHECK(known_keys(src, cb, "collective_bandwidth.", bw_keys));
    TL_CHECK(number(src, cb, "collective_bandwidth.", "all_gather", 1, 0, &c->bw_all_gather));
    TL_CHECK(
        number(src, cb, "collective_bandwidth.", "reduce_scatter", 1, 0, &c->bw_reduce_scatter));
    TL_CHECK(number(src, cb, "collective_bandwidth.", "send_recv", 1, 0, &c->bw_send_recv));
    const json_t* by = json_object_get(cb, "by_size");
    if (by) TL_CHECK(parse_shares(src, by, c));
  }
  TL_CHECK(
      number(src, root, "", "reserve_bytes", TL_CLUSTER_DEFAULT_RESERVE, 1, &c->reserve_bytes));
  TL_CHECK(number(src, root, "", "allocator_overhead", 0, 1, &c->allocator_overhead));
  /* absent: 0, the optimizer priced by its FLOPs alone; present: > 0 */
  TL_CHECK(number(src, root, "", "memory_bandwidth", 0, 0, &c->memory_bandwidth));
  if (json_object_get(root, "cores_per_node")) {
    if (c->device != TL_DEVICE_CPU)
      return TL_ERRF(TL_ERR_CONFIG,
                     "%s: cores_per_node: only a cpu cluster's ranks share the cores they compute "
                     "on (device is \"cuda\"); remove it",
                     src);
    TL_CHECK(integer(src, root, "cores_per_node", &c->cores_per_node));
  }
  c->rated_ranks_per_node = c->devices_per_node;
  const json_t* ss = json_object_get(root, "shared_core_speed");
  if (ss) TL_CHECK(parse_shared_speed(src, ss, c));
  if (c->allocator_overhead > 1)
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: allocator_overhead = %g: expected a fraction of the tensors' bytes in "
                   "[0, 1]",
                   src, c->allocator_overhead);
  return TL_OK;
}

tl_status tl_cluster_parse(const char* text, const char* src, tl_cluster* out) {
  memset(out, 0, sizeof *out);
  json_error_t err;
  json_t* root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (!root) return TL_ERRF(TL_ERR_CONFIG, "%s:%d:%d: %s", src, err.line, err.column, err.text);
  tl_cluster c;
  memset(&c, 0, sizeof c);
  tl_status st = parse_root(src, root, &c);
  json_decref(root);
  if (st == TL_OK) *out = c;
  return st;
}

tl_status tl_cluster_load(const char* path, tl_cluster* out) {
  memset(out, 0, sizeof *out);
  FILE* f = fopen(path, "rb");
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open cluster file %s: %s", path, strerror(errno));
  char* buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 16384;
      char* nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return TL_ERRF(TL_ERR_NOMEM, "reading cluster file %s", path);
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, 4096, f);
    n += got;
    if (got < 4096) break;
  }
  const int read_errno = ferror(f) ? (errno ? errno : EIO) : 0; /* a directory: EISDIR */
  fclose(f);
  if (read_errno) {
    free(buf);
    return TL_ERRF(TL_ERR_IO, "cannot read cluster file %s: %s", path, strerror(read_errno));
  }
  buf[n] = 0;
  tl_status st = tl_cluster_parse(buf, path, out);
  free(buf);
  return st;
}
