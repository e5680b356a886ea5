/* plan_bench.c — the planner's step times against measured ones, on the
 * ranks of this job (not a test: figures only). Run under mpiexec from the
 * repository root:
 *
 *   bazel build //tests/bench:plan_bench
 *   mpiexec -n 4 bazel-bin/tests/bench/plan_bench [--steps S] [--layers L]
 *       [--embd C] [--heads H] [--batch B] [--micro M] [--zero Z]
 *       [--cluster examples/clusters/this_machine.json] [--mesh DPxTPxPP]
 *       [--repeat R]
 *
 * Every dp x tp x pp mesh of the job's ranks (powers of two; sequence
 * parallelism off) trains a small GPT with GPipe and 1F1B for S steps; the
 * first step is left out, and of the rest the best and the median step
 * times are shown (the slowest rank's): on a shared machine the slower
 * steps measure the neighbours, so ranks are taken from the best. Beside
 * it, what the cost model predicts on the cluster spec with its devices
 * set to the job's ranks (with more ranks than cores, pass a spec that
 * `trellis plan --calibrate SPEC --ranks N` measured on as many ranks: it
 * carries the shared cores' rate and the scheduling delay per message),
 * the predicted and measured rank of each run, and Spearman's rank
 * correlation (--mesh runs that one mesh only; --repeat R runs every mesh R
 * times, in turn, and keeps each one's best). Also the bytes: the plan's fullest stage against
 * the largest allocator peak. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/device.h"
#include "launcher/data/tokens.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"
#include "planner/cost.h"
#include "planner/recommend.h"
#include "tp/tp.h"

#define MAX_RUNS 64

struct run {
  int dp, tp, pp;
  tl_schedule_kind sched;
  double measured, median, predicted, pred_bytes, peak;
  double t_compute, t_bubble, t_tp, t_pp, t_dp, t_opt;
};

static int by_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* 1-based ranks of v[0..n) (ties share their mean rank). */
static void ranks(const double* v, int n, double* out) {
  for (int i = 0; i < n; i++) {
    int less = 0, equal = 0;
    for (int j = 0; j < n; j++) less += v[j] < v[i], equal += v[j] == v[i];
    out[i] = less + (equal + 1) / 2.0;
  }
}

static double spearman(const double* a, const double* b, int n) {
  double ra[MAX_RUNS], rb[MAX_RUNS], ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  ranks(a, n, ra);
  ranks(b, n, rb);
  for (int i = 0; i < n; i++) ma += ra[i] / n, mb += rb[i] / n;
  for (int i = 0; i < n; i++) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 1.0;
}

/* Trains run r for `steps` steps (the first left out); into *best and
 * *median the slowest rank's best and median step, into *peak the largest
 * allocator peak. */
static void measure(struct tl_config* c, const struct run* r, int steps, double* best,
                    double* median, double* peak) {
  c->mesh.dp = r->dp, c->mesh.tp = r->tp, c->mesh.pp = r->pp, c->schedule.kind = r->sched;
  struct tl_worker w;
  if (tl_worker_init(c, &w) != TL_OK) tl_worker_fail(tl_last_error());
  struct tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
  tl_alloc_reset_peak(tl_cpu());
  tl_trainer* t = NULL;
  if (tl_trainer_create(c, &comm, &t) != TL_OK) tl_worker_fail(tl_last_error());
  double secs[64];
  int timed = 0;
  for (int s = 0; s < steps; s++) {
    struct tl_step_stats st;
    if (tl_trainer_step(t, &st) != TL_OK) tl_worker_fail(tl_last_error());
    if (s > 0 && timed < 64) secs[timed++] = st.seconds;
  }
  qsort(secs, (size_t)timed, sizeof(double), by_double);
  double mine[3] = {timed ? secs[0] : 0, timed ? secs[timed / 2] : 0,
                    (double)tl_trainer_peak_bytes(t)};
  double all[3] = {0, 0, 0};
  MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  *best = all[0], *median = all[1], *peak = all[2];
  tl_trainer_destroy(t);
  tl_worker_finalize(&w);
}

