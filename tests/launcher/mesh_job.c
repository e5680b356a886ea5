/* mesh_job.c — a tiny job for the launcher tests: started by hand it spawns
 * its ranks exactly as `trellis train` does (tl_launch_maybe_spawn), each
 * rank comes up through tl_worker_init, all-reduces over the world and over
 * each of its dp, tp and pp groups, and checks every result against the
 * mesh's own arithmetic.
 *
 *   mesh_job CONFIG.json [--fail-rank R --fail-how abort|kill] [--hosts ...]
 *
 * With --fail-rank, rank R fails in the middle of a world all-reduce that
 * the others are blocked in: "abort" through tl_worker_fail, "kill" by
 * SIGKILL (no chance to say anything). The job must then end, non-zero. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/group.h"
#include "core/mesh.h"
#include "launcher/job/spawn.h"
#include "launcher/job/worker.h"

/* Sums (rank + 1) and ones over `g`, whose members are `members`. */
static void check_group(tl_group* g, const int* members, int n, const char* what) {
  float x[2] = {(float)(members[tl_group_rank(g)] + 1), 1.0f};
  if (tl_group_all_reduce(g, x, x, 2, TL_F32, TL_REDUCE_SUM, NULL) != TL_OK)
    tl_worker_fail(tl_last_error());
  float want = 0;
  for (int i = 0; i < n; i++) want += (float)(members[i] + 1);
  if (x[0] != want || x[1] != (float)n || tl_group_size(g) != n) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s group: all-reduce gave %g over %g members, expected %g over %d",
             what, x[0], x[1], want, n);
    tl_worker_fail(msg);
  }
}

int main(int argc, char** argv) {
  const char* path = NULL;
  int fail_rank = -1;
  const char* fail_how = "abort";
  for (int i = 1; i < argc; i++) {
    int n = tl_launch_option_args(argc - i, argv + i);
    if (n) {
      i += n - 1;
    } else if (strcmp(argv[i], "--fail-rank") == 0 && i + 1 < argc) {
      fail_rank = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--fail-how") == 0 && i + 1 < argc) {
      fail_how = argv[++i];
    } else if (!path) {
      path = argv[i];
    } else {
      fprintf(stderr, "mesh_job: unexpected argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (!path) {
    fprintf(stderr, "usage: mesh_job CONFIG.json [--fail-rank R --fail-how abort|kill]\n");
    return 2;
  }
  struct tl_config cfg;
  if (tl_config_load(path, &cfg) != TL_OK) {
    fprintf(stderr, "mesh_job: %s\n", tl_last_error());
    return 1;
  }
  int status = 0;
  if (tl_launch_maybe_spawn(argc, argv, (int)tl_config_ranks(&cfg.mesh), &status)) return status;

  struct tl_worker w;
  if (tl_worker_init(&cfg, &w) != TL_OK) tl_worker_fail(tl_last_error());

  int world[1 << 10];
  if (w.world_size > (int)(sizeof world / sizeof world[0])) tl_worker_fail("too many ranks");
  for (int r = 0; r < w.world_size; r++) world[r] = r;
  check_group(w.world, world, w.world_size, "world");
  for (int a = 0; a < TL_N_AXES; a++) {
    int members[1 << 10];
    int n = tl_mesh_group_ranks(&w.mesh, w.rank, (tl_axis)a, members);
    check_group(w.groups[a], members, n, tl_axis_name((tl_axis)a));
  }

  if (fail_rank >= 0) {
    /* Everyone enters a collective; rank fail_rank leaves in the middle. */
    float x[1024] = {0};
    tl_group_request* req = NULL;
    if (tl_group_all_reduce(w.world, x, x, 1024, TL_F32, TL_REDUCE_SUM, &req) != TL_OK)
      tl_worker_fail(tl_last_error());
    if (w.rank == fail_rank) {
      if (strcmp(fail_how, "kill") == 0) raise(SIGKILL);
      tl_worker_fail("injected failure (mesh_job --fail-rank)");
    }
    tl_group_wait(req);
    fprintf(stderr, "rank %d: the collective completed without rank %d\n", w.rank, fail_rank);
    return 3;
  }

  char dev[16];
  printf("rank %d of %d: dp %d tp %d pp %d, local rank %d, %s, %d threads: groups ok\n", w.rank,
         w.world_size, w.coord[TL_AXIS_DP], w.coord[TL_AXIS_TP], w.coord[TL_AXIS_PP], w.local_rank,
         tl_device_name(w.device, dev, sizeof dev), w.threads);
  fflush(stdout);
  tl_worker_finalize(&w);
  return 0;
}
