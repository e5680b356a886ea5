// Operations: what a run on a cluster meets — stopped and resumed,
// preempted by a signal, interrupted from a terminal — and what trellis
// must then keep: every step taken, and the run it would have been.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
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
// without a checkpoint. The first comes while a step cannot end (the last
// rank has stopped itself in step 3, TRELLIS_FAULT=rank_stops, and the
// other waits for it), so the first signal's stop is still waiting for the
// step however fast the machine is.
TEST(Ops, ASecondSignalStopsAtOnce) {
  const std::string dir = TmpDir() + "/twice";
  Signals s;
  s.after_stopped = true, s.sig = SIGTERM, s.times = 2, s.gap_s = 1.2;
  RunResult r = RunProcessSignalled({kTrellis, "train", Config(dir, 100, 2)}, s,
                                    {{"TRELLIS_FAULT", "rank_stops"}}, 90, true);
  ASSERT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("a second signal: stopping at once"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stopped after step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step   2/100"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step   3/100"), std::string::npos) << r.output;
}

namespace {

// A copy of `from` with four bytes at `at` inverted.
std::string Damaged(const std::string& from, size_t at, const std::string& to) {
  std::string bytes = ReadFile(from);
  for (size_t i = at; i < at + 4 && i < bytes.size(); i++) bytes[i] = (char)~bytes[i];
  std::ofstream(to, std::ios::binary) << bytes;
  return to;
}

}  // namespace

// Four bytes inverted anywhere in a checkpoint — its header, its checksum
// table, its parameters or either moment — and it is refused, naming the
// file (and, inside the data, the tensor), once for the whole 2-rank job,
// with a non-zero exit and no step taken.
TEST(Ops, EveryDamagedCheckpointIsRefusedOnceNamingTheFileAndTheTensor) {
  const std::string dir = TmpDir() + "/damage";
  RunResult a = RunProcess({kTrellis, "train", Config(dir, 2, 2)}, {}, 90, true);
  ASSERT_EQ(a.status, 0) << a.output;
  const std::string good = Ckpt(dir, 2), bytes = ReadFile(good);
  ASSERT_GT(bytes.size(), 4096u);
  int tried = 0, refused = 0, named = 0;
  const int kPlaces = 12;
  for (int k = 0; k < kPlaces; k++) {
    // spread over the file: the header first, then evenly to the last bytes
    size_t at = k == 0 ? 16 : (size_t)((double)k / (kPlaces - 1) * (double)(bytes.size() - 4));
    std::string bad = Damaged(good, at, dir + "/damaged_" + std::to_string(k) + ".ckpt");
    RunResult r = RunProcess(
        {kTrellis, "train", Config(dir, 3, 2, ", \"resume\": \"" + bad + "\""), "--steps", "3"}, {},
        90, true);
    tried++;
    bool no_step = r.output.find("step 3/3") == std::string::npos;
    if (r.status != 0 && no_step) refused++;
    EXPECT_NE(r.status, 0) << "byte " << at << ": " << r.output;
    EXPECT_TRUE(no_step) << r.output;
    EXPECT_EQ(CountOf(r.output, bad), 1) << "byte " << at << ": named once\n" << r.output;
    if (at >= 1024 && r.output.find("do not match their checksum") != std::string::npos) named++;
  }
  std::printf("damaged checkpoints refused: %d of %d (%d inside the data, named by tensor)\n",
              refused, tried, named);
  EXPECT_GE(named, kPlaces - 2);  // all but the header's and the checksum table's
}

