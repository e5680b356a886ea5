// The JSON training config: defaults, every bad config with its message,
// all problems at once, exact save/load round trips, atomic saves, and docs
// that list every key with the default the code uses.
#include "core/config.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/core/bad_configs.h"

namespace {

std::string TempDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// A new file holding `text`; its path.
std::string WriteTemp(const std::string& text, const char* suffix = ".json") {
  std::string tmpl = TempDir() + "/configXXXXXX" + suffix;
  std::vector<char> path(tmpl.begin(), tmpl.end());
  path.push_back('\0');
  int fd = mkstemps(path.data(), (int)strlen(suffix));
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), (ssize_t)text.size());
  close(fd);
  return path.data();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

// Every field set to something other than its default, including values
// that are hard to write exactly (floats, a double, quotes in strings).
// Every field away from its default (those of the other model kind stay at
// theirs: they are neither read nor saved).
struct tl_config Unusual(tl_model_kind kind = TL_MODEL_MLP) {
  struct tl_config c;
  tl_config_defaults(&c);
  c.model.kind = kind;
  c.model.vocab_size = 50257;
  if (kind == TL_MODEL_GPT) {
    c.model.n_layers = 6;
    c.model.n_heads = 6;
    c.model.n_embd = 384;
    c.model.padded_vocab_size = 50304;
    c.model.max_seq_len = 1024;
  } else if (kind == TL_MODEL_LLAMA) {
    c.model.n_layers = 6;
    c.model.n_heads = 6;
    c.model.n_kv_heads = 2;
    c.model.n_embd = 384;
    c.model.ffn_hidden = 1000;
    c.model.padded_vocab_size = 50304;
    c.model.max_seq_len = 1024;
    c.model.rope_theta = 500000.0f;
    c.model.rope_scaling = {8.0f, 1.0f, 4.0f, 8192};
    c.model.norm_eps = 1e-6f;
    c.model.tie_embeddings = true;
  } else {
    c.model.n_mlp_layers = 4;  // even: the outputs stay whole under tensor parallelism
    int sizes[] = {784, 256, 128, 64, 50257};
    memcpy(c.model.mlp_sizes, sizes, sizeof sizes);
  }
  c.model.seed = 9223372036854775807ull;
  snprintf(c.model.init_from, sizeof c.model.init_from, "weights/gpt2 \"124M\"\\.bin");
  c.mesh.dp = 2;
  c.mesh.tp = 2;
  c.mesh.pp = 3;
  c.mesh.order[0] = TL_AXIS_PP;
  c.mesh.order[1] = TL_AXIS_TP;
  c.mesh.order[2] = TL_AXIS_CP;
  c.mesh.order[3] = TL_AXIS_DP;
  c.schedule.kind = TL_SCHEDULE_GPIPE;
  c.schedule.micro_batches = 4;
  c.schedule.virtual_stages = 1;
  c.parallel.zero = 0;  // ZeRO and recomputation are refused until the runtime has them
  c.parallel.bucket_mb = 0.1 + 0.2;  // 0.30000000000000004
  c.parallel.recompute = kind != TL_MODEL_MLP ? TL_RECOMPUTE_SELECTIVE : TL_RECOMPUTE_FULL;
  c.parallel.sequence_parallel = kind != TL_MODEL_MLP;
  c.train.steps = 7;
  c.train.batch_size = 16;
  c.train.seq_len = 1000;
  c.train.lr = 3e-4f;
  c.train.min_lr = 1.0f / 3.0f * 1e-5f;
  c.train.warmup_steps = 2;
  c.train.lr_schedule = TL_LR_CONSTANT;
  c.train.beta1 = 0.85f;
  c.train.beta2 = 0.999f;
  c.train.eps = 1e-6f;
  c.train.weight_decay = 0.1f;
  c.train.grad_clip = 0.0f;
  c.train.val_every = 5;
  c.train.val_batches = 2;
  c.train.sample_tokens = 0;
  c.train.sample_top_k = 40;
  snprintf(c.data.train, sizeof c.data.train, "data/tiny_train.bin");
  snprintf(c.data.val, sizeof c.data.val, "données/val\u00e9.bin");
  c.device.type = TL_DEVICE_CUDA;
  c.device.threads = 3;
  snprintf(c.checkpoint.dir, sizeof c.checkpoint.dir, "ckpt");
  c.checkpoint.every = 50;
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "ckpt/step_000050");
  return c;
}

}  // namespace

