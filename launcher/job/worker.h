/* worker.h — one rank of a job: MPI started, its place on the mesh, its
 * process groups, its device and its CPU threads.
 *
 * Every rank of `trellis train` (and of any command that runs a job) calls
 * tl_worker_init after tl_launch_maybe_spawn returned 0, with the loaded
 * config. It is collective over the job: every rank must call it.
 *
 * Failing: a rank that cannot go on calls tl_worker_fail with the reason.
 * It prints the reason with its rank and calls MPI_Abort, which ends every
 * rank of the job (and mpiexec with a non-zero status) instead of leaving
 * the others waiting in a collective for a rank that will never come. */
#ifndef TL_LAUNCHER_WORKER_H
#define TL_LAUNCHER_WORKER_H

#include <stdbool.h>

#include "core/config.h"
#include "core/device.h"
#include "core/group.h"
#include "core/mesh.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tl_worker {
  int rank, world_size;
  int local_rank, local_size; /* among the ranks on this node */
  tl_mesh mesh;
  int coord[TL_N_AXES]; /* this rank's (dp, tp, pp, cp) coordinates, by tl_axis */
  /* MPI groups, for host buffers (losses, metrics, control): the whole job
   * and this rank's dp, tp, pp and cp groups (by tl_axis), and its data
   * group (dp x cp) at TL_MESH_DATA: core/group.h's tl_group_split_mesh. */
  tl_group* world;
  tl_group* host_groups[TL_MESH_GROUPS];
  /* The groups for buffers on `device`, alike: NCCL groups on CUDA, the
   * same pointers as host_groups on the CPU. */
  tl_group* groups[TL_MESH_GROUPS];
  tl_device device; /* cpu, or cuda:<local rank> */
  int threads;      /* CPU threads per rank, now in effect (tl_env) */
  bool started_mpi; /* whether tl_worker_init called MPI_Init */
};

/* Collective over the job. Starts MPI if it is not started (threads:
 * MPI_THREAD_FUNNELED), checks that the job has dp * tp * pp ranks, finds
 * this rank's node-local rank (an MPI_COMM_TYPE_SHARED split), its mesh
 * coordinates, its groups (all ranks in rank order, see mesh.h), its device
 * (device.type "cuda": the GPU numbered by the local rank) and its CPU
 * threads (device.threads, else TRELLIS_NUM_THREADS, else the node's online
 * cores / local ranks, at least 1), and tags log lines with the rank.
 * On failure *out is zeroed; the caller should tl_worker_fail. */
tl_status tl_worker_init(const struct tl_config* cfg, struct tl_worker* out);

/* The job's nodes: `node` holds this rank's node (the ranks sharing its
 * machine), `rail` this rank's local rank on every node (one member a
 * node), each for buffers on w->device (NCCL groups on CUDA, over the
 * host_* MPI groups kept beside them; the MPI ones split from w->world,
 * waiting as it does). Collective over the job. Fails, naming the counts
 * and setting `uneven`, when the nodes run different numbers of ranks. */
struct tl_node_groups {
  int nodes, per_node;
  bool uneven;                     /* the failure: nodes running unlike numbers of ranks */
  tl_group *node, *rail;           /* for buffers on the worker's device */
  tl_group *host_node, *host_rail; /* MPI, for host buffers */
};
tl_status tl_worker_node_groups(const struct tl_worker* w, struct tl_node_groups* out);
void tl_worker_node_groups_destroy(struct tl_node_groups* g);

/* Destroys the groups and, when tl_worker_init started MPI, finalises it.
 * Collective: every rank calls it at the end of a successful run. */
void tl_worker_finalize(struct tl_worker* w);

/* The end of a rank that exits with status `rc` next: tl_worker_finalize,
 * and returns rc — except where MPI_Finalize is known to hang: a job of
 * several ranks whose MPI moves bytes over UCX's TCP transport (UCX_TLS
 * names tcp: jobs across hosts without InfiniBand, the emulated nodes of
 * tools/cluster.sh). There MPICH 4.0.2 over UCX 1.13 (Debian's) hangs in
 * MPI_Finalize in about one job of three, a rank polling a TCP endpoint
 * that nobody answers; so the ranks meet in a barrier (every message of
 * the job has then been delivered), flush their output and _exit(rc),
 * which hydra takes as the job's end. Never returns in that case. */
int tl_worker_end(struct tl_worker* w, int rc);

/* Prints "rank R of N failed: msg" (through the error log) and ends the
 * whole job: when MPI is running it waits 0.3 s for the message to pass
 * through the launcher, then MPI_Abort; else exit(1). Never returns. */
void tl_worker_fail(const char* msg) __attribute__((noreturn));
/* Ends this rank without a word when another rank reports the failure
 * (TL_ERR_PEER): waits for that rank's abort, and aborts the job itself if
 * none comes within a few seconds. */
void tl_worker_fail_quietly(void) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif

#endif
