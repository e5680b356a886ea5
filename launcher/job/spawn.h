/* spawn.h — how a job starts: `trellis train CONFIG.json` typed by a person
 * becomes `mpiexec -n WORLD trellis train CONFIG.json`, and each copy it
 * starts runs as a worker (worker.h).
 *
 * A command that runs a job calls tl_launch_maybe_spawn first, with the
 * world size its config asks for. Started by hand, the process becomes the
 * job's parent: it runs the launcher (MPICH's mpiexec; srun inside a Slurm
 * allocation that is not yet running a step), waits, and returns the job's
 * exit status. Started by a launcher already (mpiexec, srun, mpirun: see
 * tl_launch_detected), it returns at once and the caller continues as one
 * rank of the job.
 *
 * Launcher options, accepted anywhere after the command name and removed
 * from the copies' arguments:
 *   --hosts h1,h2[,...]   run across these hosts (mpiexec -hosts; srun --nodelist)
 *   --hostfile FILE       hosts from a file (mpiexec -hostfile; srun --nodelist)
 * Neighbouring ranks are the tensor-parallel group and should share a
 * node: with mpiexec, hosts given with slot counts (h1:8,h2:8, or "h1:8"
 * lines) are filled one after the other; --hosts without any gets -ppn
 * ceil(ranks / hosts), which does the same (hydra alone would deal the
 * ranks out one a host in turn); a hostfile without counts is passed as it
 * is (the worker warns when tensor-parallel groups span nodes). The program
 * must exist at the same path on every host. */
#ifndef TL_LAUNCHER_SPAWN_H
#define TL_LAUNCHER_SPAWN_H

#include <signal.h>
#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How many entries at argv[0..argc) a launcher option takes: 2 for
 * "--hosts H", 1 for "--hosts=H", 0 when argv[0] is not a launcher option.
 * A command's own argument parser skips these. */
int tl_launch_option_args(int argc, char** argv);

/* Which launcher started this process, e.g. "mpiexec (PMI_RANK=3)", into
 * buf; NULL when it was started by hand. TRELLIS_SPAWNED (set in the
 * copies trellis starts) counts as a launcher, so a copy never spawns. */
const char* tl_launch_detected(char* buf, size_t size);

/* The command that starts `world_size` copies of `self` with argv[1..argc)
 * (launcher options moved to the launcher): mpiexec, or srun inside a Slurm
 * allocation. A NULL-terminated array, freed with tl_launch_command_free.
 * TL_ERR_INVALID names a launcher option without its value, or both
 * --hosts and --hostfile. */
tl_status tl_launch_command(int argc, char** argv, int world_size, const char* self, char*** out);
void tl_launch_command_free(char** cmd);

/* Returns 0 when the caller should run as a worker: it was started by a
 * launcher, or the job is one rank with no hosts named (no launcher
 * needed). Otherwise runs the job (tl_launch_command, with this program as
 * `self`), forwards SIGINT/SIGTERM/SIGHUP to it, waits, sets *exit_status
 * to the job's exit status (128 + N when killed by signal N) and returns 1.
 * When the job cannot start, says why on stderr and returns 1 with
 * *exit_status 2 (bad launcher options) or 127 (launcher not runnable).
 *
 * A job that cannot end: a rank that ends the job (its watchdog, a failure)
 * expects the launcher to stop the others, but a launcher that cannot
 * reach a node (its link down) waits for it for ever. The copies learn
 * this process's pid and host (TRELLIS_LAUNCHER="PID HOST"); a rank on
 * the same host that ends the job sends it TL_LAUNCH_RANK_ENDED first
 * (tl_launch_notify_target), and when the launcher is still running
 * TL_LAUNCH_GRACE_S later this process stops it (SIGKILL to its group),
 * says so — what it started on other nodes may be left there — and the
 * job's status is 124. */
#define TL_LAUNCH_RANK_ENDED SIGUSR2
#define TL_LAUNCH_GRACE_S 10

/* The pid of the launching `trellis` on this host, from TRELLIS_LAUNCHER,
 * or 0 where it is on another host, gone, or not trellis. */
int tl_launch_notify_target(void);
int tl_launch_maybe_spawn(int argc, char** argv, int world_size, int* exit_status);

#ifdef __cplusplus
}
#endif

#endif
