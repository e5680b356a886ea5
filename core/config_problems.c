/* config_problems.c — what is wrong with a config, said so a person can
 * fix it: problems collected a line each into one status, and for an
 * unknown key or section the likely one meant (a key in the wrong section,
 * a typo by edit distance) or the list of what is there (config_impl.h). */
#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/config_impl.h"

/* ---- problems ------------------------------------------------------------ */

void tl__problem(struct tl__problems* p, const char* fmt, ...) {
  p->n++;
  size_t room = sizeof p->text - p->len;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = strlen(line);
  if (len + 2 > room) {
    p->dropped++;
    return;
  }
  if (p->len) p->text[p->len++] = '\n';
  memcpy(p->text + p->len, line, len + 1);
  p->len += len;
}

tl_status tl__problems_status(const struct tl__problems* p, const char* source) {
  if (p->n == 0) return TL_OK;
  char more[64] = "";
  if (p->dropped) snprintf(more, sizeof more, "\n... and %d more", p->dropped);
  return TL_ERRF(TL_ERR_CONFIG, "invalid config %s: %d problem%s:\n%s%s", source, p->n,
                 p->n == 1 ? "" : "s", p->text, more);
}

/* ---- suggestions ----------------------------------------------------------- */

int tl__edit_distance(const char* a, const char* b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 64;
  int d[64][64];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  }
  return d[n][m];
}

/* The candidate closest to `word`, or NULL when none is close enough to be
 * a likely typo: at most max(2, len/3) edits, or one contains the other. */
const char* tl__closest(const char* word, const char* const* cands, int n) {
  const char* best = NULL;
  int best_d = INT_MAX;
  for (int i = 0; i < n; i++) {
    int d = tl__edit_distance(word, cands[i]);
    if (d < best_d) best_d = d, best = cands[i];
  }
  if (!best) return NULL;
  int len = (int)strlen(word), limit = len / 3 > 2 ? len / 3 : 2;
  if (best_d <= limit && best_d < len) return best;
  for (int i = 0; i < n; i++)
    if (len >= 3 && (strstr(cands[i], word) || strstr(word, cands[i]))) return cands[i];
  return NULL;
}

void tl__config_unknown_key(const char* section, const char* key, struct tl__problems* p) {
  /* 1. a key written in the wrong section */
  for (int i = 0; i < tl__config_n_fields; i++) {
    const struct tl__config_field* f = &tl__config_fields[i];
    if (strcmp(f->key, key) == 0 && strcmp(f->section, section) != 0) {
      tl__problem(p, "%s.%s: unknown key; did you mean \"%s.%s\"?", section, key, f->section,
                  f->key);
      return;
    }
  }
  if (strcmp(section, "model") == 0 && strcmp(key, "n_mlp_layers") == 0) {
    tl__problem(p,
                "model.n_mlp_layers: unknown key; the number of MLP layers is the length of "
                "model.mlp_sizes minus 1");
    return;
  }
  /* 2. a typo of one of this section's keys */
  const char* keys[64];
  int n = 0;
  char list[512] = "";
  size_t len = 0;
  for (int i = 0; i < tl__config_n_fields && n < 64; i++) {
    if (strcmp(tl__config_fields[i].section, section) != 0) continue;
    keys[n] = tl__config_fields[i].key;
    if (len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", n ? ", " : "", keys[n]);
    n++;
  }
  const char* near = tl__closest(key, keys, n);
  if (near)
    tl__problem(p, "%s.%s: unknown key; did you mean \"%s\"?", section, key, near);
  else
    tl__problem(p, "%s.%s: unknown key; %s takes: %s", section, key, section, list);
}

void tl__config_unknown_section(const char* key, const json_t* v, struct tl__problems* p) {
  char list[256];
  int n = 0;
  while (tl__config_sections[n]) n++;
  const char* near = tl__closest(key, tl__config_sections, n);
  if (near) {
    tl__problem(p, "%s: unknown section; did you mean \"%s\"?", key, near);
    return;
  }
  if (!json_is_object(v)) {
    for (int i = 0; i < tl__config_n_fields; i++)
      if (strcmp(tl__config_fields[i].key, key) == 0) {
        tl__problem(p,
                    "%s: unknown section; did you mean \"%s.%s\" (keys go inside their section)?",
                    key, tl__config_fields[i].section, key);
        return;
      }
  }
  size_t len = 0;
  list[0] = '\0';
  for (int i = 0; tl__config_sections[i]; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "",
                            tl__config_sections[i]);
  tl__problem(p, "%s: unknown section; the sections are: %s", key, list);
}
