// TensorBoard event files, read back with TensorBoard's own loader
// (read_tensorboard.py, from the TensorBoard that tools/setup.sh installs
// into /opt/trellis/venv): the writer's scalars exactly; `trellis train
// --tensorboard` beside --metrics, step for step; a running 4-rank job's
// file growing (and reading) while it trains; a directory that cannot be
// written refused before any rank starts.
#include "launcher/train/tensorboard.h"

#include <gtest/gtest.h>
#include <jansson.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";
const char* kPython = "/opt/trellis/venv/bin/python3";
const char* kReader = "tests/launcher/read_tensorboard.py";

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

// DIR read by TensorBoard: {"scalars": {tag: [[step, value], ...]},
// "versions": [...]}, or nullptr with *why where TensorBoard is missing.
json_t* ReadBack(const std::string& dir, std::string* why) {
  struct stat st;
  if (stat(kPython, &st) != 0) {
    *why = std::string("TensorBoard's reader is not installed (no ") + kPython +
           "; tools/setup.sh installs it)";
    return nullptr;
  }
  RunResult r = RunProcess({kPython, kReader, dir}, {{"PYTHONWARNINGS", "ignore"}}, 120);
  if (r.status == 3) {
    *why =
        "TensorBoard's reader is not installed in /opt/trellis/venv (tools/setup.sh installs "
        "it): " +
        r.output;
    return nullptr;
  }
  EXPECT_EQ(r.status, 0) << r.output;
  // the JSON is the last line (TensorBoard may log before it)
  const size_t at = r.output.rfind("{\"scalars\"");
  EXPECT_NE(at, std::string::npos) << r.output;
  json_error_t err;
  json_t* j = at == std::string::npos ? nullptr : json_loads(r.output.c_str() + at, 0, &err);
  EXPECT_NE(j, nullptr) << r.output;
  return j;
}

// (step, value) pairs of one tag.
std::vector<std::pair<int64_t, double>> Series(const json_t* j, const char* tag) {
  std::vector<std::pair<int64_t, double>> v;
  const json_t* a = json_object_get(json_object_get(j, "scalars"), tag);
  for (size_t i = 0; i < json_array_size(a); i++)
    v.emplace_back(json_integer_value(json_array_get(json_array_get(a, i), 0)),
                   json_number_value(json_array_get(json_array_get(a, i), 1)));
  return v;
}

TEST(TensorBoard, TheWritersScalarsReadBackExactly) {
  const std::string dir = TempDir("tb_unit/nested/run");  // made, parents too
  tl_tensorboard* tb = nullptr;
  ASSERT_EQ(tl_tensorboard_create(dir.c_str(), &tb), TL_OK) << tl_last_error();
  const char* tags[] = {"a/loss", "a/tiny", "b/huge"};
  const float steps[3][3] = {
      {5.5f, 1e-30f, 3.4e38f}, {-2.25f, 0.0f, 123456789.0f}, {0.1f, 7e-8f, 1.0f}};
  for (int s = 0; s < 3; s++)
    ASSERT_EQ(tl_tensorboard_scalars(tb, 10 * (s + 1), tags, steps[s], 3), TL_OK);
  const std::string path = tl_tensorboard_path(tb);
  EXPECT_EQ(path.rfind(dir + "/events.out.tfevents.", 0), 0u) << path;
  tl_tensorboard_destroy(tb);

  std::string why;
  json_t* j = ReadBack(dir, &why);
  if (!j && !why.empty()) GTEST_SKIP() << why;
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(json_string_value(json_array_get(json_object_get(j, "versions"), 0)),
            std::string("brain.Event:2"));
  for (int k = 0; k < 3; k++) {
    auto v = Series(j, tags[k]);
    ASSERT_EQ(v.size(), 3u) << tags[k];
    for (int s = 0; s < 3; s++) {
      EXPECT_EQ(v[s].first, 10 * (s + 1));
      EXPECT_EQ((float)v[s].second, steps[s][k]) << tags[k] << " at step " << v[s].first;
    }
  }
  json_decref(j);
}

