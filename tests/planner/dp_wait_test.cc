// The planner's exposed data-parallel time against the run's: on 2 and 4
// ranks of this machine, a spec calibrated on as many ranks
// (`trellis plan --calibrate --ranks N`, its all-reduce bandwidth by buffer
// size), and a GPT trained under ZeRO 0 to 3 with `--cluster`: what the
// plan shows of its data-parallel collectives beside the median step's
// wait of the rank that waited least (the last to reach them: the
// communication's own time). Within 25% or 5 ms, where the machine has a
// core per rank (CI's two cores time 2 ranks only); on a shared machine a
// busy spell moves a calibration or a run, so a case has two runs on
// each of up to two calibrations.
#include <gtest/gtest.h>
#include <jansson.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <string>

#include "tests/planner/plan_cli.h"

namespace {

struct Measured {
  double priced_ms = -1, waited_ms = -1;
};

// The last line of a --metrics file: {"priced": {"dp_ms"}, "measured": {"dp_wait_median_ms"}}.
Measured ReadLast(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line)) last = line;
  Measured m;
  json_t* o = json_loads(last.c_str(), 0, nullptr);
  if (!o) return m;
  json_t* p = json_object_get(json_object_get(o, "priced"), "dp_ms");
  json_t* w = json_object_get(json_object_get(o, "measured"), "dp_wait_median_ms");
  if (json_is_number(p)) m.priced_ms = json_number_value(p);
  if (json_is_number(w)) m.waited_ms = json_number_value(w);
  json_decref(o);
  return m;
}

bool Close(const Measured& m) {
  return m.priced_ms >= 0 && m.waited_ms >= 0 &&
         std::fabs(m.priced_ms - m.waited_ms) <= std::fmax(0.25 * m.waited_ms, 5.0);
}

void PricedAgainstMeasured(int ranks) {
  const std::string tokens = WriteTokens("dp_wait", "A parallel run is the same run", 2000);
  std::string report;
  int close = 0, cases = 0;
  const std::string spec = TempPath("dp_wait_spec_" + std::to_string(ranks) + ".json");
  Measured m[4];
  std::string tries[4];
  // a busy spell moves a calibration as much as a run: a second one for
  // the cases the first left outside, each case run twice on each
  for (int round = 0; round < 2; round++) {
    bool all = true;
    for (int zero = 0; zero <= 3; zero++) all = all && Close(m[zero]);
    if (all) break;
    PlanRun cal = Plan("--calibrate " + spec + " --ranks " + std::to_string(ranks));
    ASSERT_EQ(cal.status, 0) << cal.output;
    for (int zero = 0; zero <= 3; zero++) {
      const std::string cfg =
          TempPath("dp_wait_" + std::to_string(ranks) + "_" + std::to_string(zero) + ".json");
      std::ofstream(cfg) << R"({"model": {"kind": "gpt", "n_layers": 4, "n_heads": 4,
            "n_embd": 256, "vocab_size": 256, "max_seq_len": 64},
            "train": {"steps": 9, "batch_size": 8, "seq_len": 64, "sample_tokens": 0},
            "mesh": {"dp": )"
                         << ranks << R"(}, "parallel": {"zero": )" << zero << R"(},
            "data": {"train": ")"
                         << tokens << "\"}}";
      const std::string metrics = cfg + ".jsonl";
      for (int attempt = 0; attempt < 2 && !Close(m[zero]); attempt++) {
        PlanRun run =
            Shell("launcher/trellis train " + cfg + " --cluster " + spec + " --metrics " + metrics);
        ASSERT_EQ(run.status, 0) << run.output;
        m[zero] = ReadLast(metrics);
        char t[96];
        std::snprintf(t, sizeof t, " %.1f/%.1f", m[zero].priced_ms, m[zero].waited_ms);
        tries[zero] += t;
      }
    }
  }
  for (int zero = 0; zero <= 3; zero++) {
    char line[192];
    std::snprintf(line, sizeof line, "%d ranks, ZeRO-%d: priced/measured ms%s%s\n", ranks, zero,
                  tries[zero].c_str(), Close(m[zero]) ? "" : "  <- outside 25% and 5 ms");
    report += line;
    close += Close(m[zero]);
    cases++;
    EXPECT_TRUE(Close(m[zero])) << line;
  }
  std::printf("%sexposed data-parallel time within 25%% or 5 ms: %d of %d cases\n", report.c_str(),
              close, cases);
}

// Why a case cannot be timed here, or "" where it can.
std::string CannotTime(int ranks) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
  // the compute is instrumented, MPI's copies are not: the step's parts
  // keep neither their sizes nor their overlap
  (void)ranks;
  return "timing under a sanitizer measures the sanitizer";
#else
  // More ranks than cores: each collective waits for ranks the scheduler
  // has not run, by however busy the machine is: CI's 4 ranks on 2 cores
  // waited 1.3-1.9 times what was priced where this machine, as idle,
  // waited within 25% of it
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < ranks)
    return "timing with more ranks than cores: " + std::to_string(ranks) + " ranks on " +
           std::to_string(cores) + " cores";
  return "";
#endif
}

}  // namespace

TEST(DpWait, PredictedAgainstMeasuredForEveryZeroStageOn2Ranks) {
  (void)kSmall, (void)kThisMachine;  // plan_cli.h's, not this test's
  if (std::string why = CannotTime(2); !why.empty()) GTEST_SKIP() << why;
  PricedAgainstMeasured(2);
}

TEST(DpWait, PredictedAgainstMeasuredForEveryZeroStageOn4Ranks) {
  if (std::string why = CannotTime(4); !why.empty()) GTEST_SKIP() << why;
  PricedAgainstMeasured(4);
}
