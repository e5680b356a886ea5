/* allreduce_bench.c — all-reduce bus bandwidth of tl_group against raw MPI
 * on the same buffers, ranks and sizes, side by side.
 *
 *   mpiexec -n 2 bazel-bin/tests/bench/allreduce_bench [--min 4096] [--max 16777216]
 *
 * Bus bandwidth = 2 (n - 1) / n * bytes / time (the ring all-reduce's
 * traffic per rank), the figure NCCL's tests print. For each size the two
 * are measured in alternating rounds (raw, trellis, raw, trellis, ..., the
 * order reversed every other round) and each reports its best of 31 rounds of ~10 ms: on a
 * shared machine the other rounds measure the neighbours, and the best one
 * is the cost of the call itself.
 * Two pairs: synchronous (tl_group_all_reduce without a handle vs
 * MPI_Allreduce) and asynchronous (with a handle + tl_group_wait vs
 * MPI_Iallreduce + MPI_Wait). A round's time is the slowest rank's. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/group.h"
#include "core/group_mpi.h"
#include "core/timer.h"

enum { k_rounds = 31 };

typedef enum { RAW_SYNC, TL_SYNC, RAW_ASYNC, TL_ASYNC, N_KINDS } kind;

static void run_once(kind k, tl_group* g, float* send, float* recv, int count) {
  tl_group_request* req = NULL;
  MPI_Request mreq;
  switch (k) {
    case RAW_SYNC:
      MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case TL_SYNC:
      if (tl_group_all_reduce(g, send, recv, (size_t)count, TL_F32, TL_REDUCE_SUM, NULL) != TL_OK)
        fprintf(stderr, "allreduce_bench: %s\n", tl_last_error()), MPI_Abort(MPI_COMM_WORLD, 1);
      break;
    case RAW_ASYNC:
      MPI_Iallreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &mreq);
      MPI_Wait(&mreq, MPI_STATUS_IGNORE);
      break;
    case TL_ASYNC:
      if (tl_group_all_reduce(g, send, recv, (size_t)count, TL_F32, TL_REDUCE_SUM, &req) != TL_OK ||
          tl_group_wait(req) != TL_OK)
        fprintf(stderr, "allreduce_bench: %s\n", tl_last_error()), MPI_Abort(MPI_COMM_WORLD, 1);
      break;
    default:
      break;
  }
}

/* Seconds per call over `iters` calls, the slowest rank's. */
static double round_time(kind k, tl_group* g, float* send, float* recv, int count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  tl_timer t;
  tl_timer_start(&t);
  for (int i = 0; i < iters; i++) run_once(k, g, send, recv, count);
  double s = tl_timer_elapsed_s(&t) / iters, worst = 0;
  MPI_Allreduce(&s, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  long min_bytes = 4096, max_bytes = 16l << 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--min") == 0) min_bytes = atol(argv[i + 1]);
    if (strcmp(argv[i], "--max") == 0) max_bytes = atol(argv[i + 1]);
  }
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  tl_group* g = NULL;
  if (tl_group_mpi_create(MPI_COMM_WORLD, "world", &g) != TL_OK) {
    fprintf(stderr, "allreduce_bench: %s\n", tl_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  float* send = (float*)malloc((size_t)max_bytes);
  float* recv = (float*)malloc((size_t)max_bytes);
  for (long i = 0; i < max_bytes / 4; i++) send[i] = (float)(i % 13) * 0.5f + (float)rank;
  if (rank == 0) {
    printf(
        "all-reduce bus bandwidth, %d ranks, f32 sum; GB/s = 2(n-1)/n * bytes / time, best "
        "of %d alternating rounds\n",
        size, k_rounds);
    printf("%10s %6s | %10s %10s %6s | %10s %10s %6s\n", "bytes", "iters", "MPI sync", "trellis",
           "ratio", "MPI async", "trellis", "ratio");
  }
  const double factor = size > 1 ? 2.0 * (size - 1) / size : 1.0;
  for (long bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    int count = (int)(bytes / 4);
    /* about 10 ms per round, at least 3 calls: short rounds, many of them */
    run_once(RAW_SYNC, g, send, recv, count);
    double one = round_time(RAW_SYNC, g, send, recv, count, 3);
    int iters = (int)(0.01 / (one > 1e-7 ? one : 1e-7));
    if (iters < 3) iters = 3;
    if (iters > 20000) iters = 20000;
    double t[N_KINDS][k_rounds];
    for (int r = 0; r < k_rounds; r++)
      for (int i = 0; i < N_KINDS; i++) {
        int k = r % 2 ? N_KINDS - 1 - i : i; /* odd rounds backwards: no one always goes first */
        t[k][r] = round_time((kind)k, g, send, recv, count, iters);
      }
    double gbs[N_KINDS];
    for (int k = 0; k < N_KINDS; k++) {
      qsort(t[k], k_rounds, sizeof t[k][0], cmp_double);
      gbs[k] = factor * (double)bytes / t[k][0] / 1e9;
    }
    if (rank == 0)
      printf("%10ld %6d | %10.3f %10.3f %6.3f | %10.3f %10.3f %6.3f\n", bytes, iters, gbs[RAW_SYNC],
             gbs[TL_SYNC], gbs[TL_SYNC] / gbs[RAW_SYNC], gbs[RAW_ASYNC], gbs[TL_ASYNC],
             gbs[TL_ASYNC] / gbs[RAW_ASYNC]);
  }
  if (rank == 0) {
    tl_group_stats s = tl_group_stats_get(g);
    printf("trellis calls counted: %lld all-reduces, %.1f MB\n",
           (long long)s.calls[TL_GROUP_ALL_REDUCE], (double)s.bytes[TL_GROUP_ALL_REDUCE] / 1e6);
  }
  tl_group_destroy(g);
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
