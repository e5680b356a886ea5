/* train.c — `trellis train CONFIG.json`: the training run a person watches.
 *
 * Started by hand with a mesh of more than one rank, it starts the job
 * (mpiexec, or srun under Slurm: spawn.h) and returns its status; each rank
 * then brings itself up (worker.h) and trains its part. Rank 0 prints one
 * line per step (loss, learning rate, gradient norm, time, throughput,
 * pipeline wait, time left), validates every train.val_every steps, writes
 * checkpoints and, at the end, a sample of generated text.
 *
 *   --metrics FILE  the same as JSON lines, through FILE.partial renamed
 *                   to FILE when the run ends
 *   --tensorboard DIR  the same as a TensorBoard event file in DIR, flushed
 *                   each step (train_record.h)
 *   --trace FILE    a Chrome trace (Perfetto, chrome://tracing) of every
 *                   rank's forward, backward, send, receive and all-reduce
 *   --verify        rank 0 runs the same config on one device beside the
 *                   mesh, checks every step against it (launcher/train/verify.h)
 *                   and reports what it compared and the verdict
 *   --export PATH   after training, the weights: an llm.c model file (PATH
 *                   ending in .bin) or a Hugging Face directory, each rank
 *                   writing the parameters it holds alone into it
 *   --cluster SPEC  the planner's price of this run on a cluster spec
 *                   (train_price.h) at the start, and at the end the
 *                   measured step time and fullest rank's bytes beside it */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/config.h"
#include "core/env.h"
#include "core/log.h"
#include "core/timer.h"
#include "launcher/cli/cli.h"
#include "launcher/cli/train_price.h"
#include "launcher/cli/train_record.h"
#include "launcher/cli/train_report.h"
#include "launcher/job/spawn.h"
#include "launcher/job/stop.h"
#include "launcher/job/worker.h"
#include "launcher/train/checkpoint.h"
#include "launcher/train/hf.h"
#include "launcher/train/inputs.h"
#include "launcher/train/sample.h"
#include "launcher/train/trainer.h"
#include "launcher/train/verify.h"

/* --export's two forms: an llm.c file ends in .bin, anything else is a
 * Hugging Face directory. */
static bool tl_export_is_llmc(const char* path) {
  const size_t n = strlen(path);
  return n >= 4 && strcmp(path + n - 4, ".bin") == 0;
}

static const char* m_kind_class(const tl_model* m) {
  return m->cfg.kind == TL_MODEL_LLAMA ? "LlamaForCausalLM" : "GPT2LMHeadModel";
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis train CONFIG.json [--steps N] [--metrics FILE] [--tensorboard DIR]\n"
          "                     [--trace FILE] [--verify] [--export PATH] [--cluster SPEC.json]\n"
          "                     [--hosts H1,H2 | --hostfile FILE]\n"
          "\n"
          "Trains the model the config describes (docs/config.md) on mesh.dp x mesh.tp x\n"
          "mesh.pp ranks, starting them with mpiexec (or srun under Slurm) when run by hand.\n"
          "  --steps N        stop after step N (train.steps still sets the learning-rate\n"
          "                   schedule, so a run stopped and resumed is the whole run)\n"
          "  --metrics FILE   one JSON object per step\n"
          "  --tensorboard DIR  a TensorBoard event file in DIR (made if missing): loss,\n"
          "                   validation loss, learning rate, gradient norm, tokens/s,\n"
          "                   step time, peak bytes (the fullest rank), pipeline and\n"
          "                   data-parallel waits per step, flushed as it goes\n"
          "  --trace FILE     Chrome trace of every rank's work per micro-batch\n"
          "  --verify         check every step against the same config on one device\n"
          "                   (rank 0 runs it beside the mesh; docs/equality.md)\n"
          "  --export PATH    after training, the weights: PATH ending in .bin an llm.c\n"
          "                   model file (GPT), else a Hugging Face directory (config.json\n"
          "                   and safetensors, for transformers' GPT2LMHeadModel or\n"
          "                   LlamaForCausalLM)\n"
          "  --cluster SPEC   price this run as `trellis plan` does on the cluster spec\n"
          "                   (its mesh, whatever the planner would pick): the step time\n"
          "                   and the fullest rank's bytes, printed at the start and set\n"
          "                   beside the measured ones at the end (and as --metrics'\n"
          "                   last line)\n");
}