TEST(Config, EmptyObjectGivesTheDocumentedDefaults) {
  struct tl_config c, d;
  ASSERT_EQ(tl_config_parse("{}", "empty.json", &c), TL_OK) << tl_last_error();
  tl_config_defaults(&d);
  EXPECT_EQ(memcmp(&c, &d, sizeof c), 0);
  EXPECT_EQ(c.model.kind, TL_MODEL_GPT);
  EXPECT_EQ(c.model.n_layers, 4);
  EXPECT_EQ(c.model.n_embd, 128);
  EXPECT_EQ(tl_config_ranks(&c.mesh), 1);
  EXPECT_EQ(c.mesh.order[0], TL_AXIS_TP);  // tp, cp, dp, pp: Megatron-LM's
  EXPECT_EQ(c.mesh.order[1], TL_AXIS_CP);
  EXPECT_EQ(c.mesh.order[2], TL_AXIS_DP);
  EXPECT_EQ(c.mesh.order[3], TL_AXIS_PP);
  EXPECT_EQ(c.schedule.kind, TL_SCHEDULE_1F1B);
  EXPECT_EQ(c.train.lr, 1e-3f);
  EXPECT_EQ(c.train.beta2, 0.95f);
  EXPECT_EQ(c.parallel.bucket_mb, 25.0);
  EXPECT_EQ(c.model.seed, 1337u);
}

TEST(Config, NamedValuesAreRead) {
  struct tl_config c;
  const char* text = R"({"model": {"kind": "mlp", "mlp_sizes": [8, 16, 16, 2], "vocab_size": 2},
                         "mesh": {"dp": 2, "pp": 3, "order": ["pp", "dp", "tp"]},
                         "train": {"lr": 1, "batch_size": 8},
                         "schedule": {"micro_batches": 2},
                         "device": {"type": "cuda", "threads": 2}})";
  ASSERT_EQ(tl_config_parse(text, "x.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.model.kind, TL_MODEL_MLP);
  EXPECT_EQ(c.model.n_mlp_layers, 3);
  EXPECT_EQ(c.model.mlp_sizes[3], 2);
  EXPECT_EQ(c.mesh.order[0], TL_AXIS_PP);
  EXPECT_EQ(c.mesh.order[1], TL_AXIS_DP);
  EXPECT_EQ(c.mesh.order[2], TL_AXIS_TP);
  EXPECT_EQ(c.mesh.order[3], TL_AXIS_CP);  // three axes named: cp just outside tp
  EXPECT_EQ(c.train.lr, 1.0f);  // an integer is a fine number
  struct tl_config four;
  ASSERT_EQ(tl_config_parse(R"({"mesh": {"cp": 2, "order": ["cp", "tp", "pp", "dp"]}})",
                            "four.json", &four),
            TL_OK)
      << tl_last_error();
  EXPECT_EQ(four.mesh.cp, 2);
  EXPECT_EQ(four.mesh.order[0], TL_AXIS_CP);
  EXPECT_EQ(four.mesh.order[3], TL_AXIS_DP);
  EXPECT_EQ(c.device.type, TL_DEVICE_CUDA);
  EXPECT_EQ(c.device.threads, 2);
}

class BadConfigTest : public testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, ParseFailsNamingPathValueAndExpectation) {
  const BadConfig& b = GetParam();
  struct tl_config c;
  memset(&c, 0x5a, sizeof c);
  ASSERT_EQ(tl_config_parse(b.json, "bad.json", &c), TL_ERR_CONFIG) << b.json;
  std::string msg = tl_last_error();
  std::string want = Replace(b.expect, "{file}", "bad.json");
  EXPECT_NE(msg.find(want), std::string::npos) << "wanted: " << want << "\ngot: " << msg;
  struct tl_config zero;
  memset(&zero, 0, sizeof zero);
  EXPECT_EQ(memcmp(&c, &zero, sizeof c), 0) << "nothing half-built on failure";
}

