/* watchdog.h — ending a job whose communication has stopped.
 *
 * A rank that stops answering — a stopped or hung process, a dead link —
 * leaves every rank that waits for it blocked in a collective or a
 * receive for ever. The process groups (group.h) note each operation this
 * process waits in (its group, operation and bytes, and since when); a
 * thread started here looks every 100 ms, and when one has waited longer
 * than the timeout it prints the rank, its host, the group, operation and
 * bytes that are stuck and ends the process, which ends the job (the launcher stops the
 * other ranks when one exits). Rank r waits 0.2 s x min(r, 16) more, so
 * that of ranks stuck on each other (a deadlock) the lowest speaks, once.
 *
 * Only the waiting counts: a rank computing for a long time is not stuck,
 * but its peers waiting for it are, so the timeout must exceed the longest
 * time one rank can make another wait (a step's work between two
 * collectives, a checkpoint written while the others wait). */
#ifndef TL_CORE_WATCHDOG_H
#define TL_CORE_WATCHDOG_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the watchdog of this process (once; later calls change the
 * timeout): rank is the job's rank, for the message. timeout_s <= 0 stops
 * watching. */
tl_status tl_watchdog_start(double timeout_s, int rank);

/* When the watchdog ends this process it first sends `sig` to process
 * `pid` (the job's launcher on this host, which then makes sure the whole
 * job ends: launcher/job/spawn.h). pid <= 0: nobody. */
void tl_watchdog_notify(int pid, int sig);

/* What this process now waits in (group.c calls these around every
 * blocking operation and every wait); names are static strings. */
void tl_watchdog_enter(const char* group, const char* op, size_t bytes);
void tl_watchdog_leave(void);

#ifdef __cplusplus
}
#endif

#endif
