// Monotonic timers: never go back, and measure a sleep as at least its length.
#include "core/timer.h"

#include <gtest/gtest.h>
#include <time.h>

TEST(Timer, IsMonotonicAndMeasuresElapsedTime) {
  uint64_t a = tl_time_ns(), b = tl_time_ns();
  EXPECT_LE(a, b);
  tl_timer t;
  tl_timer_start(&t);
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, nullptr);
  EXPECT_GE(tl_timer_elapsed_s(&t), 0.019);  // a lower bound only: machines are shared
}
