// The config never lies: every field docs/config.md documents either changes
// what `trellis train` does or is refused before any rank starts, with a
// message naming it.
//
// For each documented field the table below gives a base config (a tiny
// GPT, 2 steps, on as many ranks as the field needs to matter), another
// value and what that value must do. Both are trained with --metrics and
// --trace; what a run did is its fingerprint: its exit status, the lines
// that report results (samples, validation losses, checkpoints written,
// warnings and errors; not the lines that echo the config, nor the timed
// step lines), the metrics without timings, the trace's spans in order
// (rank, name, step, micro-batch, without times), the name and bytes of
// every checkpoint it wrote and, where the row asks, the most threads a rank
// ran. Each row's other value either acts — another fingerprint — or is
// refused — `trellis check` and `trellis train` exit non-zero naming the
// field, and no step runs — as the row expects: a field that regresses from
// acting to refused fails. device.type "cuda" acts where there is a GPU;
// without one `trellis train` refuses it naming the field (`trellis check`
// checks a config for the machine it will run on, and accepts it). A field
// with no row in the table fails the test: a new field comes with the
// proof that it acts.
#include <gtest/gtest.h>
#include <jansson.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "graph/model.h"
#include "launcher/train/checkpoint.h"
#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// A byte-level token file of `text` repeated to about `bytes`.
std::string Corpus(const std::string& name, const std::string& text, size_t bytes) {
  std::string all;
  while (all.size() < bytes) all += text;
  std::string txt = TmpDir() + "/" + name + ".txt", bin = TmpDir() + "/" + name + ".bin";
  std::ofstream(txt) << all;
  EXPECT_EQ(RunProcess({kTrellis, "data", txt, bin}).status, 0);
  return bin;
}

// The tiny GPT of every base config, as the trainer would lay it out.
const char* kModel = R"({"n_layers": 2, "n_heads": 2, "n_embd": 16, "max_seq_len": 16})";

// A tiny Llama (two heads, each its own key/value head) for the fields only
// a Llama reads.
const char* kLlama =
    R"({"model": {"kind": "llama", "n_layers": 2, "n_heads": 2, "n_embd": 16, "max_seq_len": 16}})";

// An llm.c model file of the tiny GPT (weights from another seed).
// An llm.c tokenizer file of 256 tokens, token i decoding to "<xx>" (its
// hex): a sample decoded through it reads unlike the byte-level one.
std::string TokenizerFile() {
  std::string path = TmpDir() + "/tokenizer.bin";
  std::ofstream f(path, std::ios::binary);
  uint32_t h[256] = {20240328, 2, 256, 0};
  f.write(reinterpret_cast<const char*>(h), sizeof h);
  for (int i = 0; i < 256; i++) {
    char piece[8];
    int n = snprintf(piece, sizeof piece, "<%02x>", i);
    f.put((char)n);
    f.write(piece, n);
  }
  return path;
}

std::string LlmcFile() {
  tl_config c;
  tl_config_defaults(&c);
  c.model.n_layers = 2, c.model.n_heads = 2, c.model.n_embd = 16, c.model.max_seq_len = 16;
  c.model.seed = 99;
  tl_model m;
  EXPECT_EQ(tl_model_init(&c.model, &m), TL_OK);
  std::vector<float> w(m.n_params);
  tl_model_init_params(&m, 0, m.n_params, w.data());
  std::string path = TmpDir() + "/init.bin";
  EXPECT_EQ(tl_llmc_model_write(path.c_str(), &m, w.data()), TL_OK) << tl_last_error();
  return path;
}

json_t* Parse(const std::string& text) {
  json_error_t err;
  json_t* j = json_loads(text.c_str(), 0, &err);
  EXPECT_NE(j, nullptr) << text << ": " << err.text;
  return j;
}

// base, with each section of `over` merged in (a "model" section replaces
// the base's: fields of one model kind are refused in a config of the other).
std::string Merge(const std::string& base, const std::string& over) {
  json_t* b = Parse(base);
  json_t* o = Parse(over);
  const char* sec;
  json_t* v;
  json_object_foreach(o, sec, v) {
    json_t* have = json_object_get(b, sec);
    if (have && std::string(sec) != "model")
      json_object_update(have, v);
    else
      json_object_set(b, sec, v);
  }
  char* s = json_dumps(b, JSON_SORT_KEYS);
  std::string out = s;
  free(s);
  json_decref(b);
  json_decref(o);
  return out;
}

