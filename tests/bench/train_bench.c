/* train_bench.c — training step time for two GPT configs and a Llama, with
 * the share of the step spent in matmuls (not a test: figures only).
 *
 *   bazel run -c opt //tests/bench:train_bench -- [--threads N] [--steps S]
 *                                                 [--only small|124m|llama]
 *
 * small: 4 layers, 4 heads, 128 channels, vocabulary 256, B=4, T=64.
 * 124m:  GPT-2 small: 12 layers, 12 heads, 768 channels, vocabulary 50257
 *        padded to 50304, B=4, T=64.
 * llama: 12 layers, 768 channels, 12 query and 4 key/value heads, SwiGLU
 *        2048 wide, vocabulary 32000, untied head, B=4, T=256
 *        (tests/bench/llama_vs_torch.sh runs it beside PyTorch's).
 * Tokens are random (a temporary token file): speed does not depend on them.
 * The per-op profile is a separate pass, since timing each node adds syncs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/op.h"
#include "kernels/cpu/cpu.h"
#include "launcher/data/tokens.h"
#include "launcher/train/trainer.h"

static void config(struct tl_config* c, int layers, int heads, int channels, int vocab,
                   const char* data) {
  memset(c, 0, sizeof *c);
  c->model.kind = TL_MODEL_GPT;
  c->model.n_layers = layers, c->model.n_heads = heads, c->model.n_embd = channels;
  c->model.vocab_size = vocab, c->model.max_seq_len = 1024, c->model.seed = 1;
  c->mesh.dp = c->mesh.tp = c->mesh.pp = c->mesh.cp = 1;
  c->schedule.micro_batches = 1;
  c->train.steps = 1000, c->train.batch_size = 4, c->train.seq_len = 64;
  c->train.lr = 1e-4f, c->train.beta1 = 0.9f, c->train.beta2 = 0.95f, c->train.eps = 1e-8f;
  c->train.weight_decay = 0.1f, c->train.grad_clip = 1.0f;
  c->device.type = TL_DEVICE_CPU;
  snprintf(c->data.train, sizeof c->data.train, "%s", data);
}

static void llama(struct tl_config* c, const char* data) {
  config(c, 12, 12, 768, 32000, data);
  c->model.kind = TL_MODEL_LLAMA;
  c->model.n_kv_heads = 4, c->model.ffn_hidden = 2048, c->model.rope_theta = 10000.0f;
  c->model.norm_eps = 1e-5f;
  c->train.seq_len = 256;
}

static int bench(const char* name, const struct tl_config* c, int steps) {
  tl_trainer* t = NULL;
  if (tl_trainer_create(c, NULL, &t) != TL_OK) {
    fprintf(stderr, "train_bench: %s\n", tl_last_error());
    return 1;
  }
  struct tl_step_stats s;
  tl_trainer_step(t, &s); /* warm-up */
  double total = 0, best = 1e30;
  for (int i = 0; i < steps; i++) {
    if (tl_trainer_step(t, &s) != TL_OK) {
      fprintf(stderr, "train_bench: %s\n", tl_last_error());
      return 1;
    }
    total += s.seconds;
    if (s.seconds < best) best = s.seconds;
  }
  double avg = total / steps, flops = tl_trainer_step_flops(t);
  double tokens = (double)c->train.batch_size * c->train.seq_len;
  /* profile pass */
  tl_trainer_profile(t, 1);
  tl_trainer_step(t, &s);
  double mm =
      tl_trainer_op_seconds(t, TL_OP_MATMUL) + tl_trainer_op_seconds(t, TL_OP_MATMUL_BACKWARD);
  double graph = 0;
  for (int op = 0; op < TL_OP_COUNT; op++) graph += tl_trainer_op_seconds(t, op);
  printf(
      "%-6s %8.2fM params | %9.1f ms/step (best %.1f) | %8.0f tok/s | %6.1f GFLOP/s | "
      "matmul %4.1f%% of the step | optimizer+clip %4.1f%%\n",
      name, tl_trainer_model(t)->n_params / 1e6, avg * 1e3, best * 1e3, tokens / avg,
      flops / avg / 1e9, 100 * mm / s.seconds, 100 * (s.seconds - graph) / s.seconds);
  printf("       per op (profiled step %.1f ms):", s.seconds * 1e3);
  for (int op = 0; op < TL_OP_COUNT; op++)
    if (tl_trainer_op_seconds(t, op) > 0.005 * s.seconds)
      printf(" %s %.1f", tl_op_get(op)->name, tl_trainer_op_seconds(t, op) * 1e3);
  printf(" (ms)\n");
  tl_trainer_destroy(t);
  return 0;
}

int main(int argc, char** argv) {
  int steps = 10;
  const char* only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      setenv("TRELLIS_NUM_THREADS", argv[++i], 1);
    else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
      steps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
      only = argv[++i];
    else {
      fprintf(stderr, "usage: train_bench [--threads N] [--steps S] [--only small|124m|llama]\n");
      return 2;
    }
  }
  char path[] = "/tmp/trellis_bench_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 1;
  close(fd);
  if (tl_tokens_write_random(path, 1 << 16, 256, 3) != TL_OK) {
    fprintf(stderr, "train_bench: %s\n", tl_last_error());
    return 1;
  }
  struct tl_config c;
  int rc = 0;
  printf("trellis training step, fp32 on the CPU, %s threads, B=4, %d timed steps\n",
         getenv("TRELLIS_NUM_THREADS") ? getenv("TRELLIS_NUM_THREADS") : "auto", steps);
  if (!only || strcmp(only, "small") == 0) {
    config(&c, 4, 4, 128, 256, path);
    rc |= bench("small", &c, steps);
  }
  if (!only || strcmp(only, "124m") == 0) {
    config(&c, 12, 12, 768, 50257, path);
    rc |= bench("124m", &c, steps < 5 ? steps : 5);
  }
  if (!only || strcmp(only, "llama") == 0) {
    llama(&c, path);
    rc |= bench("llama", &c, steps < 5 ? steps : 5);
  }
  unlink(path);
  return rc;
}