int main(int argc, char** argv) {
  int steps = 8, layers = 4, embd = 64, heads = 8, batch = 16, micro = 2, zero = 0;
  const char* cluster_path = "examples/clusters/this_machine.json";
  int only[3] = {0, 0, 0}; /* --mesh: dp, tp, pp */
  int repeat = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--layers") == 0) layers = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--embd") == 0) embd = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--heads") == 0) heads = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--batch") == 0) batch = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--micro") == 0) micro = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--zero") == 0) zero = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--cluster") == 0) cluster_path = argv[i + 1];
    if (strcmp(argv[i], "--repeat") == 0) {
      repeat = atoi(argv[i + 1]);
      if (repeat < 1 || repeat > 16) {
        fprintf(stderr, "plan_bench: --repeat %s: expected an integer from 1 to 16\n", argv[i + 1]);
        return 2;
      }
    }
    if (strcmp(argv[i], "--mesh") == 0) {
      int end = 0;
      if (sscanf(argv[i + 1], "%dx%dx%d%n", &only[0], &only[1], &only[2], &end) != 3 ||
          argv[i + 1][end] || only[0] < 1 || only[1] < 1 || only[2] < 1) {
        fprintf(stderr,
                "plan_bench: --mesh %s: expected DPxTPxPP of positive integers, e.g. "
                "2x1x4\n",
                argv[i + 1]);
        return 2;
      }
    }
  }
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  char path[] = "/tmp/trellis_plan_bench.bin";
  if (rank == 0 && tl_tokens_write_random(path, 1 << 16, 256, 5) != TL_OK) {
    fprintf(stderr, "plan_bench: %s\n", tl_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  struct tl_config c;
  tl_config_defaults(&c);
  c.model.kind = TL_MODEL_GPT;
  c.model.n_layers = layers, c.model.n_heads = heads, c.model.n_embd = embd;
  c.model.vocab_size = 256, c.model.max_seq_len = 64;
  c.train.batch_size = batch, c.train.seq_len = 64, c.train.steps = steps;
  c.train.sample_tokens = 0;
  c.schedule.micro_batches = micro;
  c.parallel.zero = zero;
  snprintf(c.data.train, sizeof c.data.train, "%s", path);
  c.data.val[0] = '\0';
  tl_cluster cluster;
  if (tl_cluster_load(cluster_path, &cluster) != TL_OK) {
    fprintf(stderr, "plan_bench: %s\n", tl_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int devices = cluster.nodes * cluster.devices_per_node;
  long cores = tl_cpu_cores();
  cluster.nodes = 1, cluster.devices_per_node = n; /* the planner's view: a device per rank */
  if (rank == 0)
    printf(
        "GPT %d layers x %d channels, %d heads, B=%d x T=64, %d micro-batches, ZeRO-%d, %d "
        "ranks, %d steps (the first left out)%s; cluster %s (%d devices there, %d here)\n",
        layers, embd, heads, batch, micro, zero, n, steps,
        repeat > 1 ? ", the meshes run in turn that many times over" : "", cluster.name, devices,
        n);

  struct run runs[MAX_RUNS];
  int n_runs = 0;
  for (int dp = 1; dp <= n; dp *= 2)
    for (int tp = 1; dp * tp <= n; tp *= 2) {
      int pp = n / (dp * tp);
      if (dp * tp * pp != n || pp > layers || heads % tp || batch % (dp * micro)) continue;
      if (only[0] && (only[0] != dp || only[1] != tp || only[2] != pp)) continue;
      for (int k = 0; k < 2 && n_runs < MAX_RUNS; k++) {
        struct run* r = &runs[n_runs++];
        memset(r, 0, sizeof *r);
        r->dp = dp, r->tp = tp, r->pp = pp;
        r->sched = k ? TL_SCHEDULE_1F1B : TL_SCHEDULE_GPIPE;
        /* the run's config priced as `trellis train --cluster` prices it */
        c.mesh.dp = dp, c.mesh.tp = tp, c.mesh.pp = pp, c.schedule.kind = r->sched;
        tl_plan p;
        if (tl_plan_price_config(&c, &cluster, &p) != TL_OK) {
          fprintf(stderr, "plan_bench: %s\n", tl_last_error());
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        r->predicted = p.t_step, r->pred_bytes = p.mem_state + p.mem_act;
        r->t_compute = p.t_compute, r->t_bubble = p.t_bubble, r->t_tp = p.t_tp;
        r->t_pp = p.t_pp, r->t_dp = p.t_dp, r->t_opt = p.t_opt;
      }
    }
  /* --repeat R: every run R times, the meshes in turn, so that a busy
   * spell on a shared machine weighs on them alike; each run's best over
   * all, and the median of its medians */
  double medians[MAX_RUNS][16];
  for (int rep = 0; rep < repeat; rep++)
    for (int i = 0; i < n_runs; i++) {
      double best, median, peak;
      measure(&c, &runs[i], steps, &best, &median, &peak);
      struct run* r = &runs[i];
      r->measured = rep ? fmin(r->measured, best) : best;
      r->peak = fmax(r->peak, peak);
      medians[i][rep] = median;
      if (rep == repeat - 1) {
        qsort(medians[i], (size_t)repeat, sizeof(double), by_double);
        r->median = medians[i][repeat / 2];
      }
    }
  if (n_runs == 0) {
    if (rank == 0)
      fprintf(stderr,
              "plan_bench: no mesh to run%s: dp x tp x pp must be the job's %d ranks, pp at "
              "most the %d layers, tp divide the %d heads and dp x micro-batches the batch %d\n",
              only[0] ? " (--mesh)" : "", n, layers, heads, batch);
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) {
    double pred[MAX_RUNS], meas[MAX_RUNS], rp[MAX_RUNS], rm[MAX_RUNS];
    for (int i = 0; i < n_runs; i++) pred[i] = runs[i].predicted, meas[i] = runs[i].measured;
    ranks(pred, n_runs, rp);
    ranks(meas, n_runs, rm);
    printf("%-18s %8s %8s %8s %6s %6s   %-44s %11s %11s\n", "mesh", "best ms", "median", "pred ms",
           "rank m", "rank p", "predicted: compute/bubble/tp/pp/dp/opt ms", "pred bytes",
           "peak bytes");
    for (int i = 0; i < n_runs; i++) {
      const struct run* r = &runs[i];
      char mesh[32];
      snprintf(mesh, sizeof mesh, "%dx%dx%d %s", r->dp, r->tp, r->pp,
               r->sched == TL_SCHEDULE_GPIPE ? "gpipe" : "1f1b");
      printf(
          "%-18s %8.1f %8.1f %8.2f %6.1f %6.1f   %6.2f/%6.2f/%6.2f/%6.2f/%6.2f/%5.2f %13.0f "
          "%11.0f\n",
          mesh, r->measured * 1e3, r->median * 1e3, r->predicted * 1e3, rm[i], rp[i],
          r->t_compute * 1e3, r->t_bubble * 1e3, r->t_tp * 1e3, r->t_pp * 1e3, r->t_dp * 1e3,
          r->t_opt * 1e3, r->pred_bytes, r->peak);
    }
    printf("Spearman rank correlation, predicted vs best step time: %.2f over %d runs\n",
           spearman(pred, meas, n_runs), n_runs);
    double sum_err = 0, worst_err = 0;
    for (int i = 0; i < n_runs; i++) {
      double e = fabs(pred[i] / meas[i] - 1);
      sum_err += e;
      worst_err = fmax(worst_err, e);
    }
    printf("predicted against best step time: mean |error| %.0f%%, worst %.0f%%\n",
           100 * sum_err / n_runs, 100 * worst_err);
    if (n > cores)
      printf(
          "%d ranks on %d cores: ranks time-share the cores (waiting ranks yield theirs, "
          "TRELLIS_MPI_WAIT). The cost model prices what the cluster spec says a rank has: a "
          "spec measured on this many ranks (trellis plan --calibrate SPEC --ranks %d, then "
          "--cluster SPEC) carries the shared cores' matmul rate and what a message costs amid "
          "the other ranks' arithmetic; one measured on %d ranks does not\n",
          n, (int)cores, n, (int)cores);
  }
  MPI_Finalize();
  return 0;
}
