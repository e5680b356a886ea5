// Pipeline schedules: shapes of the lists, in-flight counts, no deadlock,
// and the bubble of the simulation against (p - 1) / (m + p - 1) and, for
// zero-bubble, against 1F1B's and Qi et al.'s (p - 1)(F + B - W); the
// interleaved schedule's against (p - 1) / v.
#include "pp/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

// The passes of stage s's list (v chunks a stage: the interleaved kind).
std::string Ops(tl_schedule_kind kind, int p, int s, int m, int v = 1) {
  tl_pp_schedule sc;
  EXPECT_EQ(tl_pp_schedule_build_costs(kind, p, s, m, v, nullptr, &sc), TL_OK) << tl_last_error();
  char buf[4096] = {0};
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

TEST(Schedule, ZeroBubbleFillsTheBubbleWithWeightPasses) {
  // stage 0 warms up as 1F1B does, then Ws wait for moments without a B or
  // an F; the last stage defers its first Ws into its wait for stage 0
  EXPECT_EQ(Ops(TL_SCHEDULE_ZERO_BUBBLE, 4, 0, 6),
            "F0 F1 F2 F3 B0 W0 B1 F4 B2 W1 B3 F5 W2 W3 B4 W4 B5 W5\n");
  EXPECT_EQ(Ops(TL_SCHEDULE_ZERO_BUBBLE, 4, 3, 6),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 W1 F4 B4 W2 W3 F5 B5 W4 W5\n");
  for (int p = 1; p <= 8; p++)
    for (int m = 1; m <= 16; m++) {
      int zb = 0, one = 0;
      ASSERT_EQ(tl_pp_schedule_check(TL_SCHEDULE_ZERO_BUBBLE, p, m, &zb), TL_OK) << tl_last_error();
      ASSERT_EQ(tl_pp_schedule_check(TL_SCHEDULE_1F1B, p, m, &one), TL_OK);
      // in ticks of F = B = W = 1 (1F1B's backward is B + W): 1F1B idles
      // 3(p - 1); zero-bubble between Qi et al.'s p - 1 and 2(p - 1)
      int bubble = zb - 3 * m, priced = 0;
      ASSERT_EQ(tl_pp_schedule_ticks(TL_SCHEDULE_ZERO_BUBBLE, p, m, 1, nullptr, &priced), TL_OK);
      EXPECT_EQ(priced, zb) << "what the planner prices is what the check simulates";
      ASSERT_EQ(tl_pp_schedule_ticks(TL_SCHEDULE_1F1B, p, m, 1, nullptr, &priced), TL_OK);
      EXPECT_EQ(priced, one);
      // with a block's costs (GPT-2's passes: B a little over F, W under):
      // still deadlock-free and what the planner prices
      const tl_pp_costs c = {8, 9, 7};
      int zc = 0, oc = 0;
      ASSERT_EQ(tl_pp_schedule_check_costs(TL_SCHEDULE_ZERO_BUBBLE, p, m, 1, &c, &zc), TL_OK)
          << tl_last_error();
      ASSERT_EQ(tl_pp_schedule_ticks(TL_SCHEDULE_ZERO_BUBBLE, p, m, 1, &c, &priced), TL_OK);
      EXPECT_EQ(priced, zc) << "p=" << p << " m=" << m;
      ASSERT_EQ(tl_pp_schedule_check_costs(TL_SCHEDULE_1F1B, p, m, 1, &c, &oc), TL_OK);
      if (p > 1) {
        EXPECT_LT(zc, oc) << "p=" << p << " m=" << m;
      }
      EXPECT_EQ(one - 3 * m, 3 * (p - 1));
      EXPECT_GE(bubble, p - 1) << "p=" << p << " m=" << m;
      EXPECT_LE(bubble, 2 * (p - 1)) << "p=" << p << " m=" << m;
      if (p > 1) {
        EXPECT_LT(bubble, one - 3 * m);
      }
      for (int s = 0; s < p; s++) {
        tl_pp_schedule z;
        ASSERT_EQ(tl_pp_schedule_build(TL_SCHEDULE_ZERO_BUBBLE, p, s, m, &z), TL_OK);
        // a micro-batch is held from its F to its W: never more than 1F1B's
        // first stage holds, and each W after its B
        int held = 0, most = 0, fwd = 0, bwd = 0, wgt = 0;
        for (int k = 0; k < z.n; k++) {
          tl_pp_op op = z.instr[k].op;
          int i = z.instr[k].micro;
          if (op == TL_PP_FORWARD) {
            EXPECT_EQ(i, fwd++);
          }
          if (op == TL_PP_BACKWARD) {
            EXPECT_EQ(i, bwd++);
          }
          if (op == TL_PP_WEIGHT) {
            EXPECT_EQ(i, wgt++);
            EXPECT_LE(wgt, bwd);
          }
          held += op == TL_PP_FORWARD;
          held -= op == TL_PP_WEIGHT;
          most = held > most ? held : most;
        }
        EXPECT_EQ(wgt, m);
        EXPECT_EQ(most, z.max_in_flight);
        EXPECT_EQ(most, tl_pp_schedule_in_flight(TL_SCHEDULE_ZERO_BUBBLE, p, s, m));
        EXPECT_LE(most, std::min(p, m));
        tl_pp_schedule_free(&z);
      }
    }
}

TEST(Schedule, InterleavedGoesRoundThePipelineInGroupsOfPMicroBatches) {
  // 2 stages, 2 chunks each, 4 micro-batches: "F1.0" is micro-batch 1's
  // forward of chunk 0; stage 0 warms up with 2 (p - 1) + (v - 1) p = 4
  // forwards, the backwards take the chunks in reverse
  EXPECT_EQ(Ops(TL_SCHEDULE_INTERLEAVED, 2, 0, 4, 2),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0\n");
  EXPECT_EQ(Ops(TL_SCHEDULE_INTERLEAVED, 2, 1, 4, 2),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0\n");
}

TEST(Schedule, InterleavedIsDeadlockFreeWithABubbleOfOneVth) {
  for (int v = 2; v <= 4; v++)
    for (int p = 2; p <= 8; p++)
      for (int m = p; m <= 16; m += p) {
        // in ticks of one chunk's passes (F 1, B 2): 1F1B's bubble is
        // 3 (p - 1) of a whole stage's passes, v times as many chunk ticks;
        // interleaving idles 3 (p - 1): (p - 1) / (v m + p - 1) of the step
        int ticks = 0, one = 0;
        ASSERT_EQ(tl_pp_schedule_check_costs(TL_SCHEDULE_INTERLEAVED, p, m, v, nullptr, &ticks),
                  TL_OK)
            << tl_last_error();
        ASSERT_EQ(tl_pp_schedule_check(TL_SCHEDULE_1F1B, p, m, &one), TL_OK);
        EXPECT_EQ(ticks - 3 * m * v, 3 * (p - 1)) << "v=" << v << " p=" << p << " m=" << m;
        EXPECT_EQ((one - 3 * m) * v, v * 3 * (p - 1));
        int priced = 0;
        ASSERT_EQ(tl_pp_schedule_ticks(TL_SCHEDULE_INTERLEAVED, p, m, v, nullptr, &priced), TL_OK);
        EXPECT_EQ(priced, ticks);
        // with a block's costs too
        const tl_pp_costs c = {8, 9, 7};
        ASSERT_EQ(tl_pp_schedule_check_costs(TL_SCHEDULE_INTERLEAVED, p, m, v, &c, &ticks), TL_OK)
            << tl_last_error();
        EXPECT_EQ(ticks - 24 * m * v, 24 * (p - 1)) << "v=" << v << " p=" << p << " m=" << m;
        ASSERT_EQ(tl_pp_schedule_ticks(TL_SCHEDULE_INTERLEAVED, p, m, v, &c, &priced), TL_OK);
        EXPECT_EQ(priced, ticks) << "what the planner prices is what the check simulates";
        for (int s = 0; s < p; s++) {
          tl_pp_schedule x;
          ASSERT_EQ(tl_pp_schedule_build_costs(TL_SCHEDULE_INTERLEAVED, p, s, m, v, nullptr, &x),
                    TL_OK);
          EXPECT_EQ(x.n_chunks, v);
          // each chunk runs its micro-batches in order, forwards and
          // backwards, and holds what the schedule says
          int fwd[TL_PP_MAX_CHUNKS] = {0}, bwd[TL_PP_MAX_CHUNKS] = {0};
          int held[TL_PP_MAX_CHUNKS] = {0}, most[TL_PP_MAX_CHUNKS] = {0}, sum = 0, top = 0;
          int now = 0, peak = 0;  // all chunks' at once
          for (int k = 0; k < x.n; k++) {
            int c = x.instr[k].chunk, i = x.instr[k].micro;
            ASSERT_GE(c, 0);
            ASSERT_LT(c, v);
            if (x.instr[k].op == TL_PP_FORWARD) {
              EXPECT_EQ(i, fwd[c]++);
              held[c]++;
              peak = std::max(peak, ++now);
            }
            if (x.instr[k].op == TL_PP_BACKWARD) {
              EXPECT_EQ(i, bwd[c]++);
              held[c]--;
              now--;
            }
            most[c] = std::max(most[c], held[c]);
          }
          for (int c = 0; c < v; c++) {
            EXPECT_EQ(fwd[c], m);
            EXPECT_EQ(bwd[c], m);
            EXPECT_EQ(most[c], x.chunk_in_flight[c]);
            sum += most[c];
            top = std::max(top, most[c]);
          }
          EXPECT_EQ(top, x.max_in_flight);
          // what the planner counts without the list
          int counted[TL_PP_MAX_CHUNKS];
          EXPECT_EQ(tl_pp_schedule_chunk_in_flight(p, s, m, v, counted), sum);
          for (int c = 0; c < v; c++) {
            EXPECT_EQ(counted[c], most[c]) << "v=" << v << " p=" << p << " m=" << m << " s=" << s;
          }
          EXPECT_EQ(sum,
                    tl_pp_schedule_in_flight_costs(TL_SCHEDULE_INTERLEAVED, p, s, m, v, nullptr));
          // Megatron-LM's warm-up: 2 (p - s - 1) + (v - 1) p forwards, one
          // more before the first backward (each chunk keeps executors for
          // its own most, `sum`, a little more than are ever held at once)
          EXPECT_EQ(peak, std::min(2 * (p - s - 1) + (v - 1) * p + 1, m * v));
          EXPECT_GE(sum, peak);
          tl_pp_schedule_free(&x);
        }
      }
}

TEST(Schedule, InterleavedRefusesWhatItCannotOrder) {
  tl_pp_schedule s;
  EXPECT_EQ(tl_pp_schedule_build(TL_SCHEDULE_INTERLEAVED, 2, 0, 4, &s), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("chunks"), std::string::npos);
  EXPECT_EQ(tl_pp_schedule_build_costs(TL_SCHEDULE_INTERLEAVED, 2, 0, 3, 2, nullptr, &s),
            TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("multiple of the stages"), std::string::npos);
  EXPECT_EQ(tl_pp_schedule_build_costs(TL_SCHEDULE_INTERLEAVED, 1, 0, 4, 2, nullptr, &s),
            TL_ERR_INVALID);
  EXPECT_EQ(tl_pp_schedule_build_costs(TL_SCHEDULE_1F1B, 2, 0, 4, 2, nullptr, &s), TL_ERR_INVALID);
}

TEST(Schedule, ForwardOnlyListsVisitEveryChunk) {
  tl_pp_schedule s;
  ASSERT_EQ(tl_pp_schedule_build_forward(2, 1, 2, 2, &s), TL_OK);
  char buf[256] = {0};
  FILE* f = fmemopen(buf, sizeof buf, "w");
  tl_pp_schedule_print(&s, f, 1);
  fclose(f);
  EXPECT_EQ(std::string(buf), "ra0.0 F0.0 sa0.0 ra0.1 F0.1 ra1.0 F1.0 sa1.0 ra1.1 F1.1\n");
  tl_pp_schedule_free(&s);
}

}  // namespace

namespace {

// Zero-bubble's greedy simulation as a scan of every stage at every time a
// pass ends (the definition pp/schedule.c's event-driven one must keep):
// each stage's passes (F, B, W and the micro-batch), its most held, the end.
struct ZbRef {
  std::vector<std::string> lists;
  std::vector<int> held;
  int ticks = 0;
};

ZbRef ZeroBubbleScan(int p, int m, tl_pp_costs c) {
  ZbRef r;
  r.lists.assign(p, "");
  r.held.assign(p, 0);
  std::vector<int> fdone(p * m, -1), bdone(p * m, -1), nf(p), nb(p), nw(p), busy(p), h(p);
  const int bound = std::min(p, m);
  int left = 3 * p * m;
  for (int now = 0; left > 0; now++) {
    for (int s = 0; s < p; s++) {
      if (busy[s] > now) continue;
      int b = nb[s], f = nf[s], took;
      int grad_at = b < nf[s] ? (s == p - 1 ? fdone[s * m + b] : bdone[(s + 1) * m + b]) : -1;
      if (grad_at >= 0 && grad_at <= now) {
        r.lists[s] += "B" + std::to_string(b) + " ";
        took = c.backward, bdone[s * m + b] = now + took, nb[s]++;
      } else if (f < m && f - nw[s] < bound &&
                 (s == 0 || (fdone[(s - 1) * m + f] >= 0 && fdone[(s - 1) * m + f] <= now))) {
        r.lists[s] += "F" + std::to_string(f) + " ";
        took = c.forward, fdone[s * m + f] = now + took, nf[s]++;
        r.held[s] = std::max(r.held[s], ++h[s]);
      } else if (nw[s] < nb[s]) {
        r.lists[s] += "W" + std::to_string(nw[s]) + " ";
        nw[s]++, h[s]--, took = c.weight;
      } else {
        continue;
      }
      busy[s] = now + took;
      left--;
    }
  }
  for (int s = 0; s < p; s++) r.ticks = std::max(r.ticks, busy[s]);
  return r;
}

}  // namespace

// The event-driven zero-bubble simulation gives the scan's lists, counts
// and length for every (p, m, costs) tried.
TEST(Schedule, ZeroBubbleEventsAreTheScan) {
  const tl_pp_costs costs[] = {{1, 1, 1}, {8, 8, 8}, {8, 13, 8}, {3, 5, 2}, {8, 11, 5}, {2, 1, 7}};
  int tried = 0;
  for (int p : {1, 2, 3, 4, 7, 8, 13, 16, 64})
    for (int m : {1, 2, 3, 5, 8, 9, 16, 33, 64})
      for (const tl_pp_costs& c : costs) {
        ZbRef want = ZeroBubbleScan(p, m, c);
        int ticks = 0;
        ASSERT_EQ(tl_pp_schedule_ticks(TL_SCHEDULE_ZERO_BUBBLE, p, m, 1, &c, &ticks), TL_OK);
        EXPECT_EQ(ticks, want.ticks) << p << " stages, " << m << " micro-batches";
        for (int s = 0; s < p; s++) {
          EXPECT_EQ(tl_pp_schedule_in_flight_costs(TL_SCHEDULE_ZERO_BUBBLE, p, s, m, 1, &c),
                    want.held[s])
              << p << " stages, " << m << " micro-batches, stage " << s;
          tl_pp_schedule sc;
          ASSERT_EQ(tl_pp_schedule_build_costs(TL_SCHEDULE_ZERO_BUBBLE, p, s, m, 1, &c, &sc),
                    TL_OK);
          std::string got;
          for (int i = 0; i < sc.n; i++) {
            const tl_pp_instr& in = sc.instr[i];
            if (in.op == TL_PP_FORWARD) got += "F" + std::to_string(in.micro) + " ";
            if (in.op == TL_PP_BACKWARD) got += "B" + std::to_string(in.micro) + " ";
            if (in.op == TL_PP_WEIGHT) got += "W" + std::to_string(in.micro) + " ";
          }
          tl_pp_schedule_free(&sc);
          ASSERT_EQ(got, want.lists[s]) << p << " stages, " << m << " micro-batches, stage " << s;
        }
        tried++;
      }
  EXPECT_EQ(tried, 9 * 9 * 6);
}

// NCCL's sends are unbuffered and a group's operations run in issue order:
// on one stream per pipeline group, issued one at a time, 1F1B's steady
// state (stage s sends an activation then receives a gradient, stage s + 1
// sends a gradient then receives an activation) deadlocks, as do
// interleaved and zero-bubble; GPipe, whose sends go one way at a time,
// does not. Grouping each run of consecutive exchanges (Megatron-LM's
// batched pairs) still deadlocks most lists, the runtime waiting for an
// executor's sends before it writes the executor's memory again; a stream
// per sender, receiver and payload (the runtime's links) completes them
// all, as buffered sends do.
TEST(Schedule, EveryScheduleCompletesOnUnbufferedSendsOverItsOwnLinks) {
  const tl_pp_costs costs[] = {{1, 1, 1}, {8, 13, 8}, {2, 1, 7}};
  int checked = 0, alone[4] = {0, 0, 0, 0}, grouped[4] = {0, 0, 0, 0};
  for (tl_schedule_kind kind :
       {TL_SCHEDULE_GPIPE, TL_SCHEDULE_1F1B, TL_SCHEDULE_INTERLEAVED, TL_SCHEDULE_ZERO_BUBBLE})
    for (int p = 2; p <= 8; p++)
      for (int m = 1; m <= 16; m++)
        for (int v : {1, 2, 3})
          for (const tl_pp_costs& c : costs) {
            if ((kind == TL_SCHEDULE_INTERLEAVED) != (v > 1)) continue;
            if (kind == TL_SCHEDULE_INTERLEAVED && m % p) continue;
            for (tl_pp_transport t : {TL_PP_SENDS_BUFFERED, TL_PP_SENDS_PER_LINK})
              ASSERT_EQ(tl_pp_schedule_check_transport(kind, p, m, v, &c, t), TL_OK)
                  << tl_last_error();
            alone[kind] +=
                tl_pp_schedule_check_transport(kind, p, m, v, &c, TL_PP_SENDS_EACH_ALONE) != TL_OK;
            grouped[kind] +=
                tl_pp_schedule_check_transport(kind, p, m, v, &c, TL_PP_SENDS_GROUPED) != TL_OK;
            checked++;
          }
  tl_clear_error();
  EXPECT_EQ(checked, 336 * 3 + 156);
  EXPECT_EQ(alone[TL_SCHEDULE_GPIPE], 0);
  EXPECT_EQ(alone[TL_SCHEDULE_1F1B], 315);  // all but m = 1
  EXPECT_EQ(alone[TL_SCHEDULE_INTERLEAVED], 156);
  EXPECT_EQ(alone[TL_SCHEDULE_ZERO_BUBBLE], 315);
  EXPECT_EQ(grouped[TL_SCHEDULE_GPIPE], 0);
  EXPECT_EQ(grouped[TL_SCHEDULE_1F1B], 252);
  EXPECT_EQ(grouped[TL_SCHEDULE_INTERLEAVED], 150);
  EXPECT_EQ(grouped[TL_SCHEDULE_ZERO_BUBBLE], 115);
  // the message names where it sticks
  ASSERT_NE(
      tl_pp_schedule_check_transport(TL_SCHEDULE_1F1B, 2, 4, 1, nullptr, TL_PP_SENDS_EACH_ALONE),
      TL_OK);
  EXPECT_NE(std::string(tl_last_error())
                .find("1f1b with 2 stages, 4 micro-batches and 1 chunks deadlocks with sends "
                      "unbuffered, each exchange alone: stage 0 waits on the send of "
                      "micro-batch 1's activation to virtual stage 1"),
            std::string::npos)
      << tl_last_error();
  // a run of exchanges ends at the next pass
  tl_pp_schedule s;
  ASSERT_EQ(tl_pp_schedule_build(TL_SCHEDULE_1F1B, 2, 0, 4, &s), TL_OK);
  int runs = 0;
  for (int k = 0; k < s.n; k++) {
    int end = tl_pp_exchange_run(&s, k);
    if (end == k) continue;
    runs++;
    EXPECT_TRUE(end == s.n || s.instr[end].op == TL_PP_FORWARD ||
                s.instr[end].op == TL_PP_BACKWARD);
    k = end;
  }
  EXPECT_EQ(runs, 5);  // sa0; sa1 rg0, sa2 rg1, sa3 rg2; rg3
  tl_pp_schedule_free(&s);
}
