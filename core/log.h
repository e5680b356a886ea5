/* log.h — leveled logging to stderr with a rank prefix.
 *
 * Lines look like "[trellis 1/4 W] message". Which levels print comes from
 * TRELLIS_LOG_LEVEL; info and debug lines print only on the ranks that
 * TRELLIS_LOG_RANKS names (rank 0 by default) so that N ranks do not print
 * the same progress N times. Warnings and errors print on every rank. */
#ifndef TL_CORE_LOG_H
#define TL_CORE_LOG_H

#include "core/env.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Set once the process knows its place; before that lines carry no rank. */
void tl_log_set_rank(int rank, int n_ranks);

int tl_log_enabled(tl_log_level level);

void tl_log(tl_log_level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define TL_LOG_ERROR(...) tl_log(TL_LOG_ERROR, __VA_ARGS__)
#define TL_LOG_WARN(...) tl_log(TL_LOG_WARN, __VA_ARGS__)
#define TL_LOG_INFO(...) tl_log(TL_LOG_INFO, __VA_ARGS__)
#define TL_LOG_DEBUG(...) tl_log(TL_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
