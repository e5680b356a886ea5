/* parallel_bench.c — one GPT and one global batch on 2 ranks, split three
 * ways: data parallel (dp=2), tensor parallel (tp=2, with and without
 * sequence parallelism) and pipeline parallel (pp=2); ms per step and the
 * bytes each rank communicates per step (figures only, not a test):
 *
 *   bazel build -c opt //tests/bench:parallel_bench
 *   mpiexec -n 2 bazel-bin/tests/bench/parallel_bench [--steps S] [--embd C] [--layers L]
 *
 * Bytes sent come from the process groups' own counters (dp, tp, pp and the
 * world group), so they include everything a step sends: gradient
 * all-reduces, tensor-parallel collectives, pipeline activations and
 * gradients, the tied-embedding sync and the scalars of the loss and the
 * norm; collectives are counted as ring algorithms send. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launcher/data/tokens.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"

/* Bytes this rank sends in a step, from each group's counters: a ring
 * all-reduce of n bytes over g ranks sends 2(g-1)/g n, a reduce-scatter or
 * all-gather (g-1)/g n, a send n (the counters hold the buffers' sizes). */
static double sent_by(tl_group* g) {
  tl_group_stats s = tl_group_stats_get(g);
  double k = (tl_group_size(g) - 1.0) / tl_group_size(g);
  return 2 * k * s.bytes[TL_GROUP_ALL_REDUCE] +
         k * (s.bytes[TL_GROUP_REDUCE_SCATTER] + s.bytes[TL_GROUP_ALL_GATHER]) +
         s.bytes[TL_GROUP_SEND] + k * s.bytes[TL_GROUP_BROADCAST];
}

static double bytes_of(const struct tl_worker* w) {
  tl_group* seen[TL_MESH_GROUPS + 1] = {w->world};
  int n = 1;
  double b = sent_by(w->world);
  for (int a = 0; a < TL_MESH_GROUPS; a++) {
    int dup = 0;
    for (int i = 0; i < n; i++) dup |= seen[i] == w->groups[a];
    if (dup || !w->groups[a]) continue;
    seen[n++] = w->groups[a];
    b += sent_by(w->groups[a]);
  }
  return b;
}

static void reset(struct tl_worker* w) {
  tl_group_stats_reset(w->world);
  for (int a = 0; a < TL_MESH_GROUPS; a++)
    if (w->groups[a]) tl_group_stats_reset(w->groups[a]);
}

int main(int argc, char** argv) {
  int steps = 10, embd = 256, layers = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--embd") == 0) embd = atoi(argv[i + 1]);
    if (strcmp(argv[i], "--layers") == 0) layers = atoi(argv[i + 1]);
  }
  MPI_Init(&argc, &argv);
  int rank, p;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  if (p != 2) {
    if (rank == 0) fprintf(stderr, "parallel_bench: run it on 2 ranks (mpiexec -n 2)\n");
    MPI_Finalize();
    return 2;
  }
  char path[] = "/tmp/trellis_parallel_bench.bin";
  if (rank == 0 && tl_tokens_write_random(path, 1 << 16, 256, 3) != TL_OK) {
    fprintf(stderr, "%s\n", tl_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const int batch = 8, seq = 64;
  if (rank == 0)
    printf(
        "GPT %d layers x %d channels, 4 heads, vocabulary 256; global batch %d x %d tokens; "
        "%d timed steps after 1 warm-up; 1 CPU thread per rank\n",
        layers, embd, batch, seq, steps);
  struct {
    const char* name;
    int dp, tp, pp, micro, sp;
  } runs[] = {{"dp=2", 2, 1, 1, 1, 0},
              {"tp=2", 1, 2, 1, 1, 0},
              {"tp=2 sp", 1, 2, 1, 1, 1},
              {"pp=2 1f1b m=4", 1, 1, 2, 4, 0}};
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    struct tl_config c;
    tl_config_defaults(&c);
    c.model.kind = TL_MODEL_GPT;
    c.model.n_layers = layers, c.model.n_heads = 4, c.model.n_embd = embd;
    c.model.vocab_size = 256, c.model.max_seq_len = seq;
    c.mesh.dp = runs[k].dp, c.mesh.tp = runs[k].tp, c.mesh.pp = runs[k].pp;
    c.parallel.sequence_parallel = runs[k].sp;
    c.schedule.kind = TL_SCHEDULE_1F1B;
    c.schedule.micro_batches = runs[k].micro;
    c.train.batch_size = batch, c.train.seq_len = seq, c.train.steps = steps + 1;
    c.device.threads = 1;
    snprintf(c.data.train, sizeof c.data.train, "%s", path);
    c.data.val[0] = '\0';
    struct tl_worker w;
    tl_trainer* t = NULL;
    if (tl_worker_init(&c, &w) != TL_OK) tl_worker_fail(tl_last_error());
    struct tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
    if (tl_trainer_create(&c, &comm, &t) != TL_OK) tl_worker_fail(tl_last_error());
    struct tl_step_stats s;
    double total = 0;
    for (int i = 0; i <= steps; i++) {
      if (i == 1) reset(&w);
      if (tl_trainer_step(t, &s) != TL_OK) tl_worker_fail(tl_last_error());
      if (i > 0) total += s.seconds;
    }
    double mine[2] = {bytes_of(&w) / steps, total / steps * 1e3}, all[4];
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0)
      printf(
          "%-14s %8.2f ms/step (rank 1: %8.2f)  bytes sent per step: rank 0 %10.0f, rank 1 "
          "%10.0f bytes  (loss %.4f)\n",
          runs[k].name, all[1], all[3], all[0], all[2], s.loss);
    tl_trainer_destroy(t);
    tl_worker_finalize(&w);
  }
  if (rank == 0) unlink(path);
  MPI_Finalize();
  return 0;
}
