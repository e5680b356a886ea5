// Sharded checkpoints (launcher/train/sharded.h) load on any mesh and ZeRO
// stage. A GPT trains 6 steps on dp 2 x pp 2 with ZeRO-3 (4 ranks),
// writing sharded checkpoints at steps 3 and 6 (every rank its part); then
// from step 3:
// - the same mesh continues bit for bit: its step-6 parameters and both
//   AdamW moments equal the uninterrupted run's;
// - tp 2 with ZeRO-1 (2 ranks) continues under --verify: the state it
//   read equals, bit for bit, what the single-device reference read from
//   the same directory, and every step equals the single-device run;
// - one device continues with the uninterrupted run's losses (1e-5).
// A part cut short, or one missing, is refused before any rank starts,
// naming the file; a save that fails on one rank is reported once. The
// llm.c model file every rank writes its slices of equals the one a single
// device writes from the same state. A context-parallel run's checkpoints
// continue on other meshes, and other meshes' on a context-parallel one.
#include "launcher/train/sharded.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "graph/model.h"
#include "launcher/train/checkpoint.h"
#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";

std::string Dir(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name;
}

std::string Tokens() {
  static std::string tokens;
  if (tokens.empty()) {
    std::string text;
    for (int i = 0; i < 400; i++)
      text += "a sharded checkpoint " + std::to_string(i * 7 % 13) + "\n";
    std::string path = WriteTempFile(text, ".txt");
    tokens = path + ".bin";
    EXPECT_EQ(RunProcess({kTrellis, "data", path, tokens}).status, 0);
  }
  return tokens;
}

const char* kModel =
    "\"model\": {\"kind\": \"gpt\", \"n_layers\": 4, \"n_heads\": 4, \"n_embd\": 32, "
    "\"vocab_size\": 256, \"max_seq_len\": 16}";

// mesh and zero; checkpoints into `dir` every 3 steps (none: ""), from `resume` if given
std::string Config(const std::string& mesh, int zero, const std::string& dir,
                   const std::string& resume) {
  std::string ck = dir.empty()
                       ? "{\"resume\": \"" + resume + "\"}"
                       : "{\"dir\": \"" + dir + "\", \"every\": 3" +
                             (resume.empty() ? "" : ", \"resume\": \"" + resume + "\"") + "}";
  return WriteTempFile(std::string("{") + kModel + ",\n \"mesh\": " + mesh +
                       ",\n \"schedule\": {\"kind\": \"1f1b\", \"micro_batches\": 2},\n"
                       " \"parallel\": {\"zero\": " +
                       std::to_string(zero) +
                       "},\n"
                       " \"train\": {\"steps\": 6, \"batch_size\": 8, \"seq_len\": 16, \"lr\": "
                       "0.001, \"eps\": 1e-8, \"warmup_steps\": 0, \"grad_clip\": 1.0, "
                       "\"sample_tokens\": 0},\n"
                       " \"data\": {\"train\": \"" +
                       Tokens() +
                       "\"},\n"
                       " \"checkpoint\": " +
                       ck +
                       ",\n"
                       " \"device\": {\"type\": \"cpu\", \"threads\": 1}}\n");
}

tl_model Model() {
  tl_config c;
  tl_config_defaults(&c);
  c.model.n_layers = 4, c.model.n_heads = 4, c.model.n_embd = 32, c.model.vocab_size = 256;
  c.model.max_seq_len = 16;
  tl_model m;
  EXPECT_EQ(tl_model_init(&c.model, &m), TL_OK) << tl_last_error();
  return m;
}