struct Outcome {
  bool refused = false;        // by trellis train, before a step
  bool check_refused = false;  // by trellis check
  int max_threads = 0;         // with count_threads
  std::string dir, output, fingerprint;
};

int g_runs = 0;

// Checks and trains `json` in a directory of its own; "RUN" in the config
// stands for that directory, and is written back for it in what the run
// printed, so that two runs differ only by what they did.
Outcome Train(const std::string& json, int ranks,
              const std::map<std::string, std::string>& env = {}, bool count_threads = false) {
  std::string dir = TmpDir() + "/run" + std::to_string(g_runs++);
  mkdir(dir.c_str(), 0755);
  std::string cfg = dir + "/config.json";
  std::ofstream(cfg) << Replace(json, "RUN", dir);
  Outcome r;
  r.dir = dir;
  RunResult check = RunProcess({kTrellis, "check", cfg}, {}, 60);
  Signals threads;
  threads.count_threads = count_threads;
  RunResult train = RunProcessSignalled(
      {kTrellis, "train", cfg, "--metrics", dir + "/m.jsonl", "--trace", dir + "/t.json"}, threads,
      env, 120, ranks > 1);
  r.output = Replace(check.output + "\n--- train\n" + train.output, dir, "RUN");
  r.check_refused = check.status != 0;
  const bool stepped =
      train.output.find("\nstep ") != std::string::npos || train.output.rfind("step ", 0) == 0;
  if (check.status != 0 || (train.status != 0 && !stepped)) {
    r.refused = true;
    EXPECT_NE(train.status, 0) << "trellis check refused it, trellis train ran it:\n" << r.output;
    EXPECT_FALSE(stepped) << "a step ran:\n" << r.output;
    return r;
  }
  // what the run did, not what it was told: lines that only echo the config
  // ("model: ...", "run: ...", the learning rate) stay out
  std::ostringstream fp;
  fp << "exit " << train.status << "\n";
  r.max_threads = train.max_threads;
  if (count_threads) fp << "threads " << train.max_threads << "\n";
  std::istringstream lines(Replace(train.output, dir, "RUN"));
  std::string line;
  while (std::getline(lines, line)) {
    bool timed = line.rfind("step ", 0) == 0 && line.find(" ms") != std::string::npos;
    for (const char* kept : {"sample: ", "checkpoint: ", "step ", "[trellis", "trellis train: "})
      if (!timed && line.rfind(kept, 0) == 0) {
        fp << line << "\n";
        break;
      }
  }
  // the metrics, but their timings
  std::istringstream metrics(ReadFile(dir + "/m.jsonl"));
  while (std::getline(metrics, line)) {
    json_t* j = Parse(line);
    for (const char* timed : {"ms", "tokens_per_s", "wait_ms", "dp_wait_ms"})
      json_object_del(j, timed);
    char* s = json_dumps(j, JSON_SORT_KEYS);
    fp << "metrics " << s << "\n";
    free(s);
    json_decref(j);
  }
  // the spans of every rank in order
  json_error_t err;
  json_t* trace = json_load_file((dir + "/t.json").c_str(), 0, &err);
  json_t* events = json_object_get(trace, "traceEvents");
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t* e = json_array_get(events, i);
    json_t* args = json_object_get(e, "args");
    const char* name = json_string_value(json_object_get(e, "name"));
    fp << "span " << json_integer_value(json_object_get(e, "pid")) << " " << (name ? name : "")
       << " " << json_integer_value(json_object_get(args, "step")) << " "
       << json_integer_value(json_object_get(args, "micro")) << "\n";
  }
  json_decref(trace);
  // what every checkpoint directory received
  for (const char* sub : {"ckpt", "other"}) {
    for (int step = 0; step <= 4; step++) {
      char name[64];
      snprintf(name, sizeof name, "/%s/step_%06d.ckpt", sub, step);
      std::string bytes = ReadFile(dir + name);
      if (!bytes.empty()) fp << "file " << name << " " << std::hash<std::string>()(bytes) << "\n";
      // a sharded checkpoint: a directory, its index and rank 0's part
      std::string index = ReadFile(dir + name + "/index.json");
      if (!index.empty())
        fp << "sharded " << name << " " << std::hash<std::string>()(index) << " "
           << std::hash<std::string>()(ReadFile(dir + name + "/part-00000.bin")) << "\n";
    }
  }
  r.fingerprint = fp.str();
  return r;
}

