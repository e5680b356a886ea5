/* timer.c */
#include "core/timer.h"

#include <time.h>

uint64_t tl_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tl_timer_start(tl_timer* t) {
  t->start_ns = tl_time_ns();
}

double tl_timer_elapsed_s(const tl_timer* t) {
  return (double)(tl_time_ns() - t->start_ns) * 1e-9;
}
