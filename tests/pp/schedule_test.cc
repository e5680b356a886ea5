// Pipeline schedules: shapes of the lists, in-flight counts, no deadlock,
// and the bubble of the simulation against (p - 1) / (m + p - 1).
#include "pp/schedule.h"

#include <gtest/gtest.h>

#include <string>

namespace {

std::string Ops(tl_schedule_kind kind, int p, int s, int m) {
  tl_pp_schedule sc;
  EXPECT_EQ(tl_pp_schedule_build(kind, p, s, m, &sc), TL_OK);
  char buf[512] = {0};
  FILE* f = fmemopen(buf, sizeof buf, "w");
  tl_pp_schedule_print(&sc, f, 0);
  fclose(f);
  tl_pp_schedule_free(&sc);
  return std::string(buf);
}

TEST(Schedule, GpipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(Ops(TL_SCHEDULE_GPIPE, 2, 0, 3), "F0 F1 F2 B0 B1 B2\n");
}

TEST(Schedule, OneFOneBWarmsUpThenAlternates) {
  // 4 stages, 6 micro-batches: stage 0 warms up with 3 forwards
  EXPECT_EQ(Ops(TL_SCHEDULE_1F1B, 4, 0, 6), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5\n");
  EXPECT_EQ(Ops(TL_SCHEDULE_1F1B, 4, 3, 6), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5\n");
  EXPECT_EQ(Ops(TL_SCHEDULE_1F1B, 4, 1, 2), "F0 F1 B0 B1\n");
}

TEST(Schedule, OneFOneBHoldsAtMostPMicroBatches) {
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 16; m++)
      for (int s = 0; s < p; s++) {
        tl_pp_schedule g, o;
        ASSERT_EQ(tl_pp_schedule_build(TL_SCHEDULE_GPIPE, p, s, m, &g), TL_OK);
        ASSERT_EQ(tl_pp_schedule_build(TL_SCHEDULE_1F1B, p, s, m, &o), TL_OK);
        EXPECT_EQ(g.max_in_flight, m);
        EXPECT_LE(o.max_in_flight, p - s);
        EXPECT_LE(o.max_in_flight, m);
        // count forwards not yet backwarded while walking the list
        int held = 0, most = 0;
        for (int k = 0; k < o.n; k++) {
          held += o.instr[k].op == TL_PP_FORWARD;
          held -= o.instr[k].op == TL_PP_BACKWARD;
          most = held > most ? held : most;
        }
        EXPECT_EQ(most, o.max_in_flight);
        tl_pp_schedule_free(&g);
        tl_pp_schedule_free(&o);
      }
}

TEST(Schedule, BothAreDeadlockFreeAndMatchTheBubbleFormula) {
  for (tl_schedule_kind kind : {TL_SCHEDULE_GPIPE, TL_SCHEDULE_1F1B})
    for (int p = 1; p <= 8; p++)
      for (int m = 1; m <= 16; m++) {
        int ticks = 0;
        ASSERT_EQ(tl_pp_schedule_check(kind, p, m, &ticks), TL_OK) << tl_last_error();
        // forward 1 tick, backward 2: ideal 3m, bubble (p-1)/(m+p-1) of the step
        double bubble = 1.0 - 3.0 * m / ticks;
        EXPECT_NEAR(bubble, (p - 1.0) / (m + p - 1.0), 1e-9) << "p=" << p << " m=" << m;
      }
}

TEST(Schedule, InterleavedIsRefusedWithAMessage) {
  tl_pp_schedule s;
  EXPECT_EQ(tl_pp_schedule_build(TL_SCHEDULE_INTERLEAVED, 2, 0, 4, &s), TL_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(tl_last_error()).find("interleaved"), std::string::npos);
}

}  // namespace