// Parameters and both moments of a checkpoint, file or directory.
std::vector<float> State(const std::string& path, int64_t* step = nullptr) {
  tl_model m = Model();
  std::vector<float> s(3 * (size_t)m.n_params);
  if (tl_sharded_is(path.c_str())) {
    tl_sharded_reader* r = nullptr;
    EXPECT_EQ(tl_sharded_open(path.c_str(), &m, &r), TL_OK) << tl_last_error();
    if (!r) return {};
    for (int k = 0; k < 3; k++) {
      EXPECT_EQ(tl_sharded_read(r, k, 0, m.n_params, s.data() + k * m.n_params), TL_OK)
          << tl_last_error();
    }
    if (step) *step = tl_sharded_state(r).step;
    tl_sharded_close(r);
  } else {
    tl_train_state st;
    EXPECT_EQ(tl_checkpoint_read(path.c_str(), &m, &st, s.data(), s.data() + m.n_params,
                                 s.data() + 2 * m.n_params),
              TL_OK)
        << tl_last_error();
    if (step) *step = st.step;
  }
  return s;
}

// The step losses a run's --metrics file holds, as written (six decimals,
// not the four of the step lines), in step order from `first`; a step
// missing or out of order fails the test.
std::vector<double> Losses(const std::string& metrics, int first) {
  std::vector<double> l;
  std::ifstream f(metrics);
  EXPECT_TRUE(f.good()) << "no metrics file " << metrics;
  std::string line;
  while (std::getline(f, line)) {
    long long step;
    double loss;
    if (std::sscanf(line.c_str(), "{\"step\": %lld, \"loss\": %lf", &step, &loss) != 2) continue;
    EXPECT_EQ(step, first + (long long)l.size()) << metrics << ": " << line;
    l.push_back(loss);
  }
  return l;
}

// `trellis train CONFIG [--verify] --metrics DIR.metrics.jsonl`
RunResult Train(const std::string& config, const std::string& dir, bool verify = false) {
  std::vector<std::string> argv = {kTrellis, "train", config, "--metrics", dir + ".metrics.jsonl"};
  if (verify) argv.push_back("--verify");
  return RunProcess(argv, {}, 120, true);
}

struct Job {
  RunResult first;  // dp 2 x pp 2, ZeRO-3, 6 steps
  std::string dir;
};

const Job& First() {
  static Job j;
  if (j.dir.empty()) {
    j.dir = Dir("zero3");
    j.first = Train(Config("{\"dp\": 2, \"pp\": 2}", 3, j.dir, ""), j.dir);
  }
  return j;
}

TEST(Sharded, ZeroThreeWritesEveryRanksPartAndAnIndex) {
  const Job& j = First();
  ASSERT_EQ(j.first.status, 0) << j.first.output;
  std::string ck = j.dir + "/step_000003.ckpt";
  EXPECT_TRUE(tl_sharded_is(ck.c_str())) << ck;
  for (int r = 0; r < 4; r++) {
    char part[64];
    snprintf(part, sizeof part, "/part-%05d.bin", r);
    EXPECT_EQ(access((ck + part).c_str(), R_OK), 0) << "every rank holds a shard: " << part;
  }
  EXPECT_EQ(access((ck + "/index.json").c_str(), R_OK), 0);
  int64_t step = 0;
  std::vector<float> s = State(ck, &step);
  EXPECT_EQ(step, 3);
  // the CLI says what the largest rank held while it wrote its part
  EXPECT_NE(j.first.output.find("(sharded: 4 parts"), std::string::npos) << j.first.output;
}

