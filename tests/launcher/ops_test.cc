// Operations: what a run on a cluster meets — stopped and resumed,
// preempted by a signal, interrupted from a terminal — and what trellis
// must then keep: every step taken, and the run it would have been.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";

std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// A token file of text every test shares.
const std::string& Tokens() {
  static std::string path;
  if (path.empty()) {
    std::string text =
        WriteTempFile(std::string(30000, 'a') + "the quick brown fox jumps\n", ".txt");
    path = text + ".bin";
    EXPECT_EQ(RunProcess({kTrellis, "data", text, path}).status, 0);
  }
  return path;
}

// A GPT config of `steps` steps on dp ranks, checkpoints into dir; extra
// fields (a JSON fragment after the train section's own) as given.
std::string Config(const std::string& dir, int steps, int dp, const std::string& extra = "",
                   int n_embd = 16, int batch = 4) {
  mkdir(dir.c_str(), 0755);
  std::string cfg = dir + "/config.json";
  std::ofstream(cfg) << R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": )" << n_embd
                     << R"(, "max_seq_len": 16},
      "mesh": {"dp": )"
                     << dp << R"(}, "train": {"steps": )" << steps << R"(, "batch_size": )" << batch
                     << R"(, "seq_len": 16, "sample_tokens": 0, "warmup_steps": 2},
      "device": {"threads": 1}, "data": {"train": ")"
                     << Tokens() << R"("}, "checkpoint": {"dir": ")" << dir << "/ckpt\"" << extra
                     << "}}";
  return cfg;
}

std::string Ckpt(const std::string& dir, int step) {
  char name[32];
  snprintf(name, sizeof name, "/ckpt/step_%06d.ckpt", step);
  return dir + name;
}

}  // namespace

// train.steps sets the learning-rate schedule; --steps N stops after step
// N of it. Stopped at 3 of 6 and resumed, the run is the 6-step run bit
// for bit (the old --steps, which replaced train.steps, changed the
// schedule and so every step after the first).
TEST(Ops, StoppedWithStepsAndResumedIsTheWholeRunBitForBit) {
  const std::string whole = TmpDir() + "/whole", parts = TmpDir() + "/parts";
  RunResult a = RunProcess({kTrellis, "train", Config(whole, 6, 1)});
  ASSERT_EQ(a.status, 0) << a.output;
  RunResult b = RunProcess({kTrellis, "train", Config(parts, 6, 1), "--steps", "3"});
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("stop: after step 3 (--steps)"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("step 3/6"), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("step 4/6"), std::string::npos) << b.output;
  ASSERT_TRUE(Exists(Ckpt(parts, 3))) << b.output;
  RunResult c = RunProcess(
      {kTrellis, "train", Config(parts, 6, 1, ", \"resume\": \"" + Ckpt(parts, 3) + "\"")});
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_EQ(c.output.find("step 3/6"), std::string::npos) << "resumed after step 3\n" << c.output;
  const std::string one = ReadFile(Ckpt(whole, 6)), two = ReadFile(Ckpt(parts, 6));
  ASSERT_GT(one.size(), 1024u);
  EXPECT_TRUE(one == two) << "the stopped and resumed run is not the whole run";
  // beyond the schedule: refused, naming what sets it
  RunResult d = RunProcess({kTrellis, "train", Config(parts, 6, 1), "--steps", "9"});
  EXPECT_EQ(d.status, 2) << d.output;
  EXPECT_NE(d.output.find("--steps 9: beyond train.steps = 6"), std::string::npos) << d.output;
}

// SIGTERM (what Slurm sends at preemption and at the time limit) to the
// process a person started: every rank of the 2-rank job finishes the step
// in progress, writes the checkpoint, and the job exits 0 with one line
// saying so; nothing but the step in progress is lost — the checkpoint is
// the uninterrupted run's at that step, bit for bit.
TEST(Ops, SigtermStopsEveryRankAfterTheStepInProgressWithACheckpoint) {
  const std::string dir = TmpDir() + "/term", again = TmpDir() + "/term_again";
  Signals s;
  s.after = "step   10/5000", s.sig = SIGTERM;
  double sent = 0;
  RunResult r =
      RunProcessSignalled({kTrellis, "train", Config(dir, 5000, 2)}, s, {}, 90, true, &sent);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(CountOf(r.output, "SIGTERM: stopped after step"), 1) << r.output;
  size_t at = r.output.find("SIGTERM: stopped after step ");
  ASSERT_NE(at, std::string::npos) << r.output;
  int step = atoi(r.output.c_str() + at + strlen("SIGTERM: stopped after step "));
  EXPECT_GE(step, 10);
  EXPECT_LT(step, 5000);
  ASSERT_TRUE(Exists(Ckpt(dir, step))) << r.output;
  // the last step printed is the one saved: no step lost, none half-done
  char line[64];
  snprintf(line, sizeof line, "step %4d/5000", step);
  EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  snprintf(line, sizeof line, "step %4d/5000", step + 1);
  EXPECT_EQ(r.output.find(line), std::string::npos) << r.output;
  std::printf("SIGTERM at %.2f s: stopped after step %d, exit after %.2f s more\n", sent, step,
              r.seconds - sent);
  // the same run told to stop there
  RunResult u = RunProcess(
      {kTrellis, "train", Config(again, 5000, 2), "--steps", std::to_string(step)}, {}, 90, true);
  ASSERT_EQ(u.status, 0) << u.output;
  EXPECT_TRUE(ReadFile(Ckpt(dir, step)) == ReadFile(Ckpt(again, step)))
      << "the checkpoint a signal wrote is not the run's state at that step";
}

// Ctrl-C from a terminal reaches the whole process group: trellis, mpiexec
// and hydra's proxies alike. The job still stops cleanly, once.
TEST(Ops, CtrlCToTheWholeGroupStopsTheJobCleanly) {
  const std::string dir = TmpDir() + "/int";
  Signals s;
  s.after = "step   10/5000", s.sig = SIGINT, s.group = true;
  RunResult r = RunProcessSignalled({kTrellis, "train", Config(dir, 5000, 2)}, s, {}, 90, true);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(CountOf(r.output, "SIGINT: stopped after step"), 1) << r.output;
}

// A second signal, a second or more after the first, ends the job at once
// without a checkpoint (the first step here takes seconds: the first
// signal's stop is still waiting for it).
TEST(Ops, ASecondSignalStopsAtOnce) {
  const std::string dir = TmpDir() + "/twice";
  Signals s;
  s.after = "device: cpu", s.sig = SIGTERM, s.times = 2, s.gap_s = 1.2;
  RunResult r =
      RunProcessSignalled({kTrellis, "train", Config(dir, 3, 2, "", 512, 256)}, s, {}, 90, true);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("a second signal: stopping at once"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stopped after step"), std::string::npos) << r.output;
}
