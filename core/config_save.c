/* config_save.c — writes a config as JSON: every field its model kind
 * reads, in the table's order, atomically (core/atomic_file.h: a temporary
 * file in the same directory, then rename), so a reader never sees half a
 * file and a failed write leaves the old one.
 *
 * Numbers are written in the shortest form that reads back to the same bits
 * (a float's 1e-3 is "0.001", not "0.0010000000474974513"), so a saved
 * config is both exact and pleasant to read. The config is validated first:
 * what tl_config_save writes, tl_config_load accepts. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/atomic_file.h"
#include "core/config.h"
#include "core/config_impl.h"

/* "1e-08" -> "1e-8": the same number, as a person would write it. */
static void tidy_exponent(char* buf) {
  char* e = strchr(buf, 'e');
  if (!e) return;
  char* digits = e + 1 + (e[1] == '-' || e[1] == '+');
  char* first = digits;
  while (*first == '0' && first[1]) first++;
  memmove(digits, first, strlen(first) + 1);
  if (e[1] == '+') memmove(e + 1, e + 2, strlen(e + 2) + 1);
}

/* The shortest %g form of x that reads back (as the loader reads it) to x. */
static void format_float(float x, char* buf, size_t size) {
  /* a whole number as one (500000, not 5e5) */
  if (x == (float)(long long)x && x > -1e9f && x < 1e9f) {
    snprintf(buf, size, "%lld", (long long)x);
    return;
  }
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, size, "%.*g", prec, (double)x);
    if ((float)strtod(buf, NULL) == x) break;
  }
  tidy_exponent(buf);
}

static void format_double(double x, char* buf, size_t size) {
  /* a whole number as one (1800, not 1.8e3) */
  if (x == (double)(long long)x && x > -1e9 && x < 1e9) {
    snprintf(buf, size, "%lld", (long long)x);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  tidy_exponent(buf);
}

/* A JSON string literal, escaped by jansson; NULL if `s` is not UTF-8. */
static char* quote(const char* s) {
  json_t* j = json_string(s);
  if (!j) return NULL;
  char* out = json_dumps(j, JSON_ENCODE_ANY);
  json_decref(j);
  return out;
}

static tl_status write_value(FILE* f, const struct tl__config_field* fd,
                             const struct tl_config* cfg) {
  const char* at = (const char*)cfg + fd->offset;
  char num[64];
  switch (fd->type) {
    case TL__FIELD_INT:
      fprintf(f, "%d", *(const int*)at);
      break;
    case TL__FIELD_U64:
      fprintf(f, "%llu", (unsigned long long)*(const uint64_t*)at);
      break;
    case TL__FIELD_FLOAT:
      format_float(*(const float*)at, num, sizeof num);
      fputs(num, f);
      break;
    case TL__FIELD_DOUBLE:
      format_double(*(const double*)at, num, sizeof num);
      fputs(num, f);
      break;
    case TL__FIELD_BOOL:
      fputs(*(const bool*)at ? "true" : "false", f);
      break;
    case TL__FIELD_STRING: {
      char* q = quote(at);
      if (!q)
        return TL_ERRF(TL_ERR_CONFIG, "%s.%s: not valid UTF-8, cannot be written as JSON",
                       fd->section, fd->key);
      fputs(q, f);
      free(q);
      break;
    }
    case TL__FIELD_ENUM:
      fprintf(f, "\"%s\"", fd->names[*(const int*)at]);
      break;
    case TL__FIELD_ORDER: {
      const tl_axis* o = (const tl_axis*)at;
      fprintf(f, "[\"%s\", \"%s\", \"%s\", \"%s\"]", tl__axis_names[o[0]], tl__axis_names[o[1]],
              tl__axis_names[o[2]], tl__axis_names[o[3]]);
      break;
    }
    case TL__FIELD_SIZES:
      fputc('[', f);
      for (int i = 0; i <= cfg->model.n_mlp_layers; i++)
        fprintf(f, "%s%d", i ? ", " : "", cfg->model.mlp_sizes[i]);
      fputc(']', f);
      break;
    case TL__FIELD_ROPE_SCALING: {
      const struct tl_rope_scaling* r = (const struct tl_rope_scaling*)at;
      if (!(r->factor > 0)) {
        fputs("null", f);
        break;
      }
      char lo[32], hi[32];
      format_float(r->factor, num, sizeof num);
      format_float(r->low_freq_factor, lo, sizeof lo);
      format_float(r->high_freq_factor, hi, sizeof hi);
      fprintf(f,
              "{\"factor\": %s, \"low_freq_factor\": %s, \"high_freq_factor\": %s, "
              "\"original_max_position_embeddings\": %d}",
              num, lo, hi, r->original_max_position_embeddings);
      break;
    }
    case TL__FIELD_STAGES:
      fputc('[', f);
      for (int i = 0; i < cfg->schedule.n_stage_layers; i++)
        fprintf(f, "%s%d", i ? ", " : "", cfg->schedule.stage_layers[i]);
      fputc(']', f);
      break;
  }
  return TL_OK;
}

static tl_status write_all(FILE* f, const struct tl_config* cfg) {
  fputs("{", f);
  for (int s = 0; tl__config_sections[s]; s++) {
    fprintf(f, "%s\n  \"%s\": {", s ? "," : "", tl__config_sections[s]);
    int n = 0;
    for (int i = 0; i < tl__config_n_fields; i++) {
      const struct tl__config_field* fd = &tl__config_fields[i];
      if (strcmp(fd->section, tl__config_sections[s]) != 0) continue;
      if (!tl__field_read_by(fd, cfg->model.kind)) continue;
      fprintf(f, "%s\n    \"%s\": ", n++ ? "," : "", fd->key);
      TL_CHECK(write_value(f, fd, cfg));
    }
    fputs("\n  }", f);
  }
  fputs("\n}\n", f);
  return TL_OK;
}

tl_status tl_config_validate(const struct tl_config* cfg, const char* source) {
  struct tl__problems p;
  memset(&p, 0, sizeof p);
  tl__config_validate(cfg, NULL, &p);
  return tl__problems_status(&p, source);
}

tl_status tl_config_save(const struct tl_config* cfg, const char* path) {
  struct tl__problems p;
  memset(&p, 0, sizeof p);
  tl__config_validate(cfg, NULL, &p);
  TL_CHECK(tl__problems_status(&p, "(to be saved)"));

  tl_atomic_file af;
  TL_CHECK(tl_atomic_file_open(&af, path));
  tl_status st = write_all(af.f, cfg);
  if (st == TL_OK && ferror(af.f))
    st = TL_ERRF(TL_ERR_IO, "cannot write '%s': %s", af.tmp, strerror(errno));
  if (st != TL_OK) {
    tl_atomic_file_abort(&af);
    return st;
  }
  return tl_atomic_file_commit(&af);
}
