/* verify_bench.c — the equality oracle at GPT-2 124M dimensions (not a
 * test: figures only). Correct runs of dp 2, tp 2, pp 2 and tp 2
 * sequence-parallel x pp 2 must say EQUAL with AdamW's eps at 1e-8 (3 and 20
 * steps), and each deliberate bug (TRELLIS_FAULT) DIFFERENT.
 *
 *   bazel run -c opt //tests/bench:verify_bench -- [--steps 3,20] [--faults-only | --no-faults]
 *
 * Model: 12 layers, 12 heads, 768 channels, vocabulary 50257 (padded to
 * 50304); B=4, T=64, lr 1e-4 constant, eps 1e-8, clipping at 1.0, one CPU
 * thread per rank; random tokens. Each case is `trellis train CFG --verify`
 * in a child process; its verify lines and wall time are printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "launcher/data/tokens.h"

struct mesh {
  const char* name;
  int dp, tp, pp, micro, sp;
};

static const struct mesh kMeshes[] = {
    {"dp2", 2, 1, 1, 1, 0},
    {"tp2", 1, 2, 1, 1, 0},
    {"pp2", 1, 1, 2, 2, 0},
    {"tp2sp_pp2", 1, 2, 2, 2, 1},
};

struct fault {
  const char* fault;
  const char* mesh;
};

static const struct fault kFaults[] = {
    {"micro_batch_dropped", "dp2"},   {"dp_scaled_twice", "dp2"},
    {"tied_sync_skipped", "pp2"},     {"pp_grad_misrouted", "pp2"},
    {"update_repeated", "pp2"},       {"tp_allreduce_skipped", "tp2sp_pp2"},
    {"sp_sync_skipped", "tp2sp_pp2"},
};

static const struct mesh* mesh_named(const char* name) {
  for (size_t i = 0; i < sizeof kMeshes / sizeof kMeshes[0]; i++)
    if (strcmp(kMeshes[i].name, name) == 0) return &kMeshes[i];
  return NULL;
}

static int write_config(const char* path, const struct mesh* m, int steps, const char* data) {
  FILE* f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f,
          "{\"model\": {\"kind\": \"gpt\", \"n_layers\": 12, \"n_heads\": 12, \"n_embd\": 768,\n"
          "           \"vocab_size\": 50257, \"max_seq_len\": 1024},\n"
          " \"mesh\": {\"dp\": %d, \"tp\": %d, \"pp\": %d},\n"
          " \"schedule\": {\"kind\": \"1f1b\", \"micro_batches\": %d},\n"
          " \"parallel\": {\"sequence_parallel\": %s},\n"
          " \"train\": {\"steps\": %d, \"batch_size\": 4, \"seq_len\": 64, \"lr\": 1e-4,\n"
          "           \"lr_schedule\": \"constant\", \"warmup_steps\": 0, \"eps\": 1e-8,\n"
          "           \"grad_clip\": 1.0, \"sample_tokens\": 0},\n"
          " \"data\": {\"train\": \"%s\"},\n"
          " \"device\": {\"type\": \"cpu\", \"threads\": 1}}\n",
          m->dp, m->tp, m->pp, m->micro, m->sp ? "true" : "false", steps, data);
  return fclose(f);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int run_case(const char* trellis, const char* dir, const char* data, const struct mesh* m,
                    int steps, const char* fault) {
  char cfg[1200], cmd[4096];
  snprintf(cfg, sizeof cfg, "%s/verify_%s_%d.json", dir, m->name, steps);
  if (write_config(cfg, m, steps, data) != 0) {
    fprintf(stderr, "verify_bench: cannot write %s\n", cfg);
    return 1;
  }
  printf("== %s, %d step%s, TRELLIS_FAULT=%s\n", m->name, steps, steps == 1 ? "" : "s", fault);
  fflush(stdout);
  snprintf(cmd, sizeof cmd,
           "TRELLIS_FAULT=%s %s train %s --verify 2>&1 | grep -E '^verify|rror|BAD'", fault,
           trellis, cfg);
  double t0 = now_s();
  int rc = system(cmd);
  printf("   (%.0f s)\n", now_s() - t0);
  fflush(stdout);
  return rc == -1;
}

int main(int argc, char** argv) {
  const char* trellis = "launcher/trellis";
  int steps_list[8] = {3, 20}, n_steps = 2, faults = 1, correct = 1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      n_steps = 0;
      for (char* tok = strtok(argv[++i], ","); tok && n_steps < 8; tok = strtok(NULL, ","))
        steps_list[n_steps++] = atoi(tok);
    } else if (strcmp(argv[i], "--faults-only") == 0) {
      correct = 0;
    } else if (strcmp(argv[i], "--no-faults") == 0) {
      faults = 0;
    } else if (strcmp(argv[i], "--trellis") == 0 && i + 1 < argc) {
      trellis = argv[++i];
    } else {
      fprintf(stderr,
              "usage: verify_bench [--steps 3,20] [--faults-only | --no-faults] [--trellis PATH]\n");
      return 2;
    }
  }
  const char* tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char data[1024];
  snprintf(data, sizeof data, "%s/verify_bench_tokens.bin", tmp);
  if (tl_tokens_write_random(data, 200000, 50257, 7) != TL_OK) {
    fprintf(stderr, "verify_bench: %s\n", tl_last_error());
    return 1;
  }
  int rc = 0;
  if (correct)
    for (size_t i = 0; i < sizeof kMeshes / sizeof kMeshes[0]; i++)
      for (int s = 0; s < n_steps; s++) {
        /* the 20-step runs on the two meshes the issue names */
        if (steps_list[s] > 3 && strcmp(kMeshes[i].name, "dp2") != 0 &&
            strcmp(kMeshes[i].name, "tp2sp_pp2") != 0)
          continue;
        rc |= run_case(trellis, tmp, data, &kMeshes[i], steps_list[s], "none");
      }
  if (faults)
    for (size_t i = 0; i < sizeof kFaults / sizeof kFaults[0]; i++)
      rc |= run_case(trellis, tmp, data, mesh_named(kFaults[i].mesh), 2, kFaults[i].fault);
  remove(data);
  return rc;
}