struct options {
  const char *config, *metrics, *tensorboard, *trace, *export_path, *cluster;
  long steps;
  int verify;
};

struct run {
  struct tl_config cfg;
  struct options opt;
  struct tl_worker w;
  int have_worker;
  tl_trainer* t;
  struct tl_train_record rec; /* rank 0: --metrics and --tensorboard */
  FILE* trace;
  char trace_path[TL_PATH_MAX + 32];
  tl_verify* verify;            /* --verify: the single-device run beside this one */
  int64_t* peaks;               /* per rank, with --metrics or --tensorboard */
  int stopped;                  /* the signal the job stopped on (job/stop.h), or 0 */
  char saved[TL_PATH_MAX + 32]; /* the last checkpoint written */
  tl_status last;               /* the failing call's status, where fail() needs it */
  /* --cluster: the planner's price of this run on the spec (where priced:
   * by hand before any rank starts, and rank 0 of a job) */
  int priced;
  struct tl_train_price price;
  double* times; /* each timed step's seconds */
  double* waits; /* and the seconds rank 0 waited on data-parallel collectives in it */
};

static int rank0(const struct run* r) {
  return !r->have_worker || r->w.rank == 0;
}

/* Stops this rank: on a job, ends every rank (MPI_Abort) with the message. */
static int fail(struct run* r, const char* what) {
  char msg[8400];
  /* another rank reports this failure: end without repeating it */
  if (r->have_worker && r->w.world_size > 1 && r->last == TL_ERR_PEER) tl_worker_fail_quietly();
  snprintf(msg, sizeof msg, "trellis train: %s%s%s", what, what[0] ? ": " : "", tl_cli_error());
  if (r->have_worker && r->w.world_size > 1) tl_worker_fail(msg);
  fprintf(stderr, "%s\n", msg);
  return 1;
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

static int save_checkpoint(struct run* r) {
  const struct tl_config* c = &r->cfg;
  if (!c->checkpoint.dir[0]) return 0;
  if (rank0(r) && make_dirs(c->checkpoint.dir) != 0) {
    TL_ERRF(TL_ERR_IO, "cannot create checkpoint.dir '%s': %s", c->checkpoint.dir, strerror(errno));
    return fail(r, "");
  }
  char path[TL_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/step_%06lld.ckpt", c->checkpoint.dir,
           (long long)tl_trainer_steps_done(r->t));
  if (strcmp(path, r->saved) == 0) return 0; /* this step's is written already */
  if ((r->last = tl_trainer_save(r->t, path)) != TL_OK) return fail(r, "checkpoint");
  snprintf(r->saved, sizeof r->saved, "%s", path);
  int removed = 0; /* checkpoint.keep: the newest ones stay */
  if (rank0(r) && tl_checkpoint_prune(c->checkpoint.dir, c->checkpoint.keep, &removed) != TL_OK)
    return fail(r, "");
  char pruned[64] = "";
  if (removed)
    snprintf(pruned, sizeof pruned, "; %d older removed (checkpoint.keep = %d)", removed,
             c->checkpoint.keep);
  if (!tl_trainer_saves_sharded(r->t)) {
    if (rank0(r)) printf("checkpoint: %s%s\n", path, pruned);
    return 0;
  }
  /* sharded: how many ranks wrote a part, the most one held meanwhile */
  int64_t mine[2] = {tl_trainer_io_host_bytes(r->t), 0}, most = mine[0], parts = 1;
  if (r->have_worker && r->w.world_size > 1) {
    int n = r->w.world_size;
    int64_t* all = malloc(sizeof(int64_t) * (size_t)n);
    if (!all || tl_group_all_gather(r->w.world, mine, all, (size_t)n, TL_I64, NULL) != TL_OK) {
      free(all);
      return fail(r, "checkpoint");
    }
    parts = 0;
    for (int i = 0; i < n; i++) parts += all[i] > 0, most = all[i] > most ? all[i] : most;
    free(all);
  }
  if (rank0(r))
    printf(
        "checkpoint: %s (sharded: %lld parts, at most %.2f MB of host memory on a rank while "
        "writing; the model's state is %.2f MB)%s\n",
        path, (long long)parts, most / 1e6, 12.0 * (double)tl_trainer_model(r->t)->n_params / 1e6,
        pruned);
  return 0;
}

/* The options that take a value, and the value's name for the usage
 * (--hosts and --hostfile: the launcher's, job/spawn.h). */
static const char* const kValued[][2] = {{"--steps", "N"},         {"--metrics", "FILE"},
                                         {"--tensorboard", "DIR"}, {"--trace", "FILE"},
                                         {"--export", "FILE"},     {"--cluster", "SPEC.json"}};

static int parse(int argc, char** argv, struct options* o) {
  memset(o, 0, sizeof *o);
  o->steps = -1;
  for (int i = 0; i < argc; i++) {
    int skip = tl_launch_option_args(argc - i, argv + i);
    if (skip > 0) {
      i += skip - 1;
    } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
      char* end = NULL;
      o->steps = strtol(argv[++i], &end, 10);
      if (*end || o->steps < 1) {
        fprintf(stderr, "trellis train: --steps '%s': expected a positive integer\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--metrics") == 0 && i + 1 < argc) {
      o->metrics = argv[++i];
    } else if (strcmp(argv[i], "--tensorboard") == 0 && i + 1 < argc) {
      o->tensorboard = argv[++i];
    } else if (strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      o->trace = argv[++i];
    } else if (strcmp(argv[i], "--verify") == 0) {
      o->verify = 1;
    } else if (strcmp(argv[i], "--export") == 0 && i + 1 < argc) {
      o->export_path = argv[++i];
    } else if (strcmp(argv[i], "--cluster") == 0 && i + 1 < argc) {
      o->cluster = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return -1;
    } else if (argv[i][0] != '-' && !o->config) {
      o->config = argv[i];
    } else {
      for (size_t k = 0; k < sizeof kValued / sizeof kValued[0]; k++)
        if (i + 1 == argc && strcmp(argv[i], kValued[k][0]) == 0) {
          fprintf(stderr, "trellis train: %s: expected a value (%s %s)\n", argv[i], argv[i],
                  kValued[k][1]);
          return 2;
        }
      fprintf(stderr, "trellis train: unexpected argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!o->config) {
    usage(stderr);
    return 2;
  }
  if (o->tensorboard && tl_cli_makeable_dir("trellis train", "--tensorboard", o->tensorboard))
    return 2;
  if (o->export_path && (tl_export_is_llmc(o->export_path)
                             ? tl_cli_writable("trellis train", "--export", o->export_path)
                             : tl_cli_writable_dir("trellis train", "--export", o->export_path)))
    return 2;
  return 0;
}

/* Per-rank trace files, merged by rank 0 into one Chrome trace. */
static void trace_merge(struct run* r) {
  if (!r->trace) return;
  fclose(r->trace);
  r->trace = NULL;
  if (r->have_worker) tl_group_barrier(r->w.world, NULL);
  if (!rank0(r)) return;
  FILE* out = fopen(r->opt.trace, "w");
  if (!out) {
    fprintf(stderr, "trellis train: --trace: cannot write '%s': %s\n", r->opt.trace,
            strerror(errno));
    return;
  }
  fputs("{\"traceEvents\": [\n", out);
  int ranks = r->have_worker ? r->w.world_size : 1;
  for (int k = 0; k < ranks; k++) {
    char part[TL_PATH_MAX + 32];
    snprintf(part, sizeof part, "%s.rank%d", r->opt.trace, k);
    FILE* in = fopen(part, "r");
    if (!in) continue;
    char line[1024];
    while (fgets(line, sizeof line, in)) fputs(line, out);
    fclose(in);
    remove(part);
  }
  fputs("{\"name\": \"end\", \"ph\": \"i\", \"ts\": 0, \"pid\": 0, \"s\": \"g\"}\n]}\n", out);
  fclose(out);
  printf("trace: %s\n", r->opt.trace);
}

/* Every rank's allocator peak and live bytes into r->peaks (pairs;
 * collective over the job): the fullest rank is the one a memory plan must
 * fit, and ranks differ (first and last stages, tensor-parallel rank 0);
 * live bytes that grow from step to step are a leak. */
static tl_status gather_peaks(struct run* r) {
  int64_t mine[2] = {tl_trainer_peak_bytes(r->t), tl_trainer_live_bytes(r->t)};
  if (!r->have_worker || r->w.world_size == 1) {
    memcpy(r->peaks, mine, sizeof mine);
    return TL_OK;
  }
  /* an int64 travels as two int32s: the bytes arrive as they left */
  return tl_group_all_gather(r->w.world, mine, r->peaks, 4 * (size_t)r->w.world_size, TL_I32, NULL);
}

/* The step the run stops after: --steps, else train.steps. */
static int64_t stop_step(const struct run* r) {
  return r->opt.steps > 0 ? r->opt.steps : r->cfg.train.steps;
}

static int train_loop(struct run* r) {
  const struct tl_train_config* tc = &r->cfg.train;
  double tokens = (double)tc->batch_size * tc->seq_len, total_s = 0;
  int64_t first = tl_trainer_steps_done(r->t), timed = 0, stop = stop_step(r), skipped = 0;
  int width = (int)snprintf(NULL, 0, "%d", tc->steps);
  /* --cluster: each timed step's seconds, for the median against the price */
  double *times = NULL, *waits = NULL;
  int64_t taken = 0; /* steps this run took */
  if (r->opt.cluster && stop > first &&
      (!(times = r->times = malloc(sizeof(double) * (size_t)(stop - first))) ||
       !(waits = r->waits = malloc(sizeof(double) * (size_t)(stop - first)))))
    return fail(r, "out of memory");
  for (int64_t s = first; s < stop; s++) {
    struct tl_step_stats st;
    if ((r->last = tl_trainer_step(r->t, &st)) != TL_OK) return fail(r, "");
    taken++;
    skipped += st.skipped;
    if (r->verify && st.skipped) {
      TL_ERRF(TL_ERR_UNSUPPORTED,
              "step %lld was skipped (train.skip_nonfinite): the oracle compares each step's "
              "update with one device's, and a skipped step has none",
              (long long)st.step);
      return fail(r, "--verify");
    }
    if (r->verify && tl_verify_step(r->verify, &st) != TL_OK) return fail(r, "--verify");
    if (s > first) { /* the first step warms caches */
      total_s += st.seconds;
      if (times) {
        /* the rank that waited least on data-parallel collectives: the
         * last to reach them, so what it waited is the communication's
         * own, not the others' lateness (priced apart: load imbalance) */
        float least = -(float)st.dp_wait_seconds;
        if (r->have_worker && r->w.world_size > 1 &&
            tl_group_all_reduce(r->w.world, &least, &least, 1, TL_F32, TL_REDUCE_MAX, NULL) !=
                TL_OK)
          return fail(r, "--cluster");
        times[timed] = st.seconds, waits[timed] = -(double)least;
      }
      timed++;
    }
    double avg = timed ? total_s / timed : st.seconds;
    if (rank0(r)) {
      printf("step %*lld/%d | loss %.4f | lr %.2e | norm %.3f | %7.1f ms", width,
             (long long)st.step, tc->steps, st.loss, st.lr, st.grad_norm, st.seconds * 1e3);
      if (r->have_worker && r->cfg.mesh.pp > 1) printf(" (wait %.1f)", st.bubble_seconds * 1e3);
      printf(" | %8.0f tok/s | eta %.0fs%s\n", tokens / st.seconds, avg * (double)(stop - st.step),
             st.skipped ? " | skipped: not finite (train.skip_nonfinite)" : "");
      fflush(stdout);
    }
    if (r->opt.metrics || r->opt.tensorboard) { /* every rank takes part in gathering */
      if (gather_peaks(r) != TL_OK) return fail(r, "metrics");
      if (rank0(r) &&
          (r->last = tl_train_record_step(&r->rec, &st, tokens, skipped, r->peaks,
                                          r->have_worker ? r->w.world_size : 1)) != TL_OK)
        return fail(r, "");
    }
    int last = st.step == stop;
    if (tc->val_every > 0 && r->cfg.data.val[0] && (st.step % tc->val_every == 0 || last)) {
      double val;
      if (tl_trainer_eval(r->t, &val) != TL_OK) return fail(r, "validation");
      if (rank0(r)) printf("step %lld: validation loss %.4f\n", (long long)st.step, val);
      if (rank0(r) && (r->last = tl_train_record_val(&r->rec, st.step, val)) != TL_OK)
        return fail(r, "");
    }
    if (r->cfg.checkpoint.every > 0 && st.step % r->cfg.checkpoint.every == 0 && !last &&
        save_checkpoint(r) != 0)
      return 1;
    /* a signal on any rank: every rank stops after this step (job/stop.h) */
    if (!last &&
        (r->last = tl_stop_agree(r->have_worker ? r->w.world : NULL, &r->stopped)) != TL_OK)
      return fail(r, "");
    if (r->stopped) break;
  }
  if (!r->stopped && rank0(r) && timed)
    printf("done: %lld steps, %.1f ms per step, %.0f tokens/s\n", (long long)timed + 1,
           total_s / timed * 1e3, tokens * timed / total_s);
  /* --cluster, the run's steps beside the price (a stopped run's too);
   * taken is the same on every rank */
  if (r->opt.cluster && taken == 0 && rank0(r))
    printf("priced on %s: no step was taken (the run was at step %lld already): nothing measured\n",
           r->price.cluster, (long long)first);
  if (r->opt.cluster && taken > 0) { /* every rank takes part in gathering the peaks */
    if (gather_peaks(r) != TL_OK) return fail(r, "--cluster");
    if (rank0(r))
      tl_train_price_report(&r->price, stdout, r->rec.metrics, tl_trainer_steps_done(r->t), times,
                            waits, timed, r->peaks, r->have_worker ? r->w.world_size : 1,
                            r->verify);
  }
  if (r->stopped) return 0;
  if (rank0(r) && skipped)
    printf(
        "skipped: %lld step%s whose loss or gradient norm was not finite "
        "(train.skip_nonfinite)\n",
        (long long)skipped, skipped == 1 ? "" : "s");
  return 0;
}

static int finish(struct run* r, int rc) {
  tl_train_record_close(&r->rec);
  if (r->trace) fclose(r->trace);
  tl_trainer_destroy(r->t);
  tl_verify_destroy(r->verify);
  free(r->peaks);
  free(r->times);
  free(r->waits);
  if (r->have_worker) {
    /* under ASan: what this rank lost, before MPI's modules go (core/alloc.h) */
    if (tl_alloc_leak_check() != TL_OK) {
      fprintf(stderr, "trellis train: rank %d: %s\n", r->w.rank, tl_cli_error());
      if (rc == 0) rc = 1;
    }
    rc = tl_worker_end(&r->w, rc);
  }
  return rc;
}

int tl_cli_train(int argc, char** argv) {
  struct run r;
  memset(&r, 0, sizeof r);
  int prc = parse(argc, argv, &r.opt);
  if (prc) return prc < 0 ? 0 : prc;
  if (tl_hf_config_load(r.opt.config, &r.cfg) != TL_OK) {
    fprintf(stderr, "trellis train: %s\n", tl_cli_error());
    return 2;
  }
  /* checkpoint.resume "latest": the newest checkpoint in checkpoint.dir,
   * found alike by every process of the job (they see the same files) */
  if (strcmp(r.cfg.checkpoint.resume, "latest") == 0) {
    char latest[TL_PATH_MAX + 32];
    int64_t step;
    if (tl_checkpoint_latest(r.cfg.checkpoint.dir, latest, sizeof latest, &step) != TL_OK) {
      fprintf(stderr, "trellis train: checkpoint.resume \"latest\": %s\n", tl_cli_error());
      return 1;
    }
    if (step >= 0 && strlen(latest) >= sizeof r.cfg.checkpoint.resume) {
      fprintf(stderr, "trellis train: checkpoint.resume \"latest\": path too long: %s\n", latest);
      return 1;
    }
    memcpy(r.cfg.checkpoint.resume, latest, strlen(latest) + 1); /* it fits: checked above */
    const char* pmi = getenv("PMI_RANK");
    if (!getenv("TRELLIS_SPAWNED") && (!pmi || strcmp(pmi, "0") == 0)) { /* said once */
      if (step >= 0)
        TL_LOG_INFO("checkpoint.resume \"latest\": %s (step %lld)", latest, (long long)step);
      else
        TL_LOG_INFO("checkpoint.resume \"latest\": no checkpoint in '%s' yet: starting at step 0",
                    r.cfg.checkpoint.dir);
    }
  }
  if (r.opt.steps > r.cfg.train.steps) {
    fprintf(stderr,
            "trellis train: --steps %ld: beyond train.steps = %d, which sets the learning-rate "
            "schedule; raise train.steps to train longer\n",
            r.opt.steps, r.cfg.train.steps);
    return 2;
  }
  int world = (int)tl_config_ranks(&r.cfg.mesh), status = 0;
  char who[64];
  /* --cluster, started by hand: priced here, before any rank starts, so
   * that a spec that cannot price the run stops it with its reason; in a
   * job, rank 0 prices it again once it knows its rank (below) */
  char what[TL_PATH_MAX + 16];
  if (r.opt.cluster && !tl_launch_detected(who, sizeof who)) {
    if (tl_train_price(&r.cfg, r.opt.cluster, &r.price, what, sizeof what) != TL_OK) {
      fprintf(stderr, "trellis train: %s: %s\n", what, tl_cli_error());
      return 2;
    }
    r.priced = 1;
  }
  /* started by hand: the config's files are checked once, here, before any
   * rank starts (inside a job each rank's trainer opens them again) */
  if (!tl_launch_detected(who, sizeof who) && tl_inputs_check(&r.cfg) != TL_OK) {
    fprintf(stderr, "trellis train: %s: %s\n", r.opt.config, tl_cli_error());
    return 1;
  }
  /* by hand with several ranks: start the job and report its status */
  if (tl_launch_maybe_spawn(argc + 2, argv - 2, world, &status)) return status;
  /* a rank's signals are noted from before it joins the job: joining
   * waits for every rank, so by the time any rank prints, all of them
   * stop at a step boundary rather than die on the default action */
  if (tl_stop_install() != TL_OK) {
    fprintf(stderr, "trellis train: %s\n", tl_cli_error());
    return 1;
  }
  struct tl_trainer_comm comm = {0};
  if (world > 1 || tl_launch_detected(who, sizeof who)) {
    if (tl_worker_init(&r.cfg, &r.w) != TL_OK) {
      char msg[8400];
      snprintf(msg, sizeof msg, "trellis train: %s", tl_cli_error());
      tl_worker_fail(msg);
    }
    r.have_worker = 1;
    comm = tl_trainer_comm_of(r.w.world, r.w.groups, r.w.host_groups);
  } else if (r.cfg.device.threads > 0) {
    /* one rank started by hand: the config's threads, as a job's worker
     * sets them (the environment was read once already) */
    tl_env_set_num_threads(r.cfg.device.threads);
  }
  if ((r.last = tl_trainer_create(&r.cfg, r.have_worker ? &comm : NULL, &r.t)) != TL_OK)
    return finish(&r, fail(&r, ""));
  if (r.opt.verify && tl_verify_create(r.t, &r.verify) != TL_OK)
    return finish(&r, fail(&r, "--verify"));
  if (r.opt.cluster && !r.priced && rank0(&r)) {
    if ((r.last = tl_train_price(&r.cfg, r.opt.cluster, &r.price, what, sizeof what)) != TL_OK)
      return finish(&r, fail(&r, what));
    r.priced = 1;
  }
  if (r.opt.metrics || r.opt.tensorboard || r.opt.cluster) {
    r.peaks = calloc(2 * (r.have_worker ? (size_t)r.w.world_size : 1), sizeof(int64_t));
    if (!r.peaks) return finish(&r, fail(&r, "out of memory"));
  }
  /* through fail(): the other ranks are already in the job and would
   * otherwise wait for rank 0 in their first collective */
  if (rank0(&r) &&
      (r.last = tl_train_record_open(&r.rec, r.opt.metrics, r.opt.tensorboard)) != TL_OK)
    return finish(&r, fail(&r, ""));
  if (r.opt.trace) {
    snprintf(r.trace_path, sizeof r.trace_path, "%s.rank%d", r.opt.trace,
             r.have_worker ? r.w.rank : 0);
    if (!(r.trace = fopen(r.trace_path, "w"))) {
      TL_ERRF(TL_ERR_IO, "--trace: cannot write '%s': %s", r.trace_path, strerror(errno));
      return finish(&r, fail(&r, ""));
    }
    tl_trainer_trace(r.t, r.trace);
  }
  if (rank0(&r))
    tl_train_describe(&r.cfg, tl_trainer_model(r.t), r.opt.steps,
                      r.rec.tb ? tl_tensorboard_path(r.rec.tb) : NULL, r.priced ? &r.price : NULL);
  int rc = train_loop(&r);
  tl_trainer_trace(r.t, NULL);
  if (rc == 0) trace_merge(&r);
  if (rc == 0) rc = save_checkpoint(&r);
  if (rc == 0 && r.stopped) { /* what the signal asked for: the step's state, kept */
    if (rank0(&r)) {
      if (r.saved[0])
        printf("trellis train: %s: stopped after step %lld of %d; checkpoint %s written (%s)\n",
               tl_stop_name(r.stopped), (long long)tl_trainer_steps_done(r.t), r.cfg.train.steps,
               r.saved,
               strcmp(r.cfg.checkpoint.resume, "latest") == 0
                   ? "checkpoint.resume \"latest\": the same command goes on from it"
                   : "set checkpoint.resume to it, or to \"latest\", to go on");
      else
        printf(
            "trellis train: %s: stopped after step %lld of %d; nothing saved: checkpoint.dir "
            "is not set\n",
            tl_stop_name(r.stopped), (long long)tl_trainer_steps_done(r.t), r.cfg.train.steps);
      fflush(stdout);
    }
    return finish(&r, 0);
  }
  if (rc == 0 && r.opt.export_path) { /* every rank writes its slices */
    if ((r.last = tl_trainer_export(r.t, r.opt.export_path)) != TL_OK)
      rc = fail(&r, "--export");
    else if (rank0(&r) && tl_export_is_llmc(r.opt.export_path))
      printf("model file: %s (llm.c, fp32)\n", r.opt.export_path);
    else if (rank0(&r))
      printf("model directory: %s (Hugging Face %s, fp32 safetensors)\n", r.opt.export_path,
             m_kind_class(tl_trainer_model(r.t)));
  }
  /* the whole model on rank 0: a sample */
  const tl_model* m = tl_trainer_model(r.t);
  float* params = NULL;
  if (rc == 0 && r.cfg.train.sample_tokens > 0) {
    if (rank0(&r) && !(params = malloc(sizeof(float) * (size_t)m->n_params)))
      return finish(&r, fail(&r, "out of memory"));
    if (tl_trainer_gather(r.t, params, 0) != TL_OK) rc = fail(&r, "gathering parameters");
  }
  if (rc == 0 && rank0(&r) && r.cfg.train.sample_tokens > 0) {
    int n = r.cfg.train.sample_tokens;
    int32_t* tok = malloc(sizeof(int32_t) * (size_t)(n + 1));
    tok[0] = tl_trainer_first_token(r.t);
    if (tl_sample(m, r.cfg.train.seq_len, params, tok, 1, n, r.cfg.train.sample_top_k,
                  r.cfg.model.seed, tok + 1) == TL_OK)
      tl_train_print_sample(m, &r.cfg, tok, n + 1);
    else
      rc = fail(&r, "sampling");
    free(tok);
  }
  if (rc == 0 && r.verify && rank0(&r))
    rc = tl_train_print_verify(tl_verify_result(r.verify), tl_trainer_model(r.t), &r.cfg);
  free(params);
  if (r.have_worker && r.w.world_size > 1) {
    /* everyone learns whether rank 0's verification passed */
    int32_t code = rc;
    tl_group_broadcast(r.w.world, &code, 1, TL_I32, 0, NULL);
    rc = code;
  }
  return finish(&r, rc);
}