TEST_P(BadConfigTest, LoadFailsTheSameWayFromAFile) {
  const BadConfig& b = GetParam();
  std::string path = WriteTemp(b.json);
  struct tl_config c;
  ASSERT_EQ(tl_config_load(path.c_str(), &c), TL_ERR_CONFIG);
  std::string msg = tl_last_error();
  std::string want = Replace(b.expect, "{file}", path);
  EXPECT_NE(msg.find(want), std::string::npos) << "wanted: " << want << "\ngot: " << msg;
  unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Table, BadConfigTest, testing::ValuesIn(BadConfigs()),
                         [](const testing::TestParamInfo<BadConfig>& i) { return i.param.name; });

TEST(Config, TableHasAtLeastTwentyCases) {
  EXPECT_GE(BadConfigs().size(), 20u);
}

TEST(Config, EveryProblemIsReportedAtOnceOnePerLine) {
  struct tl_config c;
  const char* text = R"({"model": {"n_heads": 0, "n_hed": 4, "kind": "mlp", "mlp_sizes": [2, 3, 0]},
                         "mesh": {"tp": "two", "order": ["tp", "dp", "xp"]},
                         "train": {"beta1": 2, "batch_size": 5},
                         "schedule": {"micro_batches": 2},
                         "sched": {}})";
  ASSERT_EQ(tl_config_parse(text, "many.json", &c), TL_ERR_CONFIG);
  std::string msg = tl_last_error();
  EXPECT_NE(msg.find("invalid config many.json: 8 problems:\n"), std::string::npos) << msg;
  for (const char* line :
       {"\nmodel.n_heads: only model.kind \"gpt\" or \"llama\" reads it; this model is \"mlp\"",
        "\nmodel.n_hed: unknown key; did you mean \"n_heads\"?",
        "\nmodel.mlp_sizes[2] = 0: expected an integer >= 1",
        "\nmesh.tp = \"two\": expected an integer >= 1, got a string",
        "\nmesh.order = [\"tp\",\"dp\",\"xp\"]: expected a permutation",
        "\ntrain.beta1 = 2: expected a number in [0, 1)",
        "\nschedule.micro_batches = 2: must divide each replica's batch "
        "train.batch_size / mesh.dp = 5 / 1 = 5",
        "\nsched: unknown section; did you mean \"schedule\"?"})
    EXPECT_NE(msg.find(line), std::string::npos) << "missing: " << line << "\nin: " << msg;
}

