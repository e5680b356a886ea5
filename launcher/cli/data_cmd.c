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
          "usage: trellis data TEXT OUT.bin [--uint32]\n"
          "       trellis data --corpus DIR\n"
          "\n"
          "The first form turns any text file into an llm.c token file with the\n"
          "byte-level tokenizer (one token per byte, vocabulary 256): llm.c's GPT-2\n"
          "format (uint16 tokens), or with --uint32 its Llama-3 format (uint32 tokens,\n"
          "what a vocabulary past 65,536 needs). The second builds\n"
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
      fprintf(stderr, "trellis data: %s\n", tl_cli_error());
      return 1;
    }
    printf("wrote %s (%lld tokens) and %s (%lld tokens)\n", train, (long long)nt, val,
           (long long)nv);
    return 0;
  }
  const int wide = argc == 3 && strcmp(argv[2], "--uint32") == 0;
  if ((argc != 2 && !wide) || argv[0][0] == '-' || argv[1][0] == '-') {
    usage(stderr);
    return 2;
  }
  uint16_t* tokens = NULL;
  uint32_t* words = NULL;
  int64_t n = 0;
  tl_status st = tl_tokens_from_text_file(argv[0], &tokens, &n);
  if (st == TL_OK && wide) {
    words = malloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
    st = words ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
    for (int64_t i = 0; st == TL_OK && i < n; i++) words[i] = tokens[i];
    if (st == TL_OK) st = tl_tokens_write32(argv[1], words, n, 1);
  } else if (st == TL_OK) {
    st = tl_tokens_write(argv[1], tokens, n);
  }
  free(tokens);
  free(words);
  if (st != TL_OK) {
    fprintf(stderr, "trellis data: %s\n", tl_cli_error());
    return 1;
  }
  printf("wrote %s: %lld tokens (byte-level, vocabulary 256; llm.c's %s format)\n", argv[1],
         (long long)n, wide ? "Llama-3 (uint32)" : "GPT-2 (uint16)");
  return 0;
}
