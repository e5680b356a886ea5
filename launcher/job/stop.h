/* stop.h — stopping a run cleanly on a signal.
 *
 * A cluster ends jobs with signals: Slurm sends SIGTERM at preemption and
 * at the time limit (after `--signal=USR1@T`, SIGUSR1 T seconds before),
 * and a person types Ctrl-C. Each rank catches SIGTERM, SIGINT and SIGUSR1
 * and only notes it; at the end of every step the job agrees whether any
 * rank has one (tl_stop_agree, one small all-reduce), so that every rank
 * stops after the same step, writes its checkpoint and leaves.
 *
 * A second signal ends the process at once — but only a second or more
 * after the first: a Ctrl-C reaches a rank both from the terminal and
 * through mpiexec, which forwards what it receives, and those two are one
 * request. */
#ifndef TL_LAUNCHER_JOB_STOP_H
#define TL_LAUNCHER_JOB_STOP_H

#include "core/group.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs the handlers (SIGTERM, SIGINT, SIGUSR1) in this process. */
tl_status tl_stop_install(void);

/* The signal this process has caught, or 0. */
int tl_stop_signal(void);

/* The signal any rank of `world` has caught, or 0 (the largest signal
 * number where ranks caught different ones); collective over world (NULL
 * or one rank: this process's). */
tl_status tl_stop_agree(tl_group* world, int* sig);

/* "SIGTERM", "SIGINT", "SIGUSR1", or "signal N". */
const char* tl_stop_name(int sig);

#ifdef __cplusplus
}
#endif

#endif