std::string TokenFile(size_t bytes) {
  std::string text;
  for (size_t i = 0; text.size() < bytes; i++) text += "the quick brown fox " + std::to_string(i);
  const std::string in = WriteTempFile(text, ".txt");
  EXPECT_EQ(RunProcess({kTrellis, "data", in, in + ".bin"}).status, 0);
  return in + ".bin";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TensorBoard, ATrainingRunsCurvesAreItsMetricsStepForStep) {
  const std::string tokens = TokenFile(20000);
  const std::string cfg = WriteTempFile(
      R"({"model": {"n_layers": 1, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
          "train": {"steps": 4, "batch_size": 2, "seq_len": 16, "sample_tokens": 0,
                    "val_every": 2, "val_batches": 2},
          "data": {"train": ")" +
      tokens + R"(", "val": ")" + tokens + R"("}})");
  const std::string dir = TempDir("tb_run"), metrics = TempDir("tb_run.jsonl");
  RunResult r = RunProcess({kTrellis, "train", cfg, "--tensorboard", dir, "--metrics", metrics});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tensorboard: " + dir + "/events.out.tfevents."), std::string::npos)
      << r.output;
  std::string why;
  json_t* j = ReadBack(dir, &why);
  if (!j && !why.empty()) GTEST_SKIP() << why;
  ASSERT_NE(j, nullptr);
  // --metrics' lines, by step
  std::istringstream lines(ReadFile(metrics));
  std::string line;
  std::vector<json_t*> steps, vals;
  while (std::getline(lines, line)) {
    json_error_t err;
    json_t* m = json_loads(line.c_str(), 0, &err);
    ASSERT_NE(m, nullptr) << line;
    (json_object_get(m, "val_loss") ? vals : steps).push_back(m);
  }
  ASSERT_EQ(steps.size(), 4u);
  ASSERT_EQ(vals.size(), 2u);
  struct {
    const char *tag, *key;
  } pairs[] = {{"train/loss", "loss"},
               {"train/lr", "lr"},
               {"train/grad_norm", "grad_norm"},
               {"train/step_ms", "ms"},
               {"train/tokens_per_s", "tokens_per_s"},
               {"train/dp_wait_ms", "dp_wait_ms"},
               {"train/pipeline_wait_ms", "wait_ms"}};
  for (const auto& p : pairs) {
    auto v = Series(j, p.tag);
    ASSERT_EQ(v.size(), 4u) << p.tag;
    for (size_t s = 0; s < 4; s++) {
      EXPECT_EQ(v[s].first, (int64_t)s + 1) << p.tag;
      const double want = json_number_value(json_object_get(steps[s], p.key));
      // --metrics prints 6 significant digits, or 3 decimals (1 for
      // tokens/s); the event holds a float
      const double places = std::string(p.key) == "tokens_per_s" ? 0.051 : 1e-3;
      EXPECT_NEAR(v[s].second, want, 1e-5 * std::fabs(want) + places) << p.tag << " step " << s + 1;
    }
  }
  auto peak = Series(j, "train/peak_bytes");
  ASSERT_EQ(peak.size(), 4u);
  for (size_t s = 0; s < 4; s++) {
    const double want = (double)json_integer_value(
        json_object_get(json_object_get(steps[s], "peak_bytes"), "rank0"));
    EXPECT_GT(want, 0);
    EXPECT_EQ((float)peak[s].second, (float)want);
  }
  auto val = Series(j, "val/loss");
  ASSERT_EQ(val.size(), 2u);
  for (size_t k = 0; k < 2; k++) {
    EXPECT_EQ(val[k].first, json_integer_value(json_object_get(vals[k], "step")));
    EXPECT_NEAR(val[k].second, json_number_value(json_object_get(vals[k], "val_loss")), 1e-5);
  }
  for (json_t* m : steps) json_decref(m);
  for (json_t* m : vals) json_decref(m);
  json_decref(j);
}