TEST(Sharded, TheSameMeshContinuesBitForBit) {
  const Job& j = First();
  ASSERT_EQ(j.first.status, 0) << j.first.output;
  std::string dir = Dir("zero3_again");
  RunResult r = Train(Config("{\"dp\": 2, \"pp\": 2}", 3, dir, j.dir + "/step_000003.ckpt"), dir);
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<float> want = State(j.dir + "/step_000006.ckpt"),
                     got = State(dir + "/step_000006.ckpt");
  ASSERT_EQ(want.size(), got.size());
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); i++) differ += memcmp(&want[i], &got[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "of " << want.size() << " parameter and moment elements";
  std::vector<double> a = Losses(j.dir + ".metrics.jsonl", 1),
                      b = Losses(dir + ".metrics.jsonl", 4);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (int i = 0; i < 3; i++) EXPECT_EQ(a[3 + i], b[i]) << "step " << 4 + i;
}

TEST(Sharded, AnotherMeshAndZeroStageContinuesAsTheSingleDeviceRun) {
  const Job& j = First();
  ASSERT_EQ(j.first.status, 0) << j.first.output;
  // tp 2, ZeRO-1, checked at every step against one device (which reads
  // the same directory on its own)
  const std::string tp2 = Dir("tp2");
  RunResult r = Train(Config("{\"tp\": 2}", 1, tp2, j.dir + "/step_000003.ckpt"), tp2, true);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("verify: EQUAL to the single-device run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verify:   start       parameters equal bit for bit"), std::string::npos)
      << r.output;
  // one device: the uninterrupted run's losses
  const std::string one_dir = Dir("one");
  RunResult one = Train(Config("{}", 0, one_dir, j.dir + "/step_000003.ckpt"), one_dir);
  ASSERT_EQ(one.status, 0) << one.output;
  std::vector<double> a = Losses(j.dir + ".metrics.jsonl", 1),
                      b = Losses(one_dir + ".metrics.jsonl", 4);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 3u);
  for (int i = 0; i < 3; i++) EXPECT_NEAR(b[i], a[3 + i], 1e-5 * a[3 + i]) << "step " << 4 + i;
}

// Context parallelism: a cp 2 x dp 2 run under ZeRO-3 (4 ranks, its state
// sharded over the data group dp x cp) writes sharded checkpoints; from
// step 3 cp 2 alone with ZeRO-1 (2 ranks) continues under --verify, EQUAL
// to one device reading the same directory; and the dp 2 x pp 2 run's
// checkpoint continues on cp 2 the same way.
TEST(Sharded, AContextParallelRunResumesOnAnotherMesh) {
  const std::string dir = Dir("cp2_dp2");
  RunResult first = Train(Config("{\"cp\": 2, \"dp\": 2}", 3, dir, ""), dir);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_NE(first.output.find("(sharded: 4 parts"), std::string::npos) << first.output;
  const std::string cp2 = Dir("cp2");
  RunResult r = Train(Config("{\"cp\": 2}", 1, cp2, dir + "/step_000003.ckpt"), cp2, true);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("verify: EQUAL to the single-device run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verify:   start       parameters equal bit for bit"), std::string::npos)
      << r.output;
  const Job& j = First();
  ASSERT_EQ(j.first.status, 0) << j.first.output;
  const std::string from_pp = Dir("cp2_from_pp");
  RunResult p =
      Train(Config("{\"cp\": 2}", 0, from_pp, j.dir + "/step_000003.ckpt"), from_pp, true);
  EXPECT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("verify: EQUAL to the single-device run"), std::string::npos) << p.output;
}

TEST(Sharded, TensorParallelShardsWriteTheirSlices) {
  // dp 2 x tp 2 (sequence parallel) with ZeRO-2 writes sharded: every
  // rank its chunk of its tensor-parallel shard; one device reads it and
  // continues with the mesh's own losses
  std::string dir = Dir("tp2_zero2");
  std::string cfg = Config("{\"dp\": 2, \"tp\": 2}", 2, dir, "");
  std::string text = RunProcess({"cat", cfg}).output;
  size_t at = text.find("\"checkpoint\": {");
  text.insert(at + 15, "\"format\": \"sharded\", ");
  at = text.find("\"parallel\": {");
  text.insert(at + 13, "\"sequence_parallel\": true, ");
  RunResult a = Train(WriteTempFile(text), dir);
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(a.output.find("(sharded: 4 parts"), std::string::npos) << a.output;
  const std::string one_dir = Dir("tp2_one");
  RunResult one = Train(Config("{}", 0, one_dir, dir + "/step_000003.ckpt"), one_dir);
  ASSERT_EQ(one.status, 0) << one.output;
  std::vector<double> x = Losses(dir + ".metrics.jsonl", 1),
                      y = Losses(one_dir + ".metrics.jsonl", 4);
  ASSERT_EQ(x.size(), 6u);
  ASSERT_EQ(y.size(), 3u);
  for (int i = 0; i < 3; i++) EXPECT_NEAR(y[i], x[3 + i], 1e-5 * x[3 + i]) << "step " << 4 + i;
}

