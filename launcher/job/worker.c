/* worker.c — a rank's start-up, in the order the pieces depend on each
 * other: MPI, the job's size against the mesh, the node-local rank, the
 * mesh groups over MPI, then the device and its groups. Also the abort path:
 * the one place besides main() that ends the process. */
#include "launcher/job/worker.h"

#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "core/env.h"
#include "core/group_emul.h"
#include "core/group_mpi.h"
#include "core/group_nccl.h"
#include "core/log.h"
#include "core/watchdog.h"
#include "kernels/backend.h"
#include "launcher/job/spawn.h"

/* This rank's place on its node, and the node's name: the lowest world
 * rank on it. */
static tl_status local_rank(int world_rank, int* rank, int* size, int* node_id) {
  MPI_Comm node = MPI_COMM_NULL;
  TL_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rc = MPI_Comm_rank(node, rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, size);
  if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&world_rank, node_id, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return tl_mpi_error(rc, "MPI_Comm_rank", __FILE__, __LINE__);
  return TL_OK;
}

/* Tensor parallelism's collectives run at every layer and are planned on a
 * node's own links (planner: tp within a node unless allowed across): a
 * launcher that dealt neighbouring ranks out to different nodes (hydra's
 * -hosts without slot counts, srun's cyclic distribution) would send them
 * over the network. Said once, by rank 0; the job goes on. */
