/* corpus.c — the default corpus from Debian's fortunes (see corpus.h). */
#include "launcher/data/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launcher/data/tokens.h"

static int by_name(const void* a, const void* b) {
  return strcmp(*(char* const*)a, *(char* const*)b);
}

/* Plain fortune files: no extension (skips .dat indexes and .u8 links). */
static int is_fortune_file(const char* dir, const char* name) {
  if (name[0] == '.' || strchr(name, '.')) return 0;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

tl_status tl_corpus_text(char** text_out, size_t* len_out, size_t* split_out) {
  *text_out = NULL, *len_out = 0, *split_out = 0;
  DIR* d = opendir(TL_CORPUS_DIR);
  if (!d)
    return TL_ERRF(TL_ERR_IO,
                   "the default corpus needs Debian's 'fortunes' package (%s: %s); run "
                   "tools/setup.sh",
                   TL_CORPUS_DIR, strerror(errno));
  char* names[512];
  int n_names = 0;
  struct dirent* e;
  while ((e = readdir(d)) && n_names < 512)
    if (is_fortune_file(TL_CORPUS_DIR, e->d_name)) names[n_names++] = strdup(e->d_name);
  closedir(d);
  qsort(names, (size_t)n_names, sizeof names[0], by_name);
  /* concatenate, dropping the '%' lines that separate fortunes */
  size_t cap = 1 << 20, len = 0;
  char* text = malloc(cap);
  tl_status st = text ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory building the corpus");
  for (int i = 0; i < n_names && st == TL_OK; i++) {
    char path[1024], *data = NULL;
    size_t size = 0;
    snprintf(path, sizeof path, "%s/%s", TL_CORPUS_DIR, names[i]);
    st = tl__read_file(path, &data, &size);
    for (size_t p = 0; st == TL_OK && p < size;) {
      size_t q = p;
      while (q < size && data[q] != '\n') q++;
      size_t line = q - p + (q < size); /* with its newline */
      int separator = (q - p == 1 && data[p] == '%');
      if (!separator) {
        if (len + line > cap) {
          char* bigger = realloc(text, cap = 2 * (len + line));
          if (!bigger) {
            st = TL_ERRF(TL_ERR_NOMEM, "out of memory building the corpus");
            break;
          }
          text = bigger;
        }
        memcpy(text + len, data + p, line);
        len += line;
      }
      p += line;
    }
    free(data);
  }
  for (int i = 0; i < n_names; i++) free(names[i]);
  if (st == TL_OK && len < 4096)
    st = TL_ERRF(TL_ERR_IO, "%s holds only %zu bytes of text; is 'fortunes' installed?",
                 TL_CORPUS_DIR, len);
  if (st != TL_OK) {
    free(text);
    return st;
  }
  size_t split = len * 9 / 10;
  while (split < len && text[split - 1] != '\n') split++;
  *text_out = text, *len_out = len, *split_out = split;
  return TL_OK;
}

tl_status tl_corpus_build(const char* train_path, const char* val_path, int64_t* n_train,
                          int64_t* n_val) {
  char* text;
  size_t len, split;
  TL_CHECK(tl_corpus_text(&text, &len, &split));
  uint16_t* tokens = NULL;
  tl_status st = tl__bytes_to_tokens(text, len, &tokens);
  if (st == TL_OK) st = tl_tokens_write(train_path, tokens, (int64_t)split);
  if (st == TL_OK) st = tl_tokens_write(val_path, tokens + split, (int64_t)(len - split));
  if (st == TL_OK) *n_train = (int64_t)split, *n_val = (int64_t)(len - split);
  free(tokens);
  free(text);
  return st;
}