TEST(Config, AFieldAlreadyReportedDoesNotTriggerTheRulesThatReadIt) {
  struct tl_config c;
  ASSERT_EQ(tl_config_parse(R"({"model": {"n_heads": "4"}, "mesh": {"tp": 2}})", "x", &c),
            TL_ERR_CONFIG);
  std::string msg = tl_last_error();
  EXPECT_NE(msg.find("1 problem:"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("must divide model.n_heads"), std::string::npos) << msg;
}

TEST(Config, MissingFileIsAnIoErrorNamingThePath) {
  struct tl_config c;
  EXPECT_EQ(tl_config_load("/nonexistent/trellis.json", &c), TL_ERR_IO);
  EXPECT_NE(std::string(tl_last_error()).find("'/nonexistent/trellis.json'"), std::string::npos);
  // a directory opens, and then cannot be read: said so
  EXPECT_EQ(tl_config_load("/", &c), TL_ERR_IO);
  EXPECT_NE(std::string(tl_last_error()).find("cannot read config '/': Is a directory"),
            std::string::npos)
      << tl_last_error();
}

TEST(Config, SavedConfigLoadsBackExactly) {
  for (tl_model_kind kind : {TL_MODEL_GPT, TL_MODEL_MLP, TL_MODEL_LLAMA}) {
    struct tl_config c = Unusual(kind), back;
    std::string path = TempDir() + "/roundtrip.json";
    ASSERT_EQ(tl_config_save(&c, path.c_str()), TL_OK) << tl_last_error();
    ASSERT_EQ(tl_config_load(path.c_str(), &back), TL_OK) << tl_last_error();
    EXPECT_EQ(memcmp(&c, &back, sizeof c), 0) << ReadFile(path);
    EXPECT_EQ(back.parallel.bucket_mb, 0.1 + 0.2);
    EXPECT_EQ(back.train.min_lr, c.train.min_lr);
    EXPECT_EQ(back.model.seed, 9223372036854775807ull);
    EXPECT_STREQ(back.model.init_from, c.model.init_from);
    EXPECT_STREQ(back.data.val, c.data.val);
    // Saving what was loaded gives the same bytes.
    std::string again = TempDir() + "/roundtrip2.json";
    ASSERT_EQ(tl_config_save(&back, again.c_str()), TL_OK) << tl_last_error();
    EXPECT_EQ(ReadFile(path), ReadFile(again));
    // only the fields its kind reads
    EXPECT_EQ(ReadFile(path).find(kind != TL_MODEL_MLP ? "mlp_sizes" : "n_heads"),
              std::string::npos);
    if (kind != TL_MODEL_LLAMA) {
      EXPECT_EQ(ReadFile(path).find("rope_theta"), std::string::npos);
    }
  }
}

TEST(Config, DefaultsRoundTripAndNumbersAreWrittenShort) {
  struct tl_config c, back;
  tl_config_defaults(&c);
  std::string path = TempDir() + "/defaults.json";
  ASSERT_EQ(tl_config_save(&c, path.c_str()), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_config_load(path.c_str(), &back), TL_OK) << tl_last_error();
  EXPECT_EQ(memcmp(&c, &back, sizeof c), 0);
  std::string text = ReadFile(path);
  EXPECT_NE(text.find("\"lr\": 0.001,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"beta2\": 0.95,"), std::string::npos) << text;
  EXPECT_NE(text.find("\"order\": [\"tp\", \"cp\", \"dp\", \"pp\"]"), std::string::npos)
      << text;
}

TEST(Config, SaveRefusesAnInvalidConfigAndLeavesTheOldFile) {
  std::string path = WriteTemp("{\"old\": true}\n");
  struct tl_config c;
  tl_config_defaults(&c);
  c.mesh.tp = 3;  // does not divide n_heads = 4
  EXPECT_EQ(tl_config_save(&c, path.c_str()), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("mesh.tp = 3: must divide model.n_heads = 4"),
            std::string::npos)
      << tl_last_error();
  EXPECT_EQ(ReadFile(path), "{\"old\": true}\n");
  unlink(path.c_str());
}

TEST(Config, SaveLeavesNoTemporaryFileBehindOnFailure) {
  std::string dir = TempDir() + "/no_such_dir/cfg.json";
  struct tl_config c;
  tl_config_defaults(&c);
  EXPECT_EQ(tl_config_save(&c, dir.c_str()), TL_ERR_IO);
  EXPECT_NE(std::string(tl_last_error()).find("no_such_dir/cfg.json"), std::string::npos);
  // Renaming onto a directory fails after the temporary file was written:
  // the temporary file must be gone.
  std::string target = TempDir() + "/target_dir";
  mkdir(target.c_str(), 0755);
  EXPECT_EQ(tl_config_save(&c, target.c_str()), TL_ERR_IO);
  bool leftover = false;
  DIR* d = opendir(TempDir().c_str());
  ASSERT_NE(d, nullptr);
  while (struct dirent* e = readdir(d))
    if (std::string(e->d_name).rfind("target_dir.tmp.", 0) == 0) leftover = true;
  closedir(d);
  EXPECT_FALSE(leftover);
}

TEST(Config, CheckWorldNamesTheMeshAndTheJob) {
  struct tl_config c;
  tl_config_defaults(&c);
  c.mesh.dp = 2;
  c.mesh.pp = 2;
  EXPECT_EQ(tl_config_check_world(&c, 4), TL_OK);
  EXPECT_EQ(tl_config_check_world(&c, 3), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error())
                .find("dp * tp * pp * cp = 2 * 1 * 2 * 1 = 4 ranks, but this job has 3 ranks"),
            std::string::npos)
      << tl_last_error();
}