static tl_status warn_if_tp_spans_nodes(const struct tl_worker* w, int node_id) {
  if (w->mesh.size[TL_AXIS_TP] <= 1) return TL_OK;
  MPI_Comm tp = tl_group_mpi_comm(w->host_groups[TL_AXIS_TP]);
  int lo = node_id, hi = node_id, spans = 0, any = 0;
  TL_MPI_CHECK(MPI_Allreduce(&node_id, &lo, 1, MPI_INT, MPI_MIN, tp));
  TL_MPI_CHECK(MPI_Allreduce(&node_id, &hi, 1, MPI_INT, MPI_MAX, tp));
  spans = lo != hi;
  TL_MPI_CHECK(MPI_Allreduce(&spans, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  if (any && w->rank == 0)
    TL_LOG_WARN(
        "%d of the job's ranks are in tensor-parallel groups that span nodes (the "
        "launcher placed neighbouring ranks on different nodes): their collectives, "
        "at every layer, cross the network. Keep each node's ranks consecutive: "
        "--hosts h1:8,h2:8, mpiexec -ppn N, srun's block distribution",
        any);
  return TL_OK;
}

static int pick_threads(const struct tl_config* cfg, int local_size) {
  if (cfg->device.threads > 0) return cfg->device.threads;
  if (tl_env()->num_threads > 0) return tl_env()->num_threads;
  long cores = tl_cpu_cores();
  int n = (int)(cores > 0 ? cores : 1) / (local_size > 0 ? local_size : 1);
  return n < 1 ? 1 : n;
}

static const char* group_name(int slot) {
  return slot == TL_MESH_DATA ? "data" : tl_axis_name((tl_axis)slot);
}

/* A group for the GPU's buffers over `host`'s members: NCCL's, or on
 * emulated GPUs (TRELLIS_EMULATE=cuda) an MPI group with NCCL's ordering. */
static tl_status device_group(const struct tl_worker* w, tl_group* host, const char* name,
                              tl_group** out) {
  if (tl_env()->emulate_cuda) return tl_group_emul_create(host, w->device, name, out);
  return tl_group_nccl_create(host, w->device.index, name, out);
}

static void destroy_groups(struct tl_worker* w) {
  if (w->groups[TL_AXIS_DP] != w->host_groups[TL_AXIS_DP]) tl_group_destroy_mesh(w->groups);
  tl_group_destroy_mesh(w->host_groups);
  for (int a = 0; a < TL_MESH_GROUPS; a++) w->groups[a] = NULL;
  tl_group_destroy(w->world);
  w->world = NULL;
}

tl_status tl_worker_init(const struct tl_config* cfg, struct tl_worker* out) {
  memset(out, 0, sizeof *out);
  struct tl_worker w;
  memset(&w, 0, sizeof w);
  tl_status st = TL_OK;

  /* 1. MPI, with errors returned to us rather than fatal inside MPI */
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    TL_MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
    w.started_mpi = true;
  }
  TL_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  TL_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  TL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w.world_size));
  tl_log_set_rank(w.rank, w.world_size);

  /* 2. the job must be the mesh */
  TL_CHECK(tl_config_check_world(cfg, w.world_size));
  TL_CHECK(tl_mesh_from_config(&cfg->mesh, &w.mesh));
  tl_mesh_coords(&w.mesh, w.rank, w.coord);
  int node_id = 0;
  TL_CHECK(local_rank(w.rank, &w.local_rank, &w.local_size, &node_id));

  /* 3. CPU threads, before any CPU backend reads them */
  w.threads = pick_threads(cfg, w.local_size);
  tl_env_set_num_threads(w.threads);

  /* 4. the groups over MPI */
  TL_CHECK(tl_group_mpi_create(MPI_COMM_WORLD, "world", &w.world));
  TL_CHECK_GOTO(tl_group_split_mesh(w.world, &w.mesh, w.host_groups), st, fail);
  TL_CHECK_GOTO(warn_if_tp_spans_nodes(&w, node_id), st, fail);

  /* 5. the device, and groups for its buffers */
  if (cfg->device.type == TL_DEVICE_CUDA) {
    const char* why = NULL;
    int n = tl_cuda_device_count(&why);
    if (n == 0) {
      st = TL_ERRF(TL_ERR_NO_DEVICE, "device.type is \"cuda\" but %s", why);
      goto fail;
    }
    if (w.local_rank >= n) {
      st = TL_ERRF(TL_ERR_NO_DEVICE,
                   "device.type is \"cuda\": local rank %d needs cuda:%d, but this node has %d "
                   "GPU%s (%d ranks run here: at most one per GPU)",
                   w.local_rank, w.local_rank, n, n == 1 ? "" : "s", w.local_size);
      goto fail;
    }
    w.device = tl_cuda(w.local_rank);
    if (tl_env()->emulate_nccl && !tl_env()->emulate_cuda && w.rank == 0)
      TL_LOG_WARN(
          "TRELLIS_EMULATE=nccl emulates NCCL's ordering on CPU jobs; this job's groups "
          "are NCCL's own, so it changes nothing here");
    for (int a = 0; a < TL_MESH_GROUPS; a++)
      if (a == TL_MESH_DATA && w.host_groups[a] == w.host_groups[TL_AXIS_DP])
        w.groups[a] = w.groups[TL_AXIS_DP];
      else
        TL_CHECK_GOTO(device_group(&w, w.host_groups[a], group_name(a), &w.groups[a]), st, fail);
  } else {
    w.device = tl_cpu();
    if (tl_env()->emulate_cuda && w.rank == 0)
      TL_LOG_WARN(
          "TRELLIS_EMULATE=cuda emulates GPUs for device.type \"cuda\"; this job's device is "
          "the CPU, so only its groups are emulated (NCCL's ordering)");
    for (int a = 0; a < TL_MESH_GROUPS; a++)
      if (a == TL_MESH_DATA && w.host_groups[a] == w.host_groups[TL_AXIS_DP])
        w.groups[a] = w.groups[TL_AXIS_DP];
      else if (tl_env()->emulate_nccl) /* the mesh's groups with NCCL's ordering (group_emul.h) */
        TL_CHECK_GOTO(tl_group_emul_create(w.host_groups[a], w.device, group_name(a), &w.groups[a]),
                      st, fail);
      else
        w.groups[a] = w.host_groups[a];
  }

  /* a peer that stops answering ends the job, naming what waits; the
   * launcher on this host hears of it, in case it cannot end the job
   * (spawn.h) */
  if (w.world_size > 1) TL_CHECK_GOTO(tl_watchdog_start(cfg->parallel.timeout_s, w.rank), st, fail);
  tl_watchdog_notify(tl_launch_notify_target(), TL_LAUNCH_RANK_ENDED);

  char dev[16], host[MPI_MAX_PROCESSOR_NAME] = "?";
  int host_len = 0;
  if (MPI_Get_processor_name(host, &host_len) != MPI_SUCCESS) snprintf(host, sizeof host, "?");
  TL_LOG_DEBUG("rank %d on %s: dp %d, tp %d, pp %d, cp %d; local rank %d of %d; %s; %d thread%s",
               w.rank, host, w.coord[TL_AXIS_DP], w.coord[TL_AXIS_TP], w.coord[TL_AXIS_PP],
               w.coord[TL_AXIS_CP], w.local_rank, w.local_size,
               tl_device_name(w.device, dev, sizeof dev), w.threads, w.threads == 1 ? "" : "s");
  *out = w;
  return TL_OK;

