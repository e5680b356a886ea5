/* data_cmd.c — `trellis data`: text into llm.c token files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launcher/cli/cli.h"
#include "launcher/data/corpus.h"
#include "launcher/data/tokens.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis data TEXT OUT.bin\n"
          "       trellis data --corpus DIR\n"
          "\n"
          "The first form turns any text file into an llm.c token file with the\n"
          "byte-level tokenizer (one token per byte, vocabulary 256). The second builds\n"
          "the default corpus from Debian's 'fortunes' package (%s) as\n"
          "DIR/fortunes_train.bin (first 90%%) and DIR/fortunes_val.bin (last 10%%).\n",
          TL_CORPUS_DIR);
}

int tl_cli_data(int argc, char** argv) {
  if (argc == 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc == 2 && strcmp(argv[0], "--corpus") == 0) {
    const char* dir = argv[1];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "trellis data: cannot create directory '%s': %s\n", dir, strerror(errno));
      return 1;
    }
    char train[1024], val[1024];
    snprintf(train, sizeof train, "%s/fortunes_train.bin", dir);
    snprintf(val, sizeof val, "%s/fortunes_val.bin", dir);
    int64_t nt = 0, nv = 0;
    if (tl_corpus_build(train, val, &nt, &nv) != TL_OK) {
      fprintf(stderr, "trellis data: %s\n", tl_last_error());
      return 1;
    }
    printf("wrote %s (%lld tokens) and %s (%lld tokens)\n", train, (long long)nt, val,
           (long long)nv);
    return 0;
  }
  if (argc != 2 || argv[0][0] == '-' || argv[1][0] == '-') {
    usage(stderr);
    return 2;
  }
  uint16_t* tokens = NULL;
  int64_t n = 0;
  if (tl_tokens_from_text_file(argv[0], &tokens, &n) != TL_OK ||
      tl_tokens_write(argv[1], tokens, n) != TL_OK) {
    fprintf(stderr, "trellis data: %s\n", tl_last_error());
    free(tokens);
    return 1;
  }
  free(tokens);
  printf("wrote %s: %lld tokens (byte-level, vocabulary 256)\n", argv[1], (long long)n);
  return 0;
}
