/* data_cmd.c — `trellis data`: text into llm.c token files, byte by byte or
 * with a Hugging Face tokenizer.json. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launcher/cli/cli.h"
#include "launcher/data/corpus.h"
#include "launcher/data/hf_tokenizer.h"
#include "launcher/data/tokens.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis data TEXT OUT.bin [--tokenizer tokenizer.json] [--uint32] [--threads N]\n"
          "       trellis data --corpus DIR [--tokenizer tokenizer.json] [--threads N]\n"
          "\n"
          "The first form turns a text file into an llm.c token file; the second builds\n"
          "the default corpus from Debian's 'fortunes' package (%s) as\n"
          "DIR/fortunes_train.bin (first 90%%) and DIR/fortunes_val.bin (last 10%%).\n"
          "\n"
          "Without --tokenizer a token is a byte (vocabulary 256). With it, the text (UTF-8)\n"
          "is encoded as Hugging Face's tokenizers encodes it with that file: byte-level\n"
          "BPE as GPT-2, Llama 3, Qwen2 and most models since ship it (added tokens,\n"
          "Unicode normalization NFC/NFD/NFKC/NFKD, the split pattern, merges,\n"
          "ignore_merges, and the post-processor's tokens around the whole text, such as\n"
          "Llama 3's <|begin_of_text|>). A tokenizer.json with a part trellis does not\n"
          "read (another normalizer, a WordPiece or Unigram model, SentencePiece's byte\n"
          "fallback, ...) is refused, naming it.\n"
          "\n"
          "Tokens are written in llm.c's GPT-2 format (uint16) when the vocabulary fits\n"
          "65,536 ids, else in its Llama-3 format (uint32); --uint32 asks for the wide\n"
          "format always. Pieces are merged on N threads (default: every core); the\n"
          "tokens are the same for any N. Long runs report progress on stderr.\n",
          TL_CORPUS_DIR);
}

typedef struct progress {
  struct timespec start, last;
  int tty, shown;
} progress;

static double since(const struct timespec* a, const struct timespec* b) {
  return (double)(b->tv_sec - a->tv_sec) + 1e-9 * (double)(b->tv_nsec - a->tv_nsec);
}

/* A line every second on a terminal, every 10 s otherwise; none for short runs. */
static void show_progress(void* arg, size_t done, size_t total) {
  progress* p = arg;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (since(&p->last, &now) < (p->tty ? 1.0 : 10.0) || done >= total) return;
  p->last = now;
  p->shown = 1;
  const double s = since(&p->start, &now);
  fprintf(stderr, "%strellis data: %.0f%% of %.1f MB encoded, %.1f MB/s%s", p->tty ? "\r" : "",
          100.0 * (double)done / (double)total, (double)total / 1e6,
          (double)done / 1e6 / (s > 0 ? s : 1), p->tty ? "" : "\n");
  fflush(stderr);
}

/* Encodes text with t into path; prints nothing. */
static tl_status encode_to(const tl_hf_tokenizer* t, const char* text, size_t len, int threads,
                           int wide, const char* path, progress* pr, int64_t* n_out) {
  uint32_t* ids = NULL;
  int64_t n = 0;
  TL_CHECK(tl_hf_tokenizer_encode(t, text, len, 1, threads, show_progress, pr, &ids, &n));
  tl_status st = tl_tokens_write32(path, ids, n, wide || tl_hf_tokenizer_vocab(t) > 65536);
  free(ids);
  if (st == TL_OK) *n_out = n;
  return st;
}

static int fail(void) {
  fprintf(stderr, "trellis data: %s\n", tl_cli_error());
  return 1;
}

