// Environment knobs: parsed once, bad values named with what was expected.
#include "core/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "core/log.h"

// The knobs are read once a process, at its first tl_env(): this binary's
// first call is made here, before any test runs, so each test sees the same
// knobs in whatever order the tests run (--gtest_shuffle).
class KnobsEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    setenv("TRELLIS_NUM_THREADS", "lots", 1);
    setenv("TRELLIS_LOG_LEVEL", "debug", 1);
    setenv("TRELLIS_LOG_RANKS", "all", 1);
    setenv("TRELLIS_MPI_WAIT", "yield", 1);
    (void)tl_env();
  }
};
testing::Environment* const g_knobs = testing::AddGlobalTestEnvironment(new KnobsEnvironment);

TEST(Env, BadValueIsReportedWithNameValueAndExpectationThenFixedForTheProcess) {
  const struct tl_env* env = tl_env();
  EXPECT_EQ(env->mpi_wait, TL_MPI_WAIT_YIELD);
  EXPECT_EQ(env->num_threads, 0);  // default kept
  EXPECT_EQ(env->log_level, TL_LOG_DEBUG);
  EXPECT_EQ(env->log_rank, -1);
  ASSERT_EQ(tl_env_status(), TL_ERR_CONFIG);
  std::string msg = tl_last_error();
  EXPECT_NE(msg.find("TRELLIS_NUM_THREADS='lots'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected an integer"), std::string::npos) << msg;
  // Read once: later changes to the environment do not move the knobs.
  setenv("TRELLIS_LOG_LEVEL", "error", 1);
  EXPECT_EQ(tl_env()->log_level, TL_LOG_DEBUG);
  setenv("TRELLIS_LOG_LEVEL", "debug", 1);
}

TEST(Env, EveryKnobIsDocumented) {
  const char *name, *def, *doc;
  int n = 0;
  while (tl_env_describe(n, &name, &def, &doc)) {
    EXPECT_EQ(std::string(name).rfind("TRELLIS_", 0), 0u);
    EXPECT_GT(std::string(doc).size(), 20u) << name;
    n++;
  }
  EXPECT_EQ(n, 7);
}

TEST(Env, EveryFaultHasTheNameItIsSetBy) {
  for (int f = 0; f < TL_FAULT_COUNT; f++) {
    std::string name = tl_fault_name((tl_fault)f);
    EXPECT_NE(name, "?");
    const char *knob, *def, *doc;
    for (int i = 0; tl_env_describe(i, &knob, &def, &doc); i++)
      if (std::string(knob) == "TRELLIS_FAULT") {
        EXPECT_NE(std::string(doc).find(name), std::string::npos) << name;
      }
  }
  EXPECT_EQ(tl_env()->fault, TL_FAULT_NONE);  // unset: no fault
}

TEST(Log, RankFilteringFollowsTheKnobs) {
  // TRELLIS_LOG_RANKS=all and level debug, fixed before the first test
  tl_log_set_rank(3, 4);
  EXPECT_TRUE(tl_log_enabled(TL_LOG_DEBUG));
  EXPECT_TRUE(tl_log_enabled(TL_LOG_ERROR));
  testing::internal::CaptureStderr();
  TL_LOG_WARN("step %d", 7);
  std::string out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "[trellis 3/4 W] step 7\n");
}