TEST(Sharded, ABrokenPartIsRefusedNamingTheFile) {
  const Job& j = First();
  ASSERT_EQ(j.first.status, 0) << j.first.output;
  // a copy of the step-3 checkpoint with part 2 cut short, and one without part 1
  std::string src = j.dir + "/step_000003.ckpt";
  for (int broken = 0; broken < 2; broken++) {
    std::string dst = Dir(broken ? "missing.ckpt" : "short.ckpt");
    ASSERT_EQ(RunProcess({"cp", "-r", src, dst}).status, 0);
    std::string part = dst + (broken ? "/part-00001.bin" : "/part-00002.bin");
    if (broken) {
      ASSERT_EQ(unlink(part.c_str()), 0);
    } else {
      ASSERT_EQ(truncate(part.c_str(), 2048), 0);
    }
    RunResult r = RunProcess({kTrellis, "train", Config("{}", 0, Dir("never"), dst)}, {}, 60, true);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << "names " << part << ":\n" << r.output;
    EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << "no step runs:\n" << r.output;
  }
}

TEST(Sharded, AFailedSaveIsReportedOnceByTheRankItHappenedOn) {
  // rank 0 cannot create the temporary directory (a file holds its name):
  // the job stops, non-zero, and the reason is printed once
  std::string dir = Dir("blocked");
  ASSERT_EQ(RunProcess({"mkdir", "-p", dir}).status, 0);
  FILE* f = fopen((dir + "/step_000003.ckpt.tmp").c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  RunResult r =
      RunProcess({kTrellis, "train", Config("{\"dp\": 2, \"pp\": 2}", 3, dir, "")}, {}, 120, true);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(CountOf(r.output, "cannot create checkpoint directory"), 1) << r.output;
  EXPECT_EQ(r.output.find("step 4/"), std::string::npos) << r.output;
}

TEST(Sharded, EveryRankWritesItsSlicesOfTheModelFile) {
  // the ZeRO-3 job exports (every rank its slices) what one device exports
  // after reading the same checkpoint
  const Job& j = First();
  ASSERT_EQ(j.first.status, 0) << j.first.output;
  std::string ck = j.dir + "/step_000006.ckpt";
  std::string mesh_file = Dir("mesh_export.bin"), one_file = Dir("one_export.bin");
  RunResult a = RunProcess(
      {kTrellis, "train", Config("{\"dp\": 2, \"pp\": 2}", 3, "", ck), "--export", mesh_file}, {},
      120, true);
  RunResult b =
      RunProcess({kTrellis, "train", Config("{}", 0, "", ck), "--export", one_file}, {}, 120, true);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  std::string x = RunProcess({"cmp", mesh_file, one_file}).output;
  EXPECT_EQ(RunProcess({"cmp", mesh_file, one_file}).status, 0) << x;
  // a file it could not write at the end is refused before any rank starts
  RunResult c = RunProcess({kTrellis, "train", Config("{\"dp\": 2, \"pp\": 2}", 3, "", ck),
                            "--export", Dir("no_such_dir/m.bin")},
                           {}, 120, true);
  EXPECT_EQ(c.status, 2) << c.output;
  EXPECT_NE(c.output.find("--export " + Dir("no_such_dir/m.bin") + ": cannot write into '" +
                          Dir("no_such_dir") + "': No such file or directory"),
            std::string::npos)
      << c.output;
  EXPECT_EQ(c.output.find("starting"), std::string::npos) << "no rank starts\n" << c.output;
}

}  // namespace
