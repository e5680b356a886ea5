/* train.c — `trellis train CONFIG.json`: the training run a person watches.
 *
 * One progress line per step (loss, learning rate, gradient norm, time,
 * throughput, time left); validation every train.val_every steps;
 * checkpoints every checkpoint.every steps and at the end; a sample of
 * generated text at the end. --metrics FILE writes the same as JSON lines,
 * through FILE.partial renamed to FILE when the run ends. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/config.h"
#include "core/log.h"
#include "core/timer.h"
#include "kernels/cpu/cpu.h"
#include "launcher/cli.h"
#include "launcher/trainer.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis train CONFIG.json [--steps N] [--metrics FILE]\n"
          "\n"
          "Trains the model the config describes (docs/config.md). --steps overrides\n"
          "train.steps; --metrics writes one JSON object per step to FILE.\n");
}

struct metrics {
  FILE* f;
  char path[1024], partial[1040];
};

static int metrics_open(struct metrics* m, const char* path) {
  memset(m, 0, sizeof *m);
  if (!path) return 0;
  snprintf(m->path, sizeof m->path, "%s", path);
  snprintf(m->partial, sizeof m->partial, "%s.partial", path);
  m->f = fopen(m->partial, "w");
  if (!m->f) {
    fprintf(stderr, "trellis train: --metrics: cannot write '%s': %s\n", m->partial,
            strerror(errno));
    return -1;
  }
  return 0;
}

static void metrics_close(struct metrics* m) {
  if (!m->f) return;
  fclose(m->f);
  if (rename(m->partial, m->path) != 0)
    fprintf(stderr, "trellis train: cannot rename '%s' to '%s': %s\n", m->partial, m->path,
            strerror(errno));
}

static void print_sample(const tl_model* m, const int32_t* tok, int n) {
  printf("sample: ");
  if (m->vocab == 256) {
    putchar('"');
    for (int i = 0; i < n; i++) {
      int c = tok[i];
      if (c == '\n')
        fputs("\\n", stdout);
      else if (c == '"' || c == '\\')
        printf("\\%c", c);
      else
        putchar(c >= 32 && c < 127 ? c : '?');
    }
    puts("\"");
  } else {
    for (int i = 0; i < n; i++) printf("%s%d", i ? " " : "", tok[i]);
    putchar('\n');
  }
}

static void describe(const struct tl_config* c, const tl_trainer* t) {
  const tl_model* m = tl_trainer_model(t);
  const struct tl_model_config* mc = &m->cfg;
  if (mc->kind == TL_MODEL_GPT)
    printf(
        "model: gpt, %d layers, %d heads, %d channels, vocabulary %d (padded %d), %.2fM "
        "parameters\n",
        mc->n_layers, mc->n_heads, mc->n_embd, m->vocab, m->padded_vocab, m->n_params / 1e6);
  else
    printf("model: mlp, %d layers, vocabulary %d, %.2fM parameters\n", mc->n_mlp_layers, m->vocab,
           m->n_params / 1e6);
  printf("run: %s, %d steps of %d x %d tokens (%d micro-batch%s), lr %g, %.2f GFLOP per step\n",
         c->device.type == TL_DEVICE_CUDA ? "cuda:0" : "cpu", c->train.steps, c->train.batch_size,
         c->train.seq_len, c->schedule.micro_batches, c->schedule.micro_batches == 1 ? "" : "es",
         c->train.lr, tl_trainer_step_flops(t) / 1e9);
  if (c->device.type == TL_DEVICE_CPU) printf("cpu threads: %d\n", tl_cpu_num_threads());
  fflush(stdout);
}

/* mkdir -p */
static int make_dirs(const char* dir) {
  char path[TL_PATH_MAX];
  snprintf(path, sizeof path, "%s", dir);
  for (char* p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int save_checkpoint(tl_trainer* t, const struct tl_config* c) {
  if (!c->checkpoint.dir[0]) return 0;
  if (make_dirs(c->checkpoint.dir) != 0) {
    fprintf(stderr, "trellis train: cannot create checkpoint.dir '%s': %s\n", c->checkpoint.dir,
            strerror(errno));
    return -1;
  }
  char path[2048];
  snprintf(path, sizeof path, "%s/step_%06lld.ckpt", c->checkpoint.dir,
           (long long)tl_trainer_steps_done(t));
  if (tl_trainer_save(t, path) != TL_OK) {
    fprintf(stderr, "trellis train: %s\n", tl_last_error());
    return -1;
  }
  printf("checkpoint: %s\n", path);
  return 0;
}

int tl_cli_train(int argc, char** argv) {
  const char *config_path = NULL, *metrics_path = NULL;
  long steps = -1;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      char* end = NULL;
      steps = strtol(argv[++i], &end, 10);
      if (*end || steps < 1) {
        fprintf(stderr, "trellis train: --steps '%s': expected a positive integer\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--metrics") == 0 && i + 1 < argc) {
      metrics_path = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] != '-' && !config_path) {
      config_path = argv[i];
    } else {
      fprintf(stderr, "trellis train: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!config_path) {
    usage(stderr);
    return 2;
  }
  struct tl_config cfg;
  if (tl_config_load(config_path, &cfg) != TL_OK) {
    fprintf(stderr, "trellis train: %s\n", tl_last_error());
    return 2;
  }
  if (steps > 0) cfg.train.steps = (int)steps;
  if (cfg.device.threads > 0) {
    char buf[16];
    snprintf(buf, sizeof buf, "%d", cfg.device.threads);
    setenv("TRELLIS_NUM_THREADS", buf, 1);
  }
  tl_trainer* t = NULL;
  if (tl_trainer_create(&cfg, &t) != TL_OK) {
    fprintf(stderr, "trellis train: %s\n", tl_last_error());
    return 1;
  }
  struct metrics mx;
  if (metrics_open(&mx, metrics_path) != 0) {
    tl_trainer_destroy(t);
    return 2;
  }
  describe(&cfg, t);
  const struct tl_train_config* tc = &cfg.train;
  double tokens = (double)tc->batch_size * tc->seq_len, total_s = 0;
  int64_t first = tl_trainer_steps_done(t), timed = 0;
  int rc = 0;
  for (int64_t s = first; s < tc->steps; s++) {
    struct tl_step_stats st;
    if (tl_trainer_step(t, &st) != TL_OK) {
      fprintf(stderr, "trellis train: %s\n", tl_last_error());
      rc = 1;
      break;
    }
    if (s > first) total_s += st.seconds, timed++; /* the first step warms caches */
    double avg = timed ? total_s / timed : st.seconds;
    double eta = avg * (double)(tc->steps - st.step);
    printf("step %*lld/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %8.0f tok/s | eta %.0fs\n",
           (int)snprintf(NULL, 0, "%d", tc->steps), (long long)st.step, tc->steps, st.loss, st.lr,
           st.grad_norm, st.seconds * 1e3, tokens / st.seconds, eta);
    fflush(stdout);
    if (mx.f) {
      fprintf(mx.f,
              "{\"step\": %lld, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6g, \"ms\": %.3f, "
              "\"tokens_per_s\": %.1f, \"peak_bytes\": {\"%s\": %lld}}\n",
              (long long)st.step, st.loss, st.lr, st.grad_norm, st.seconds * 1e3,
              tokens / st.seconds, cfg.device.type == TL_DEVICE_CUDA ? "cuda:0" : "cpu",
              (long long)tl_trainer_peak_bytes(t));
      fflush(mx.f);
    }
    int last = st.step == tc->steps;
    if (tc->val_every > 0 && cfg.data.val[0] && (st.step % tc->val_every == 0 || last)) {
      double val;
      if (tl_trainer_eval(t, &val) != TL_OK) {
        fprintf(stderr, "trellis train: %s\n", tl_last_error());
        rc = 1;
        break;
      }
      printf("step %lld: validation loss %.4f\n", (long long)st.step, val);
      if (mx.f) fprintf(mx.f, "{\"step\": %lld, \"val_loss\": %.6f}\n", (long long)st.step, val);
    }
    if (cfg.checkpoint.every > 0 && st.step % cfg.checkpoint.every == 0 && !last &&
        save_checkpoint(t, &cfg) != 0) {
      rc = 1;
      break;
    }
  }
  if (rc == 0 && save_checkpoint(t, &cfg) != 0) rc = 1;
  if (rc == 0 && tc->sample_tokens > 0) {
    int32_t prompt = tl_trainer_first_token(t);
    int32_t* out = malloc(sizeof(int32_t) * (size_t)tc->sample_tokens);
    if (out && tl_trainer_sample(t, &prompt, 1, tc->sample_tokens, tc->sample_top_k, cfg.model.seed,
                                 out) == TL_OK) {
      int32_t* all = malloc(sizeof(int32_t) * (size_t)(tc->sample_tokens + 1));
      if (all) {
        all[0] = prompt;
        memcpy(all + 1, out, sizeof(int32_t) * (size_t)tc->sample_tokens);
        print_sample(tl_trainer_model(t), all, tc->sample_tokens + 1);
        free(all);
      }
    } else {
      fprintf(stderr, "trellis train: sampling failed: %s\n", tl_last_error());
      rc = 1;
    }
    free(out);
  }
  if (timed)
    printf("done: %lld steps, %.1f ms per step, %.0f tokens/s\n", (long long)timed + 1,
           total_s / timed * 1e3, tokens * timed / total_s);
  metrics_close(&mx);
  tl_trainer_destroy(t);
  return rc;
}