// The file of a 4-rank job (dp 2 x pp 2), watched while the job runs: it
// grows step by step, and a copy taken mid-run reads in TensorBoard with
// the steps taken so far — what a person watching the run live sees.
TEST(TensorBoard, ARunningFourRankJobsFileGrowsAndReadsWhileItTrains) {
  const std::string tokens = TokenFile(40000);
  const int n_steps = 40;
  const std::string cfg = WriteTempFile(
      R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": 32, "max_seq_len": 32},
          "mesh": {"dp": 2, "pp": 2}, "schedule": {"micro_batches": 2},
          "train": {"steps": )" +
      std::to_string(n_steps) + R"(, "batch_size": 4, "seq_len": 32, "sample_tokens": 0},
          "device": {"threads": 1}, "data": {"train": ")" +
      tokens + R"("}})");
  const std::string dir = TempDir("tb_live"), snapshot_dir = TempDir("tb_live_snapshot");
  mkdir(snapshot_dir.c_str(), 0755);
  std::atomic<bool> done{false};
  std::vector<long> sizes;  // each distinct size seen while the job ran
  std::string snapshot;     // the file's bytes when it first held a few steps
  std::thread watch([&] {
    while (!done) {
      std::string file;
      if (FILE* p = popen(("ls " + dir + "/*tfevents* 2>/dev/null").c_str(), "r")) {
        char buf[4096];
        if (fgets(buf, sizeof buf, p)) file = std::string(buf, strcspn(buf, "\n"));
        pclose(p);
      }
      struct stat st;
      if (!file.empty() && stat(file.c_str(), &st) == 0) {
        if (sizes.empty() || st.st_size != sizes.back()) sizes.push_back((long)st.st_size);
        if (snapshot.empty() && sizes.size() >= 4) snapshot = ReadFile(file);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  RunResult r = RunProcess({kTrellis, "train", cfg, "--tensorboard", dir}, {}, 300, true);
  done = true;
  watch.join();
  ASSERT_EQ(r.status, 0) << r.output;
  // the version record, then growth while steps were still to come
  ASSERT_GE(sizes.size(), 4u) << "the event file did not grow while the job ran:\n" << r.output;
  for (size_t k = 1; k < sizes.size(); k++) EXPECT_GT(sizes[k], sizes[k - 1]);
  ASSERT_FALSE(snapshot.empty());
  std::ofstream(snapshot_dir + "/events.out.tfevents.0.snapshot", std::ios::binary) << snapshot;

  std::string why;
  json_t* whole = ReadBack(dir, &why);
  if (!whole && !why.empty()) GTEST_SKIP() << why;
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(Series(whole, "train/loss").size(), (size_t)n_steps);
  json_t* part = ReadBack(snapshot_dir, &why);
  ASSERT_NE(part, nullptr);
  const auto seen = Series(part, "train/loss");
  EXPECT_GE(seen.size(), 1u) << "a copy taken mid-run reads no step";
  EXPECT_LT(seen.size(), (size_t)n_steps) << "the copy was taken after the last step";
  const auto all = Series(whole, "train/loss");
  for (size_t s = 0; s < seen.size() && s < all.size(); s++) EXPECT_EQ(seen[s], all[s]);
  json_decref(whole);
  json_decref(part);
}

TEST(TensorBoard, ADirectoryThatCannotBeWrittenIsRefusedBeforeAnyStep) {
  // seen by the command line, before any rank starts
  const std::string file = WriteTempFile("not a directory");
  for (const std::string& dir : {file, file + "/sub"}) {
    RunResult r = RunProcess({kTrellis, "train", "examples/gpt_small.json", "--tensorboard", dir});
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--tensorboard '" + dir + "'"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;
  }
  RunResult r = RunProcess({kTrellis, "train", "examples/gpt_small.json", "--tensorboard"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--tensorboard: expected a value (--tensorboard DIR)"), std::string::npos)
      << r.output;
  // a directory that cannot be made (even by root): when rank 0 opens it
  const std::string cfg = WriteTempFile(
      R"({"model": {"n_layers": 1, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
          "train": {"steps": 2, "batch_size": 2, "seq_len": 16, "sample_tokens": 0},
          "data": {"train": ")" +
      TokenFile(2000) + R"("}})");
  r = RunProcess({kTrellis, "train", cfg, "--tensorboard", "/proc/trellis_tb/run"});
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("--tensorboard: cannot create directory '/proc/trellis_tb'"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;
}

}  // namespace