// What a row's other value must do.
enum class Expect {
  kActs,            // another fingerprint
  kRefused,         // trellis check and trellis train refuse it, naming the field
  kRefusedByTrain,  // trellis check accepts it; trellis train refuses it, naming the field
};

struct Field {
  std::string key;    // "section.name", as docs/config.md lists it
  std::string base;   // sections merged into the common base
  std::string value;  // the other value, as JSON
  int ranks;          // of the base and the other run
  // the environment of both runs (a transient NaN for train.skip_nonfinite)
  std::map<std::string, std::string> env = {};
  Expect expect = Expect::kActs;
  bool count_threads = false;  // the fingerprint holds the most threads a rank ran
};

bool HasGpu() {
  RunResult r = RunProcess({"sh", "-c", "nvidia-smi -L"});
  return r.status == 0 && r.output.find("GPU ") != std::string::npos;
}

}  // namespace

TEST(Fields, EveryDocumentedFieldActsOrIsRefused) {
  const std::string corpus_a = Corpus(
      "a", "the quick brown fox jumps over the lazy dog. pack my box with five dozen jugs.\n",
      6000);
  const std::string corpus_b = Corpus(
      "b", "sphinx of black quartz, judge my vow! how vexingly quick daft zebras jump.\n", 6000);
  const std::string llmc = LlmcFile();
  // the common base: the tiny GPT for 2 steps on one rank, a checkpoint at the end
  const std::string base = std::string(R"({"model": )") + kModel + R"(,
      "train": {"steps": 2, "batch_size": 4, "seq_len": 8, "sample_tokens": 0},
      "data": {"train": ")" +
                           corpus_a + R"("},
      "device": {"threads": 1}, "checkpoint": {"dir": "RUN/ckpt"}})";
  const std::string with_val = R"({"data": {"val": ")" + corpus_a + R"("}})";
  const std::string validating =
      R"({"data": {"val": ")" + corpus_a + R"("}, "train": {"val_every": 1}})";
  const std::vector<Field> table = {
      {"model.kind", R"({"model": {}})", R"("mlp")", 1},
      {"model.n_layers", "{}", "3", 1},
      {"model.n_heads", "{}", "4", 1},
      {"model.n_embd", "{}", "32", 1},
      {"model.vocab_size", "{}", "200", 1},
      {"model.padded_vocab_size", "{}", "384", 1},
      {"model.max_seq_len", "{}", "32", 1},
      {"model.mlp_sizes", R"({"model": {"kind": "mlp", "mlp_sizes": [8, 256]}})", "[8, 16, 256]",
       1},
      {"model.n_kv_heads", kLlama, "1", 1},
      {"model.ffn_hidden", kLlama, "32", 1},
      {"model.rope_theta", kLlama, "500000", 1},
      {"model.rope_scaling", kLlama,
       R"({"factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
           "original_max_position_embeddings": 8})",
       1},
      {"model.norm_eps", kLlama, "0.5", 1},
      {"model.tie_embeddings", kLlama, "true", 1},
      {"model.seed", "{}", "7", 1},
      {"model.init_from", "{}", "\"" + llmc + "\"", 1},
      {"mesh.dp", "{}", "2", 2},
      {"mesh.tp", "{}", "2", 2},
      {"mesh.pp", "{}", "2", 2},
      {"mesh.cp", "{}", "2", 2},
      {"mesh.order", R"({"mesh": {"dp": 2, "pp": 2}})", R"(["pp", "dp", "tp"])", 4},
      {"schedule.kind", R"({"mesh": {"pp": 2}, "schedule": {"micro_batches": 2}})", R"("gpipe")",
       2},
      {"schedule.micro_batches", "{}", "2", 1},
      {"schedule.stage_layers",
       std::string(R"({"model": {"n_layers": 4, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
                       "mesh": {"pp": 2}})"),
       "[1, 3]", 2},
      {"schedule.virtual_stages",
       std::string(R"({"model": {"n_layers": 6, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
                       "mesh": {"pp": 2}, "schedule": {"kind": "interleaved", "virtual_stages": 2,
                       "micro_batches": 2}})"),
       "3", 2},
      {"parallel.zero", R"({"mesh": {"dp": 2}})", "1", 2},
      {"parallel.bucket_mb", R"({"mesh": {"dp": 2}})", "0.0001", 2},
      {"parallel.recompute", "{}", R"("full")", 1},
      {"parallel.sequence_parallel", R"({"mesh": {"tp": 2}})", "true", 2},
      {"parallel.deterministic", R"({"mesh": {"dp": 2}})", "true", 2},
      {"parallel.grad_reduce", R"({"mesh": {"dp": 2}})", R"("bf16")", 2},
      // the last rank stops itself in step 3 (TRELLIS_FAULT): the base's
      // watchdog ends the job after 5 s, the other's after 2
      {"parallel.timeout_s",
       R"({"mesh": {"dp": 2}, "train": {"steps": 4}, "parallel": {"timeout_s": 5}})",
       "2",
       2,
       {{"TRELLIS_FAULT", "rank_stops"}}},
      {"train.steps", "{}", "3", 1},
      {"train.batch_size", "{}", "8", 1},
      {"train.seq_len", "{}", "16", 1},
      {"train.lr", "{}", "0.01", 1},
      {"train.min_lr", "{}", "0.0005", 1},
      {"train.warmup_steps", "{}", "1", 1},
      {"train.lr_schedule", "{}", R"("constant")", 1},
      {"train.beta1", "{}", "0.5", 1},
      {"train.beta2", "{}", "0.5", 1},
      {"train.eps", "{}", "0.01", 1},
      {"train.weight_decay", "{}", "0.5", 1},
      {"train.grad_clip", "{}", "0.01", 1},
      {"train.val_every", with_val, "1", 1},
      {"train.val_batches", validating, "2", 1},
      {"train.sample_tokens", "{}", "8", 1},
      {"train.sample_top_k", R"({"train": {"sample_tokens": 16}})", "40", 1},
      // step 2's gradients are NaN (TRELLIS_FAULT): the base stops there,
      // the other skips it
      {"train.skip_nonfinite",
       R"({"mesh": {"dp": 2}, "train": {"steps": 3}})",
       "true",
       2,
       {{"TRELLIS_FAULT", "nan_at_step_2"}}},
      {"train.precision", "{}", R"("bf16")", 1},
      {"data.train", "{}", "\"" + corpus_b + "\"", 1},
      {"data.val", validating, "\"" + corpus_b + "\"", 1},
      {"data.tokenizer", R"({"train": {"sample_tokens": 8}})", "\"" + TokenizerFile() + "\"", 1},
      {"device.type", "{}", R"("cuda")", 1, {}, HasGpu() ? Expect::kActs : Expect::kRefusedByTrain},
      // the threads a rank runs: a model whose matrices are large enough to
      // be split, for long enough to be seen
      {"device.threads",
       R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": 128, "max_seq_len": 64},
           "train": {"steps": 6, "batch_size": 8, "seq_len": 64}})",
       "2",
       1,
       {},
       Expect::kActs,
       true},
      {"checkpoint.dir", "{}", R"("RUN/other")", 1},
      {"checkpoint.every", "{}", "1", 1},
      {"checkpoint.resume", "{}", R"("RESUME")", 1},
      {"checkpoint.format", "{}", R"("sharded")", 1},
      {"checkpoint.keep", R"({"checkpoint": {"every": 1}})", "1", 1},
  };

  // the fields docs/config.md documents (rows "| `section.key` | type | ...")
  std::set<std::string> documented;
  std::istringstream rows(ReadFile("docs/config.md"));
  std::string row;
  while (std::getline(rows, row)) {
    if (row.rfind("| `", 0) != 0) continue;
    size_t a = 3, b = row.find('`', a);
    std::string key = row.substr(a, b - a);
    if (key.find('.') != std::string::npos && row.compare(b, 3, "` |") == 0) documented.insert(key);
  }
  ASSERT_GE(documented.size(), 40u) << "docs/config.md not found or not parsed";

  // a run's fingerprint is what it did, not when: the same config twice gives the same one
  const Outcome again[2] = {Train(base, 1), Train(base, 1)};
  ASSERT_FALSE(again[0].refused) << again[0].output;
  ASSERT_EQ(again[0].fingerprint, again[1].fingerprint) << "the fingerprint is not repeatable";
  ASSERT_NE(again[0].fingerprint.find("file /ckpt/step_000002.ckpt"), std::string::npos)
      << again[0].fingerprint;

  std::map<std::string, Outcome> bases;  // by base config
  std::set<std::string> covered;
  for (const Field& f : table) {
    covered.insert(f.key);
    EXPECT_TRUE(documented.count(f.key)) << f.key << " is tested but not documented";
    const std::string b = Merge(base, f.base);
    const std::string sec = f.key.substr(0, f.key.find('.'));
    const std::string name = f.key.substr(f.key.find('.') + 1);
    std::string value = f.value;
    if (value == R"("RESUME")") {  // a checkpoint of the base after its first step
      Outcome first =
          Train(Merge(b, R"({"train": {"steps": 1}, "checkpoint": {"dir": "RUN/ckpt"}})"), f.ranks);
      value = "\"" + first.dir + "/ckpt/step_000001.ckpt\"";
    }
    std::string over = "{\"" + sec + "\": {\"" + name + "\": " + value + "}}";
    if (sec == "model") {  // keep the base's model section, with this field changed
      json_t* bj = Parse(b);
      json_t* m = json_deep_copy(json_object_get(bj, "model"));
      json_t* v = Parse("[" + value + "]");
      json_object_set(m, name.c_str(), json_array_get(v, 0));
      json_t* o = json_object();
      json_object_set_new(o, "model", m);
      char* s = json_dumps(o, 0);
      over = s;
      free(s);
      json_decref(o), json_decref(v), json_decref(bj);
    }
    const std::string other = Merge(b, over);
    const std::string key = b + (f.env.empty() ? "" : " env " + f.env.begin()->second) +
                            (f.count_threads ? " threads" : "");
    if (!bases.count(key)) bases[key] = Train(b, f.ranks, f.env, f.count_threads);
    const Outcome& before = bases[key];
    ASSERT_FALSE(before.refused) << f.key << ": the base config is refused\n" << before.output;
    Outcome after = Train(other, f.ranks, f.env, f.count_threads);
    if (after.refused) {
      EXPECT_NE(f.expect, Expect::kActs)
          << f.key << " = " << value << " should act, and is refused:\n"
          << after.output;
      EXPECT_EQ(after.check_refused, f.expect == Expect::kRefused)
          << f.key << " = " << value << ": trellis check "
          << (after.check_refused ? "refuses" : "accepts") << " it\n"
          << after.output;
      const size_t named = after.output.find(f.key);
      EXPECT_NE(named, std::string::npos)
          << f.key << " = " << value << " is refused without naming it:\n"
          << after.output;
      printf("%-28s = %-12.12s refused: %s\n", f.key.c_str(), value.c_str(),
             named == std::string::npos ? "" : after.output.substr(named, 90).c_str());
    } else {
      EXPECT_EQ(f.expect, Expect::kActs)
          << f.key << " = " << value << " should be refused, and is accepted:\n"
          << after.output;
      EXPECT_NE(before.fingerprint, after.fingerprint)
          << f.key << " = " << value << " is accepted and changes nothing the run does\n"
          << other;
      printf("%-28s = %-12.12s acts%s\n", f.key.c_str(), value.c_str(),
             f.count_threads ? (" (a rank's threads: " + std::to_string(before.max_threads) +
                                " against " + std::to_string(after.max_threads) + ")")
                                   .c_str()
                             : "");
    }
  }
  for (const std::string& key : documented)
    EXPECT_TRUE(covered.count(key)) << key
                                    << " is documented but this test has no row for it: add one "
                                       "(a base config and another value)";
}
