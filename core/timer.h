/* timer.h — monotonic wall-clock timing (CLOCK_MONOTONIC, never goes back). */
#ifndef TL_CORE_TIMER_H
#define TL_CORE_TIMER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds since an arbitrary fixed point. */
uint64_t tl_time_ns(void);

typedef struct tl_timer {
  uint64_t start_ns;
} tl_timer;

void tl_timer_start(tl_timer* t);
/* Seconds since tl_timer_start. */
double tl_timer_elapsed_s(const tl_timer* t);

#ifdef __cplusplus
}
#endif

#endif
