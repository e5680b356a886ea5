/* config_impl.h — what the config's parser (config.c), validator
 * (config_check.c) and writer (config_save.c) share: one table of fields.
 *
 * Every JSON key is one row: its section, its name (the struct field's name),
 * its type, where it lives in struct tl_config and the values it allows. The
 * parser, the range checks, the writer and the "did you mean" suggestions
 * all walk this table, so a field cannot be parsed but not saved, or saved
 * but not checked. docs/config.md documents the same rows (a test checks that
 * every key appears there). */
#ifndef TL_CORE_CONFIG_IMPL_H
#define TL_CORE_CONFIG_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TL__FIELD_INT,         /* int; JSON integer */
  TL__FIELD_U64,         /* uint64_t; JSON integer 0 .. 2^63-1 */
  TL__FIELD_FLOAT,       /* float; JSON number */
  TL__FIELD_DOUBLE,      /* double; JSON number */
  TL__FIELD_BOOL,        /* bool; JSON true / false */
  TL__FIELD_STRING,      /* char[TL_PATH_MAX]; JSON string */
  TL__FIELD_ENUM,        /* an enum stored as int; JSON string from `names` */
  TL__FIELD_ORDER,       /* tl_axis[TL_N_AXES]; JSON array of the axis names (cp may be left out) */
  TL__FIELD_SIZES,       /* model.mlp_sizes (+ n_mlp_layers); JSON array of integers */
  TL__FIELD_STAGES,      /* schedule.stage_layers (+ n_stage_layers); JSON array, may be empty */
  TL__FIELD_ROPE_SCALING /* struct tl_rope_scaling; JSON null or an object (config.c) */
} tl__field_type;

struct tl__config_field {
  const char* section; /* "model" */
  const char* key;     /* "n_heads" */
  tl__field_type type;
  size_t offset; /* of the value inside struct tl_config */
  /* Numbers: allowed range, inclusive unless *_open. hi = 0 with no_hi: unbounded. */
  double lo, hi;
  bool lo_open, hi_open, no_hi;
  const char* const* names; /* TL__FIELD_ENUM: names by enum value, NULL-terminated */
  /* 0: any model; else a mask of (1 << tl_model_kind): only those model
   * kinds read the field, so a config of another kind that names it is
   * refused (and it is not saved) */
  unsigned kinds;
};

extern const struct tl__config_field tl__config_fields[];
extern const int tl__config_n_fields;
/* The sections in file order, NULL-terminated. */
extern const char* const tl__config_sections[];
/* "dp", "tp", "pp" by tl_axis. */
extern const char* const tl__axis_names[];

/* Problems found in one config, one line each, for a single tl_status. */
struct tl__problems {
  char text[7168];
  size_t len;
  int n;       /* problems found */
  int dropped; /* found but not written (text full) */
};

void tl__problem(struct tl__problems* p, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* TL_OK when no problems, else TL_ERR_CONFIG with
 * "<source>: N problem(s):\n<line>\n<line>..." recorded. */
tl_status tl__problems_status(const struct tl__problems* p, const char* source);

/* Range checks of every field, then the cross-field rules, on parsed values.
 * bad[i] (may be NULL) marks field i as already reported (wrong JSON type):
 * checks that read it are skipped rather than reported twice. */
void tl__config_validate(const struct tl_config* cfg, const bool* bad, struct tl__problems* p);

/* Whether a model of `kind` reads field f. */
static inline bool tl__field_read_by(const struct tl__config_field* f, tl_model_kind kind) {
  return f->kinds == 0 || (f->kinds & (1u << kind)) != 0;
}

/* Describes field f's allowed values ("an integer >= 1") into buf. */
const char* tl__field_expect(const struct tl__config_field* f, char* buf, size_t size);

/* Optimal-string-alignment distance (edits incl. adjacent swaps). */
int tl__edit_distance(const char* a, const char* b);

/* The candidate closest to `word`, or NULL when none is close enough to be
 * a likely typo. */
const char* tl__closest(const char* word, const char* const* cands, int n);

/* An unknown key of `section`, or an unknown top-level key (its value v),
 * reported with the likely one meant or the list of those there are. */
void tl__config_unknown_key(const char* section, const char* key, struct tl__problems* p);
void tl__config_unknown_section(const char* key, const json_t* v, struct tl__problems* p);

#ifdef __cplusplus
}
#endif

#endif