int tl_cli_data(int argc, char** argv) {
  if (argc == 1 && (strcmp(argv[0], "-h") == 0 || strcmp(argv[0], "--help") == 0)) {
    usage(stdout);
    return 0;
  }
  const char *corpus = NULL, *tok_path = NULL, *pos[2] = {NULL, NULL};
  int wide = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), n_pos = 0;
  for (int i = 0; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "--uint32") == 0) {
      wide = 1;
    } else if ((strcmp(a, "--corpus") == 0 || strcmp(a, "--tokenizer") == 0 ||
                strcmp(a, "--threads") == 0) &&
               i + 1 < argc) {
      const char* v = argv[++i];
      if (a[2] == 'c') corpus = v;
      if (a[2] == 't' && a[3] == 'o') tok_path = v;
      if (a[2] == 't' && a[3] == 'h') {
        char* end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 64) {
          fprintf(stderr, "trellis data: --threads %s: expected a count from 1 to 64\n", v);
          return 2;
        }
        threads = (int)n;
      }
    } else if (a[0] != '-' && n_pos < 2) {
      pos[n_pos++] = a;
    } else {
      fprintf(stderr, "trellis data: unknown or incomplete argument '%s'\n\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  if (corpus && (n_pos || wide)) {
    fprintf(stderr,
            "trellis data: --corpus DIR takes %s; the default corpus is written in the "
            "format its vocabulary needs\n",
            n_pos ? "no TEXT or OUT.bin" : "no --uint32");
    return 2;
  }
  if (!corpus && n_pos != 2) {
    usage(stderr);
    return 2;
  }
  tl_hf_tokenizer* tok = NULL;
  if (tok_path && tl_hf_tokenizer_create(tok_path, &tok) != TL_OK) return fail();
  progress pr = {.tty = isatty(2)};
  clock_gettime(CLOCK_MONOTONIC, &pr.start);
  pr.last = pr.start;

  if (corpus) {
    if (mkdir(corpus, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "trellis data: cannot create directory '%s': %s\n", corpus, strerror(errno));
      tl_hf_tokenizer_destroy(tok);
      return 1;
    }
    char train[1024], val[1024];
    snprintf(train, sizeof train, "%s/fortunes_train.bin", corpus);
    snprintf(val, sizeof val, "%s/fortunes_val.bin", corpus);
    int64_t nt = 0, nv = 0;
    tl_status st;
    if (!tok) {
      st = tl_corpus_build(train, val, &nt, &nv);
    } else {
      char* text = NULL;
      size_t len = 0, split = 0;
      st = tl_corpus_text(&text, &len, &split);
      if (st == TL_OK) st = encode_to(tok, text, split, threads, 0, train, &pr, &nt);
      if (st == TL_OK) st = encode_to(tok, text + split, len - split, threads, 0, val, &pr, &nv);
      free(text);
    }
    tl_hf_tokenizer_destroy(tok);
    if (st != TL_OK) return fail();
    printf("wrote %s (%lld tokens) and %s (%lld tokens)%s%s\n", train, (long long)nt, val,
           (long long)nv, tok_path ? " with " : "", tok_path ? tok_path : "");
    return 0;
  }

  if (!tok) {
    uint16_t* tokens = NULL;
    uint32_t* words = NULL;
    int64_t n = 0;
    tl_status st = tl_tokens_from_text_file(pos[0], &tokens, &n);
    if (st == TL_OK && wide) {
      words = malloc(sizeof(uint32_t) * (size_t)(n > 0 ? n : 1));
      st = words ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for %lld tokens", (long long)n);
      for (int64_t i = 0; st == TL_OK && i < n; i++) words[i] = tokens[i];
      if (st == TL_OK) st = tl_tokens_write32(pos[1], words, n, 1);
    } else if (st == TL_OK) {
      st = tl_tokens_write(pos[1], tokens, n);
    }
    free(tokens);
    free(words);
    if (st != TL_OK) return fail();
    printf("wrote %s: %lld tokens (byte-level, vocabulary 256; llm.c's %s format)\n", pos[1],
           (long long)n, wide ? "Llama-3 (uint32)" : "GPT-2 (uint16)");
    return 0;
  }

  /* with a tokenizer: the text mapped, encoded whole */
  const int fd = open(pos[0], O_RDONLY);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fprintf(stderr, "trellis data: cannot read text file '%s': %s\n", pos[0],
            fd < 0 ? strerror(errno) : "not a regular file");
    if (fd >= 0) close(fd);
    tl_hf_tokenizer_destroy(tok);
    return 1;
  }
  const size_t len = (size_t)sb.st_size;
  void* map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  close(fd);
  if (len && map == MAP_FAILED) {
    fprintf(stderr, "trellis data: cannot map '%s': %s\n", pos[0], strerror(errno));
    tl_hf_tokenizer_destroy(tok);
    return 1;
  }
  int64_t n = 0;
  tl_status st = encode_to(tok, len ? map : "", len, threads, wide, pos[1], &pr, &n);
  if (len) munmap(map, len);
  const int64_t vocab = tl_hf_tokenizer_vocab(tok);
  tl_hf_tokenizer_destroy(tok);
  if (pr.shown && pr.tty) fputc('\n', stderr);
  if (st != TL_OK) {
    fprintf(stderr, "trellis data: %s: %s\n", pos[0], tl_cli_error());
    return 1;
  }
  struct timespec end;
  clock_gettime(CLOCK_MONOTONIC, &end);
  const double s = since(&pr.start, &end);
  printf(
      "wrote %s: %lld tokens from %zu bytes (%s, vocabulary %lld; llm.c's %s format) in "
      "%.2f s, %.1f MB/s on %d thread%s\n",
      pos[1], (long long)n, len, tok_path, (long long)vocab,
      wide || vocab > 65536 ? "Llama-3 (uint32)" : "GPT-2 (uint16)", s,
      (double)len / 1e6 / (s > 0 ? s : 1), threads, threads == 1 ? "" : "s");
  return 0;
}
