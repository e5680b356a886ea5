/* pipeline_bench.c — pipeline bubble and activation memory of GPipe, 1F1B,
 * interleaved 1F1B (2 and 4 chunks a rank, where the 8 layers allow) and
 * zero-bubble, measured (not a test: figures only). Run under mpiexec:
 *
 *   bazel build -c opt //tests/bench:pipeline_bench
 *   mpiexec -n 4 bazel-bin/tests/bench/pipeline_bench [--micro M] [--steps S]
 *
 * Every rank is one stage of a GPT (pp = ranks, dp = 1) with 8 layers. Per
 * stage it prints the time spent waiting in pipeline receives as a share of
 * the step (the measured bubble, next to the schedule simulation's: 1F1B's
 * and GPipe's (p-1)/(m+p-1), interleaving's (p-1)/(vm+p-1), zero-bubble's
 * from pp/schedule.h) and the bytes of its activation arenas (GPipe keeps m
 * micro-batches in flight, 1F1B at most p - stage, zero-bubble at most
 * min(p, m), interleaving more: each chunk's own). With more ranks
 * than cores the ranks also wait for a core, which the receive waits
 * include. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/data/tokens.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"
#include "pp/schedule.h"

int main(int argc, char** argv) {
  int micro = 8, steps = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--micro") == 0) micro = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
  }
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  char path[] = "/tmp/trellis_pipeline_bench.bin";
  if (rank == 0 && tl_tokens_write_random(path, 1 << 16, 256, 3) != TL_OK) {
    fprintf(stderr, "%s\n", tl_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    printf(
        "GPT 8 layers x 128 channels, B=%d x T=64, pp=%d, %d micro-batches; bubble formula "
        "(p-1)/(m+p-1) = %.3f\n",
        micro * 2, p, micro, (p - 1.0) / (micro + p - 1.0));
  const struct {
    tl_schedule_kind kind;
    int v;
  } cases[] = {{TL_SCHEDULE_GPIPE, 1},
               {TL_SCHEDULE_1F1B, 1},
               {TL_SCHEDULE_INTERLEAVED, 2},
               {TL_SCHEDULE_INTERLEAVED, 4},
               {TL_SCHEDULE_ZERO_BUBBLE, 1}};
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
    const int v = cases[k].v;
    if (v > 1 && (p < 2 || p * v > 8 || micro % p != 0)) continue; /* 8 layers, groups of p */
    struct tl_config c;
    tl_config_defaults(&c);
    c.model.n_layers = 8, c.model.n_heads = 4, c.model.n_embd = 128, c.model.max_seq_len = 64;
    c.mesh.pp = p;
    c.schedule.kind = cases[k].kind;
    c.schedule.virtual_stages = v;
    c.device.threads = 1;
    c.schedule.micro_batches = micro;
    c.train.batch_size = 2 * micro, c.train.seq_len = 64, c.train.steps = steps + 1;
    snprintf(c.data.train, sizeof c.data.train, "%s", path);
    c.data.val[0] = '\0';
    struct tl_worker w;
    tl_trainer* t = NULL;
    if (tl_worker_init(&c, &w) != TL_OK) tl_worker_fail(tl_last_error());
    struct tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
    if (tl_trainer_create(&c, &comm, &t) != TL_OK) tl_worker_fail(tl_last_error());
    struct tl_step_stats s;
    double step = 0, wait = 0;
    for (int i = 0; i <= steps; i++) {
      if (tl_trainer_step(t, &s) != TL_OK) tl_worker_fail(tl_last_error());
      if (i > 0) step += s.seconds, wait += s.bubble_seconds; /* the first step warms up */
    }
    double mine[3] = {wait / step, (double)tl_trainer_activation_bytes(t), step / steps * 1e3};
    double all[3 * 64];
    MPI_Gather(mine, 3, MPI_DOUBLE, all, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    /* the lists the trainer built: a block's passes' costs */
    int ticks = 0;
    struct tl_pp_costs costs = tl_trainer_schedule_costs(t);
    if (tl_pp_schedule_ticks(cases[k].kind, p, micro, v, &costs, &ticks) != TL_OK)
      tl_worker_fail(tl_last_error());
    /* a pass is one chunk's: m v of each */
    const int per_micro = (costs.forward + costs.backward + costs.weight) * v;
    if (rank == 0) {
      double mean = 0;
      for (int r = 0; r < p; r++) mean += all[3 * r] / p;
      char name[32];
      if (v > 1)
        snprintf(name, sizeof name, "%s v=%d", tl_schedule_kind_name(cases[k].kind), v);
      else
        snprintf(name, sizeof name, "%s", tl_schedule_kind_name(cases[k].kind));
      printf("%s: simulated bubble %.3f of the step, measured %.3f (mean over stages)\n", name,
             1.0 - (double)per_micro * micro / ticks, mean);
      for (int r = 0; r < p; r++)
        printf(
            "  stage %d: waiting in receives %5.1f%% of the step (%.1f ms/step); activation "
            "arenas %8.1f KiB\n",
            r, 100 * all[3 * r], all[3 * r + 2], all[3 * r + 1] / 1024);
    }
    tl_trainer_destroy(t);
    tl_worker_finalize(&w);
  }
  if (rank == 0) unlink(path);
  MPI_Finalize();
  return 0;
}
