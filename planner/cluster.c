/* cluster.c — reading a cluster spec (jansson). Strict like the training
 * config: every key known, every number positive, each error naming the
 * JSON path, the value found and what was expected. */
#include "planner/cluster.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_kind.h"

double tl_cluster_peak(const tl_cluster* c, tl_dtype dtype) {
  return dtype == TL_BF16 || dtype == TL_F16 ? c->peak_bf16 : c->peak_fp32;
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
      char list[256] = "";
      for (int i = 0; keys[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", keys[i]);
      return TL_ERRF(TL_ERR_CONFIG, "%s: %s%s: unknown key; expected one of: %s", src, path, k,
                     list);
    }
  }
  (void)v;
  return TL_OK;
}

static tl_status parse_link(const char* src, const json_t* root, const char* key,
                            struct tl_link* out) {
  static const char* const keys[] = {"bandwidth", "latency", NULL};
  const json_t* o = json_object_get(root, key);
  if (!o || !json_is_object(o))
    return TL_ERRF(TL_ERR_CONFIG,
                   "%s: %s: expected an object {\"bandwidth\": bytes/s, \"latency\": s}, got %s",
                   src, key, o ? tl_json_kind(o) : "nothing");
  char path[32];
  snprintf(path, sizeof path, "%s.", key);
  TL_CHECK(known_keys(src, o, path, keys));
  TL_CHECK(number(src, o, path, "bandwidth", -1, 0, &out->bandwidth));
  return number(src, o, path, "latency", -1, 1, &out->latency);
}

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
                                     "reserve_bytes",
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
  TL_CHECK(number(src, root, "", "attention_efficiency", c->efficiency, 0,
                  &c->attention_efficiency));
  if (c->attention_efficiency > 1)
    return TL_ERRF(TL_ERR_CONFIG, "%s: attention_efficiency = %g: expected a fraction in (0, 1]",
                   src, c->attention_efficiency);
  return number(src, root, "", "reserve_bytes", TL_CLUSTER_DEFAULT_RESERVE, 1, &c->reserve_bytes);
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
  if (!f) return TL_ERRF(TL_ERR_IO, "cannot open cluster file %s", path);
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
  fclose(f);
  buf[n] = 0;
  tl_status st = tl_cluster_parse(buf, path, out);
  free(buf);
  return st;
}