fail:
  destroy_groups(&w);
  return st;
}

void tl_worker_node_groups_destroy(struct tl_node_groups* g) {
  if (g->node != g->host_node) tl_group_destroy(g->node);
  if (g->rail != g->host_rail) tl_group_destroy(g->rail);
  tl_group_destroy(g->host_node);
  tl_group_destroy(g->host_rail);
  memset(g, 0, sizeof *g);
}

tl_status tl_worker_node_groups(const struct tl_worker* w, struct tl_node_groups* out) {
  memset(out, 0, sizeof *out);
  /* the node count (the ranks that are their node's first), and the
   * fewest and most ranks a node runs */
  int v[3] = {w->local_rank == 0, -w->local_size, w->local_size}, r[3];
  TL_MPI_CHECK(MPI_Allreduce(v, r, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
  TL_MPI_CHECK(MPI_Allreduce(v + 1, r + 1, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  out->nodes = r[0], out->per_node = r[2];
  if (-r[1] != r[2]) {
    out->uneven = true;
    return TL_ERRF(TL_ERR_INVALID,
                   "the job's %d nodes run %d to %d ranks each, where each node needs as many "
                   "(%d ranks: a multiple of the %d nodes, placed evenly)",
                   r[0], -r[1], r[2], w->world_size, r[0]);
  }
  /* split from the world's group, whose way of waiting (core/group_mpi.c:
   * yield on crowded nodes) they keep: a rail's members are alone on their
   * nodes in it, and would otherwise spin among their node's other ranks */
  int node_id = 0;
  TL_CHECK(local_rank(w->rank, &v[0], &v[1], &node_id));
  struct tl_node_groups g;
  memset(&g, 0, sizeof g);
  g.nodes = r[0], g.per_node = r[2];
  tl_status st = tl_group_split(w->world, node_id, w->rank, "node", &g.host_node);
  if (st == TL_OK) st = tl_group_split(w->world, w->local_rank, w->rank, "rail", &g.host_rail);
  g.node = g.host_node, g.rail = g.host_rail;
  if (st == TL_OK && w->device.type == TL_DEVICE_CUDA) {
    g.node = g.rail = NULL;
    st = device_group(w, g.host_node, "node", &g.node);
    if (st == TL_OK) st = device_group(w, g.host_rail, "rail", &g.rail);
  }
  if (st != TL_OK) {
    tl_worker_node_groups_destroy(&g);
    return st;
  }
  *out = g;
  return TL_OK;
}

void tl_worker_finalize(struct tl_worker* w) {
  destroy_groups(w);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (w->started_mpi && !finalized) MPI_Finalize();
  memset(w, 0, sizeof *w);
}

/* UCX_TLS naming TCP: MPI_Finalize may hang (worker.h). */
static bool finalize_may_hang(void) {
  const char* tls = getenv("UCX_TLS");
  return tls && strstr(tls, "tcp") != NULL;
}

int tl_worker_end(struct tl_worker* w, int rc) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (w->started_mpi && !finalized && w->world_size > 1 && finalize_may_hang()) {
    destroy_groups(w);
    MPI_Barrier(MPI_COMM_WORLD);
    fflush(NULL);
    _exit(rc);
  }
  tl_worker_finalize(w);
  return rc;
}

void tl_worker_fail(const char* msg) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = -1, size = 0;
  if (initialized && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (rank >= 0)
    TL_LOG_ERROR("rank %d of %d failed: %s; stopping every rank", rank, size, msg);
  else
    TL_LOG_ERROR("%s", msg);
  fflush(stdout);
  fflush(stderr);
  if (initialized && !finalized) {
    /* MPI_Abort makes mpiexec kill every rank at once, and output still on
     * its way through the launcher's pipes is lost with them: give the
     * message a moment to get out first. */
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    const int launcher = tl_launch_notify_target();
    if (launcher > 0) kill(launcher, TL_LAUNCH_RANK_ENDED);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  exit(1);
}

void tl_worker_fail_quietly(void) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  fflush(stdout);
  fflush(stderr);
  if (initialized && !finalized) {
    /* the reporting rank prints, pauses 0.3 s and aborts the job */
    struct timespec pause = {3, 0};
    nanosleep(&pause, NULL);
    const int launcher = tl_launch_notify_target();
    if (launcher > 0) kill(launcher, TL_LAUNCH_RANK_ENDED);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  exit(1);
}