TEST(Config, PaddedVocabRoundsUpTo128UnlessSet) {
  struct tl_model_config m;
  memset(&m, 0, sizeof m);
  m.vocab_size = 50257;
  EXPECT_EQ(tl_config_padded_vocab(&m), 50304);
  m.vocab_size = 256;
  EXPECT_EQ(tl_config_padded_vocab(&m), 256);
  m.padded_vocab_size = 300;
  EXPECT_EQ(tl_config_padded_vocab(&m), 300);
}

TEST(Config, FourDeviceExampleIsValid) {
  struct tl_config c;
  ASSERT_EQ(tl_config_load("examples/four_device.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.mesh.dp, 2);
  EXPECT_EQ(c.mesh.pp, 2);
  EXPECT_EQ(c.mesh.tp, 1);
  EXPECT_EQ(c.model.kind, TL_MODEL_MLP);
  EXPECT_EQ(c.model.n_mlp_layers, 2);
  EXPECT_EQ(tl_config_check_world(&c, 4), TL_OK);
}

// docs/config.md has one table row per key: | `section.key` | type | `default` | ... |
// The default written there must be what tl_config_save writes for the defaults.
TEST(Config, EveryKeyIsDocumentedWithTheDefaultTheCodeUses) {
  std::string docs = ReadFile("docs/config.md");
  ASSERT_FALSE(docs.empty()) << "docs/config.md not found";
  std::map<std::string, std::string> documented;
  std::istringstream rows(docs);
  std::string row;
  while (std::getline(rows, row)) {
    if (row.rfind("| `", 0) != 0) continue;
    size_t a = row.find('`') + 1, b = row.find('`', a);
    std::string key = row.substr(a, b - a);
    size_t c1 = row.find('|', b), c2 = row.find('|', c1 + 1), c3 = row.find('|', c2 + 1);
    if (row.substr(0, c1) != "| `" + key + "` ") continue;  // a row of another table
    std::string def = row.substr(c2 + 1, c3 - c2 - 1);
    std::string compact;
    for (char ch : def)
      if (ch != ' ' && ch != '`') compact += ch;
    documented[key] = compact;
  }
  std::set<std::string> seen;
  for (tl_model_kind kind : {TL_MODEL_GPT, TL_MODEL_MLP, TL_MODEL_LLAMA}) {
    struct tl_config c;
    tl_config_defaults(&c);
    c.model.kind = kind;
    std::string path = TempDir() + "/documented.json";
    ASSERT_EQ(tl_config_save(&c, path.c_str()), TL_OK);
    std::istringstream saved(ReadFile(path));
    std::string line, section;
    while (std::getline(saved, line)) {
      size_t q = line.find('"');
      if (q == std::string::npos) continue;
      size_t q2 = line.find('"', q + 1);
      std::string key = line.substr(q + 1, q2 - q - 1);
      std::string value = line.substr(line.find(':', q2) + 1);
      if (value.find('{') != std::string::npos) {
        section = key;
        continue;
      }
      if (!value.empty() && value.back() == ',') value.pop_back();
      std::string compact;
      for (char ch : value)
        if (ch != ' ') compact += ch;
      std::string path_key = section + "." + key;
      ASSERT_TRUE(documented.count(path_key)) << path_key << " is not documented in docs/config.md";
      if (path_key != "model.kind") {  // the mlp pass sets it
        EXPECT_EQ(documented[path_key], compact) << "default of " << path_key;
      }
      seen.insert(path_key);
    }
  }
  int n = (int)seen.size();
  EXPECT_EQ(n, (int)documented.size()) << "docs/config.md documents keys the code does not have";
}
