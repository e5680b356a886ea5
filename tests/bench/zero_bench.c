/* zero_bench.c — what each ZeRO stage costs in time at GPT-2 124M's sizes
 * on this machine (figures only, not a test): one rank with two threads
 * against dp = 2 at one thread per rank with parallel.zero 0, 1, 2 and 3,
 * every case run `--rounds` times in turn (interleaved, so that the
 * machine's drift falls on all alike), B = 4 sequences of T = 64 tokens,
 * one micro-batch per replica:
 *
 *   bazel build -c opt //tests/bench:zero_bench //launcher:trellis
 *   bazel-bin/tests/bench/zero_bench [--steps S] [--rounds R] [--layers L]
 *
 * For each case: the mean step time over steps 2..S of each round (the
 * first warms caches), its ratio to the one-rank step, the time a step
 * waited on data-parallel communication outside compute (`dp_wait_ms`:
 * what stayed exposed) and every rank's peak device bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct bench_case {
  const char* name;
  int dp, zero;
};

static const struct bench_case kCases[] = {
    {"1 rank, 2 threads", 1, 0}, {"dp 2, ZeRO-0", 2, 0}, {"dp 2, ZeRO-1", 2, 1},
    {"dp 2, ZeRO-2", 2, 2},      {"dp 2, ZeRO-3", 2, 3},
};
#define N_CASES (int)(sizeof kCases / sizeof kCases[0])

static int write_config(const char* path, const struct bench_case* c, int steps, int layers,
                        const char* data) {
  FILE* f = fopen(path, "w");
  if (!f) return 1;
  fprintf(f,
          "{\"model\": {\"kind\": \"gpt\", \"n_layers\": %d, \"n_heads\": 12, \"n_embd\": 768,\n"
          "           \"vocab_size\": 50257, \"max_seq_len\": 1024},\n"
          " \"mesh\": {\"dp\": %d},\n"
          " \"schedule\": {\"kind\": \"1f1b\", \"micro_batches\": %d},\n"
          " \"parallel\": {\"zero\": %d},\n"
          " \"train\": {\"steps\": %d, \"batch_size\": 4, \"seq_len\": 64, \"lr\": 1e-4,\n"
          "           \"warmup_steps\": 0, \"lr_schedule\": \"constant\", \"sample_tokens\": 0},\n"
          " \"data\": {\"train\": \"%s\"},\n"
          " \"device\": {\"type\": \"cpu\", \"threads\": %d}}\n",
          layers, c->dp, 1, c->zero, steps, data, c->dp == 1 ? 2 : 1);
  return fclose(f);
}

/* The mean of "ms" and "dp_wait_ms" over steps 2.. of a metrics file, and
 * the largest peak bytes of any rank. */
static int read_metrics(const char* path, double* ms, double* wait, double* peak) {
  FILE* f = fopen(path, "r");
  if (!f) return 1;
  char line[4096];
  int n = 0;
  *ms = *wait = *peak = 0;
  while (fgets(line, sizeof line, f)) {
    const char* s = strstr(line, "\"step\": ");
    const char* m = strstr(line, "\"ms\": ");
    if (!s || !m || atoi(s + 8) < 2) continue;
    const char* w = strstr(line, "\"dp_wait_ms\": ");
    *ms += atof(m + 6);
    *wait += w ? atof(w + 14) : 0;
    n++;
    for (const char* p = strstr(line, "\"rank"); p; p = strstr(p + 1, "\"rank")) {
      const char* colon = strchr(p, ':');
      double b = colon ? atof(colon + 1) : 0;
      if (b > *peak) *peak = b;
    }
  }
  fclose(f);
  if (n == 0) return 1;
  *ms /= n, *wait /= n;
  return 0;
}

int main(int argc, char** argv) {
  int steps = 4, rounds = 2, layers = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--rounds") == 0) rounds = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--layers") == 0) layers = atoi(argv[i + 1]);
  }
  const char* trellis = "launcher/trellis";
  if (access(trellis, X_OK) != 0) trellis = "bazel-bin/launcher/trellis";
  char dir[] = "/tmp/zero_bench_XXXXXX";
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  char text[600], data[600], cmd[4096];
  snprintf(text, sizeof text, "%s/text.txt", dir);
  snprintf(data, sizeof data, "%s/tokens.bin", dir);
  FILE* t = fopen(text, "w");
  for (int i = 0; t && i < 20000; i++) fprintf(t, "zero redundancy %d\n", i * 7919 % 10007);
  if (t) fclose(t);
  snprintf(cmd, sizeof cmd, "%s data %s %s > /dev/null", trellis, text, data);
  if (system(cmd) != 0) return fprintf(stderr, "zero_bench: cannot write tokens\n"), 1;
  double ms[N_CASES] = {0}, wait[N_CASES] = {0}, peak[N_CASES] = {0};
  int ok[N_CASES] = {0};
  printf("GPT %d layers x 768, vocabulary 50257, B=4, T=64, %d steps, %d rounds\n", layers, steps,
         rounds);
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < N_CASES; k++) {
      char cfg[700], metrics[700];
      snprintf(cfg, sizeof cfg, "%s/case%d.json", dir, k);
      snprintf(metrics, sizeof metrics, "%s/case%d_%d.jsonl", dir, k, r);
      if (write_config(cfg, &kCases[k], steps, layers, data) != 0) return 1;
      snprintf(cmd, sizeof cmd, "%s train %s --metrics %s > %s/case%d_%d.log 2>&1", trellis, cfg,
               metrics, dir, k, r);
      double a, b, c;
      if (system(cmd) != 0 || read_metrics(metrics, &a, &b, &c) != 0) {
        fprintf(stderr, "zero_bench: %s failed (see %s/case%d_%d.log)\n", kCases[k].name, dir, k, r);
        continue;
      }
      printf("  round %d  %-18s %8.0f ms  (dp wait %6.0f ms)\n", r + 1, kCases[k].name, a, b);
      fflush(stdout);
      ms[k] += a / rounds, wait[k] += b / rounds, peak[k] = c > peak[k] ? c : peak[k];
      ok[k]++;
    }
  printf("\n%-18s %10s %8s %14s %16s\n", "case", "ms/step", "ratio", "dp wait ms", "peak MB/rank");
  for (int k = 0; k < N_CASES; k++) {
    if (ok[k] != rounds) {
      printf("%-18s (failed)\n", kCases[k].name);
      continue;
    }
    printf("%-18s %10.0f %7.2fx %14.0f %16.1f\n", kCases[k].name, ms[k], ms[k] / ms[0], wait[k],
           peak[k] / 1e6);
  }
  return 0;
}