// The same for a sharded checkpoint: a part's bytes inverted are refused by
// the rank that reads them, naming the part and the tensor.
TEST(Ops, ADamagedShardedPartIsRefusedNamingThePartAndTheTensor) {
  const std::string dir = TmpDir() + "/damage_sharded";
  RunResult a =
      RunProcess({kTrellis, "train", Config(dir, 2, 2, ", \"format\": \"sharded\"")}, {}, 90, true);
  ASSERT_EQ(a.status, 0) << a.output;
  const std::string part = Ckpt(dir, 2) + "/part-00000.bin";
  const std::string bytes = ReadFile(part);
  ASSERT_GT(bytes.size(), 4096u) << a.output;
  Damaged(part, bytes.size() / 2, part);  // in place: the directory is the checkpoint
  RunResult r =
      RunProcess({kTrellis, "train", Config(dir, 3, 2, ", \"resume\": \"" + Ckpt(dir, 2) + "\""),
                  "--steps", "3"},
                 {}, 90, true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("part-00000.bin's"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("do not match their checksum"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(from tensor "), std::string::npos) << r.output;
  EXPECT_EQ(CountOf(r.output, "do not match their checksum"), 1) << r.output;
}

// Started by mpiexec itself (no hand-started trellis to check the files
// first), a truncated checkpoint fails every rank alike: one message.
TEST(Ops, ATruncatedCheckpointUnderMpiexecIsReportedOnce) {
  const std::string dir = TmpDir() + "/truncated";
  RunResult a = RunProcess({kTrellis, "train", Config(dir, 2, 2)}, {}, 90, true);
  ASSERT_EQ(a.status, 0) << a.output;
  std::string bytes = ReadFile(Ckpt(dir, 2));
  const std::string cut = dir + "/cut.ckpt";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  RunResult r = RunProcess(
      {"mpiexec", "-n", "2", kTrellis, "train", Config(dir, 3, 2, ", \"resume\": \"" + cut + "\"")},
      {}, 90, true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(CountOf(r.output, "is cut short"), 1) << r.output;
}

// checkpoint.keep: the newest N stay; checkpoint.resume "latest": the
// newest there, or a fresh start where there is none.
TEST(Ops, KeepTheNewestAndResumeTheLatest) {
  const std::string dir = TmpDir() + "/keep";
  const std::string keep = ", \"every\": 1, \"keep\": 2, \"resume\": \"latest\"";
  RunResult a = RunProcess({kTrellis, "train", Config(dir, 8, 1, keep), "--steps", "5"});
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("no checkpoint in"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("step 1/8"), std::string::npos) << a.output;
  for (int s = 1; s <= 5; s++) EXPECT_EQ(Exists(Ckpt(dir, s)), s >= 4) << "step " << s;
  RunResult b = RunProcess({kTrellis, "train", Config(dir, 8, 1, keep)});
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_NE(b.output.find("step_000005.ckpt (step 5)"), std::string::npos) << b.output;
  EXPECT_EQ(b.output.find("step 5/8"), std::string::npos) << b.output;
  EXPECT_NE(b.output.find("step 6/8"), std::string::npos) << b.output;
  for (int s = 1; s <= 8; s++) EXPECT_EQ(Exists(Ckpt(dir, s)), s >= 7) << "step " << s;
  // the same 8 steps without a stop: the same bits
  const std::string whole = TmpDir() + "/keep_whole";
  ASSERT_EQ(RunProcess({kTrellis, "train", Config(whole, 8, 1)}).status, 0);
  EXPECT_TRUE(ReadFile(Ckpt(dir, 8)) == ReadFile(Ckpt(whole, 8)));
}

// A step whose gradients are not finite (TRELLIS_FAULT=nan_at_step_2: world
// rank 0's gradients of step 2 are NaN) stops the 2-rank job at that step,
// naming the first parameter whose gradient is not finite, once; nothing is
// written over the last checkpoint (step 1's). With train.skip_nonfinite
// the step is skipped — no update — and counted, and the run goes on.
TEST(Ops, ANonFiniteStepStopsTheRunOrIsSkipped) {
  const std::string dir = TmpDir() + "/nan", skip = TmpDir() + "/nan_skip";
  const std::map<std::string, std::string> nan = {{"TRELLIS_FAULT", "nan_at_step_2"}};
  RunResult r = RunProcess({kTrellis, "train", Config(dir, 4, 2, ", \"every\": 1")}, nan, 90, true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(CountOf(r.output, "step 2: the loss is"), 1) << r.output;
  EXPECT_NE(r.output.find("not finite; the first parameter whose gradient is not finite: "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("nothing was updated"), std::string::npos) << r.output;
  EXPECT_TRUE(Exists(Ckpt(dir, 1)));
  EXPECT_FALSE(Exists(Ckpt(dir, 2))) << r.output;
  // skipped: steps 1, 3 and 4 update, step 2 does not
  std::string cfg = Config(skip, 4, 2, "");
  {
    std::string text = ReadFile(cfg);
    text.replace(text.find("\"warmup_steps\": 2"), 17,
                 "\"warmup_steps\": 2, \"skip_nonfinite\": true");
    std::ofstream(cfg) << text;
  }
  const std::string metrics = skip + "/m.jsonl";
  RunResult s = RunProcess({kTrellis, "train", cfg, "--metrics", metrics}, nan, 90, true);
  ASSERT_EQ(s.status, 0) << s.output;
  EXPECT_EQ(CountOf(s.output, "skipped: not finite (train.skip_nonfinite)"), 1) << s.output;
  EXPECT_NE(s.output.find("skipped: 1 step whose loss or gradient norm was not finite"),
            std::string::npos)
      << s.output;
  EXPECT_NE(ReadFile(metrics).find("\"step\": 4, \"loss\""), std::string::npos);
  EXPECT_NE(ReadFile(metrics).find("\"skipped\": 1, "), std::string::npos);
  EXPECT_TRUE(Exists(Ckpt(skip, 4)));
}

// `trellis data --uint32` writes llm.c's Llama-3 format (magic 20240801,
// version 7, uint32 tokens); the same text trains the same bits from it as
// from the GPT-2 format, and a sample decodes through data.tokenizer.
TEST(Ops, TheWideTokenFormatTrainsAsTheNarrowOne) {
  const std::string text = WriteTempFile(std::string(3000, 'b') + " hello world\n", ".txt");
  const std::string narrow = text + ".u16.bin", wide = text + ".u32.bin";
  ASSERT_EQ(RunProcess({kTrellis, "data", text, narrow}).status, 0);
  RunResult w = RunProcess({kTrellis, "data", text, wide, "--uint32"});
  ASSERT_EQ(w.status, 0) << w.output;
  EXPECT_NE(w.output.find("Llama-3 (uint32)"), std::string::npos) << w.output;
  const std::string bytes = ReadFile(wide);
  int32_t magic = 0, version = 0;
  memcpy(&magic, bytes.data(), 4);
  memcpy(&version, bytes.data() + 4, 4);
  EXPECT_EQ(magic, 20240801);
  EXPECT_EQ(version, 7);
  EXPECT_EQ(bytes.size(), 1024 + 4 * (ReadFile(narrow).size() - 1024) / 2);
  std::string ckpt[2];
  for (int k = 0; k < 2; k++) {
    const std::string dir = TmpDir() + (k ? "/wide" : "/narrow");
    std::string cfg = Config(dir, 3, 1);
    std::string t = ReadFile(cfg);
    t.replace(t.find(Tokens()), Tokens().size(), k ? wide : narrow);
    std::ofstream(cfg) << t;
    RunResult r = RunProcess({kTrellis, "train", cfg});
    ASSERT_EQ(r.status, 0) << r.output;
    ckpt[k] = ReadFile(Ckpt(dir, 3));
  }
  EXPECT_TRUE(ckpt[0] == ckpt[1]) << "the same tokens, another width: the same run";
  EXPECT_EQ(RunProcess({kTrellis, "data", text, wide, "--uint64"}).status, 2);
}

// A rank that stops answering (TRELLIS_FAULT=rank_stops: the last rank
// SIGSTOPs itself in step 3) while the other waits for it in the gradient
// all-reduce: after parallel.timeout_s the waiting rank ends the job with
// its rank, the group, the operation and the bytes that are stuck.
TEST(Ops, AStoppedRankEndsTheJobAfterTheTimeoutNamingWhatIsStuck) {
  const std::string dir = TmpDir() + "/stopped";
  std::string cfg = Config(dir, 100, 2);
  {
    std::string t = ReadFile(cfg);
    t.replace(t.find("\"mesh\": {"), 9, "\"parallel\": {\"timeout_s\": 2}, \"mesh\": {");
    std::ofstream(cfg) << t;
  }
  RunResult r = RunProcess({kTrellis, "train", cfg}, {{"TRELLIS_FAULT", "rank_stops"}}, 60, true);
  ASSERT_FALSE(r.timed_out) << "the job waited for ever\n" << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(CountOf(r.output, "has not finished after"), 1) << r.output;
  char host[64] = "?";
  gethostname(host, sizeof host);
  EXPECT_NE(r.output.find(std::string("rank 0 on ") + host + ": all_reduce of "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("on group 'dp' has not finished after 2 s (parallel.timeout_s = 2)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("step   2/100"), std::string::npos);
  EXPECT_EQ(r.output.find("step   3/100"), std::string::npos);
  std::printf("a rank stopped in step 3: the job ended after %.1f s in all (timeout 2 s)\n",
              r.seconds);
}

// NCCL's sends end only when their receive is posted, and a group's
// operations run in issue order: on one stream per pipeline group, a 1F1B,
// interleaved or zero-bubble stage sends before it receives what its
// neighbour sends it first, and both wait for ever (GPipe's sends go one
// way at a time). TRELLIS_EMULATE=nccl gives a CPU job that ordering; the
// exchanges' own links train (--verify: the single-device run), and put
// back on the pp group (TRELLIS_FAULT=pp_one_stream) the job deadlocks and
// the watchdog ends it naming the send that is stuck.
TEST(Ops, PipelineExchangesDeadlockOnOneNcclStreamAndNotOnTheirLinks) {
  const std::string dir = TmpDir() + "/nccl_order";
  mkdir(dir.c_str(), 0755);
  const char* kinds[] = {"gpipe", "1f1b", "interleaved", "zero_bubble"};
  for (const char* kind : kinds) {
    const std::string cfg = dir + "/" + kind + ".json";
    const bool interleaved = std::string(kind) == "interleaved";
    std::ofstream(cfg)
        << R"({"model": {"n_layers": 4, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
      "mesh": {"pp": 2}, "schedule": {"kind": ")"
        << kind << R"(", "micro_batches": 4)" << (interleaved ? R"(, "virtual_stages": 2)" : "")
        << R"(},
      "train": {"steps": 2, "batch_size": 4, "seq_len": 16, "sample_tokens": 0},
      "parallel": {"timeout_s": 3}, "device": {"threads": 1},
      "data": {"train": ")"
        << Tokens() << R"("}})";
    RunResult ok =
        RunProcess({kTrellis, "train", cfg, "--verify"}, {{"TRELLIS_EMULATE", "nccl"}}, 120, true);
    ASSERT_FALSE(ok.timed_out) << kind << "\n" << ok.output;
    EXPECT_EQ(ok.status, 0) << kind << "\n" << ok.output;
    EXPECT_NE(ok.output.find("verify: EQUAL to the single-device run"), std::string::npos)
        << kind << "\n"
        << ok.output;
    RunResult one =
        RunProcess({kTrellis, "train", cfg},
                   {{"TRELLIS_EMULATE", "nccl"}, {"TRELLIS_FAULT", "pp_one_stream"}}, 120, true);
    ASSERT_FALSE(one.timed_out) << kind << ": the job waited for ever\n" << one.output;
    if (std::string(kind) == "gpipe") {
      EXPECT_EQ(one.status, 0) << one.output;
      continue;
    }
    EXPECT_NE(one.status, 0) << kind << "\n" << one.output;
    EXPECT_EQ(CountOf(one.output, "has not finished after"), 1) << kind << "\n" << one.output;
    EXPECT_NE(one.output.find("send of "), std::string::npos) << kind << "\n" << one.output;
    EXPECT_NE(one.output.find("on group 'pp' has not finished after 3 s (parallel.timeout_s = 3)"),
              std::string::npos)
        << kind << "\n"
        << one.output;
  }
}

// The CUDA path's ordering on emulated GPUs (TRELLIS_EMULATE=cuda,
// kernels/emul/emul.h): kernels, copies and zeroing run only when something
// waits for them, and a group's operation runs what was issued to the
// device before it — on a GPU, NCCL's stream waits for an event on the
// legacy stream (core/group_nccl.c), and nothing else orders them: the
// host does not synchronize before collectives. Each mesh below trains
// EQUAL to one device under --verify; with that wait narrowed or taken
// out, the same run is DIFFERENT, every time, naming the tensor:
//   copies_unordered       the wait covers the compute stream's kernels,
//                          not the copies on the legacy stream after them
//                          (ZeRO-2's slot copy before its reduce-scatter,
//                          sequence parallelism's pack before its
//                          all-reduce);
//   collectives_unordered  no wait at all: a pipeline stage's activations
//                          leave before they are computed (and the tied
//                          embedding's sum before the backward wrote it).
TEST(Ops, GpuOrderingDefectsShowOnEmulatedGpus) {
  const std::string dir = TmpDir() + "/gpu_order";
  mkdir(dir.c_str(), 0755);
  struct Case {
    const char* name;
    const char* mesh;
    const char* fault;
  } cases[] = {
      {"zero2", R"("mesh": {"dp": 2}, "parallel": {"zero": 2, "timeout_s": 30})",
       "copies_unordered"},
      {"sp", R"("mesh": {"tp": 2}, "parallel": {"sequence_parallel": true, "timeout_s": 30})",
       "copies_unordered"},
      {"tied", R"("mesh": {"pp": 2}, "parallel": {"zero": 1, "timeout_s": 30})",
       "collectives_unordered"},
  };
  for (const Case& c : cases) {
    const std::string cfg = dir + "/" + c.name + ".json";
    std::ofstream(cfg)
        << R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": 16, "max_seq_len": 16}, )" << c.mesh
        << R"(, "schedule": {"micro_batches": 2},
      "train": {"steps": 2, "batch_size": 4, "seq_len": 16, "sample_tokens": 0},
      "device": {"type": "cuda", "threads": 1}, "data": {"train": ")"
        << Tokens() << R"("}})";
    RunResult ok =
        RunProcess({kTrellis, "train", cfg, "--verify"}, {{"TRELLIS_EMULATE", "cuda"}}, 120, true);
    ASSERT_FALSE(ok.timed_out) << c.name << "\n" << ok.output;
    EXPECT_EQ(ok.status, 0) << c.name << "\n" << ok.output;
    EXPECT_NE(ok.output.find("verify: EQUAL to the single-device run"), std::string::npos)
        << c.name << "\n"
        << ok.output;
    RunResult bad =
        RunProcess({kTrellis, "train", cfg, "--verify"},
                   {{"TRELLIS_EMULATE", "cuda"}, {"TRELLIS_FAULT", c.fault}}, 120, true);
    ASSERT_FALSE(bad.timed_out) << c.name << "\n" << bad.output;
    EXPECT_NE(bad.status, 0) << c.name << " with " << c.fault << "\n" << bad.output;
    const size_t at = bad.output.find("verify: DIFFERENT from the single-device run: step 1: ");
    EXPECT_NE(at, std::string::npos) << c.name << " with " << c.fault << "\n" << bad.output;
    if (at != std::string::npos)
      std::printf("%-6s %-18s %s", c.name, c.fault,
                  bad.output.substr(at, bad.output.find('\n', at) - at + 1).c_str());
  }
}

// `trellis plot`: two runs' --metrics drawn in one picture — a line per
// run in the loss, learning-rate and tokens/s panels, a point per
// validation — and a file that is not metrics refused naming its line.
TEST(Ops, PlotOverlaysTheRunsMetrics) {
  std::string m[2];
  for (int k = 0; k < 2; k++) {
    const std::string dir = TmpDir() + "/plot" + std::to_string(k);
    std::string cfg = Config(dir, 6, 1);
    if (k == 1) {  // validation every 2 steps, and another learning rate
      std::string t = ReadFile(cfg);
      t.replace(t.find("\"warmup_steps\": 2"), 17,
                "\"warmup_steps\": 2, \"val_every\": 2, \"lr\": 0.003");
      t.replace(t.find("\"data\": {"), 9, "\"data\": {\"val\": \"" + Tokens() + "\", ");
      std::ofstream(cfg) << t;
    }
    m[k] = dir + "/metrics.jsonl";
    RunResult r = RunProcess({kTrellis, "train", cfg, "--metrics", m[k]});
    ASSERT_EQ(r.status, 0) << r.output;
  }
  // every step's live bytes on each rank: flat after the first (no leak)
  {
    std::istringstream lines(ReadFile(m[0]));
    std::string line, first;
    int steps = 0;
    while (std::getline(lines, line)) {
      size_t at = line.find("\"live_bytes\": ");
      if (at == std::string::npos) continue;
      std::string live = line.substr(at, line.find('}', at) - at);
      if (++steps == 2) first = live;
      if (steps > 2) {
        EXPECT_EQ(live, first) << "step " << steps;
      }
    }
    EXPECT_EQ(steps, 6);
  }
  const std::string svg = TmpDir() + "/runs.svg";
  RunResult p = RunProcess({kTrellis, "plot", m[0], m[1], "--svg", svg});
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("(2 runs, 6 steps)"), std::string::npos) << p.output;
  const std::string text = ReadFile(svg);
  ASSERT_EQ(text.rfind("<svg ", 0), 0u);
  for (int k = 0; k < 2; k++) {
    std::string run = "<polyline class=\"run" + std::to_string(k) + "\"";
    EXPECT_EQ(CountOf(text, run), 3) << "loss, learning rate, tokens/s";
  }
  EXPECT_EQ(CountOf(text, "<circle class=\"run1\""), 3) << "validations at steps 2, 4, 6";
  EXPECT_EQ(CountOf(text, "<circle class=\"run0\""), 0);
  EXPECT_NE(text.find("metrics.jsonl"), std::string::npos) << "the legend names the files";
  // not metrics: refused, naming the file and the line
  const std::string bad = WriteTempFile("{\"step\": 1, \"loss\": 2}\nnot json\n", ".jsonl");
  RunResult b = RunProcess({kTrellis, "plot", bad, "--svg", svg});
  EXPECT_EQ(b.status, 1) << b.output;
  EXPECT_NE(b.output.find(bad + ":2:"), std::string::npos) << b.output;
  RunResult d = RunProcess({kTrellis, "plot", TmpDir(), "--svg", svg});
  EXPECT_EQ(d.status, 1) << d.output;
  EXPECT_NE(d.output.find("cannot read '" + TmpDir() + "': Is a directory"), std::string::npos)
      << d.output;
  EXPECT_EQ(RunProcess({kTrellis, "plot", m[0]}).status, 2) << "no --svg";
}
