// Hugging Face directories read as strictly as token files: every way a
// directory can be wrong is refused before any rank starts, naming the file
// and the tensor (or the config.json field); 16-bit tensors load as
// transformers' bits widened; a sharded directory (index and files) loads
// as the single file does; a config that sets a field the directory's
// config.json also sets must agree. The directory transformers wrote for
// tests/golden/llama/gqa_untied is the good one each case spoils.
#include "launcher/train/hf.h"

#include <gtest/gtest.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "graph/model.h"
#include "launcher/train/safetensors.h"
#include "tests/launcher/subprocess.h"

namespace {

const char* kGood = "tests/golden/llama/gqa_untied/hf";
const char* kTrellis = "launcher/trellis";

std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

int g_dirs = 0;

// A copy of the good directory (config.json and model.safetensors).
std::string Copy() {
  std::string dir = TmpDir() + "/hf" + std::to_string(g_dirs++);
  mkdir(dir.c_str(), 0755);
  for (const char* f : {"config.json", "model.safetensors"})
    WriteFile(dir + "/" + f, ReadFile(std::string(kGood) + "/" + f));
  return dir;
}

// A safetensors file's header (as JSON) and data.
struct St {
  json_t* header;
  std::string data;
};

St Split(const std::string& bytes) {
  uint64_t n = 0;
  memcpy(&n, bytes.data(), 8);
  json_error_t err;
  St s{json_loadb(bytes.data() + 8, n, 0, &err), bytes.substr(8 + n)};
  EXPECT_NE(s.header, nullptr) << err.text;
  return s;
}

std::string Join(const St& s) {
  char* text = json_dumps(s.header, JSON_COMPACT);
  std::string h = text;
  free(text);
  while (h.size() % 8) h += ' ';
  uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + h + s.data;
}

// Rewrites dir/model.safetensors through `edit` of its header and data.
void Edit(const std::string& dir, const std::function<void(St&)>& edit) {
  St s = Split(ReadFile(dir + "/model.safetensors"));
  edit(s);
  WriteFile(dir + "/model.safetensors", Join(s));
  json_decref(s.header);
}

tl_model Model() {
  tl_config c;
  tl_config_defaults(&c);
  std::string path = TmpDir() + "/good.json";
  std::ofstream(path) << R"({"model": {"init_from": ")" << kGood << R"("},
                            "train": {"seq_len": 16}})";
  EXPECT_EQ(tl_hf_config_load(path.c_str(), &c), TL_OK) << tl_last_error();
  tl_model m;
  EXPECT_EQ(tl_model_init(&c.model, &m), TL_OK) << tl_last_error();
  return m;
}

// The directory is refused, the message holding every one of `want`.
void Refused(const std::string& dir, const std::vector<std::string>& want) {
  tl_model m = Model();
  EXPECT_EQ(tl_hf_model_check(dir.c_str(), &m), TL_ERR_FORMAT) << dir;
  std::string msg = tl_last_error();
  for (const std::string& w : want) EXPECT_NE(msg.find(w), std::string::npos) << msg;
  printf("refused: %s\n", msg.substr(msg.find(": ") + 2).c_str());
}

TEST(HuggingFace, TheGoodDirectoryLoads) {
  tl_model m = Model();
  EXPECT_EQ(m.cfg.kind, TL_MODEL_LLAMA);
  EXPECT_EQ(tl_hf_model_check(kGood, &m), TL_OK) << tl_last_error();
}

TEST(HuggingFace, ATruncatedFileIsRefusedNamingItsLastTensor) {
  std::string dir = Copy();
  std::string bytes = ReadFile(dir + "/model.safetensors");
  WriteFile(dir + "/model.safetensors", bytes.substr(0, bytes.size() - 100));
  Refused(dir, {"model.safetensors' is cut short", "is not all there"});
}

TEST(HuggingFace, ExtraBytesAreRefused) {
  std::string dir = Copy();
  WriteFile(dir + "/model.safetensors", ReadFile(dir + "/model.safetensors") + "junk");
  Refused(dir, {"longer than its header says"});
}

TEST(HuggingFace, AHeaderThatIsNotJsonIsRefused) {
  std::string dir = Copy();
  std::string bytes = ReadFile(dir + "/model.safetensors");
  bytes[8] = '[';
  bytes[9] = '{';
  WriteFile(dir + "/model.safetensors", bytes);
  Refused(dir, {"model.safetensors': the header is not JSON"});
  WriteFile(dir + "/model.safetensors", std::string("\xff\xff\xff\xff\0\0\0\0", 8) + "{}");
  Refused(dir, {"not a safetensors file"});
}

TEST(HuggingFace, ADtypeTrellisDoesNotReadIsRefusedByName) {
  std::string dir = Copy();
  Edit(dir, [](St& s) {
    json_object_set_new(json_object_get(s.header, "model.norm.weight"), "dtype",
                        json_string("I32"));
  });
  Refused(dir, {"tensor 'model.norm.weight' is I32; trellis reads F32, BF16 and F16"});
}

TEST(HuggingFace, AShapeThatDoesNotMatchIsRefusedNamingBoth) {
  std::string dir = Copy();
  const char* k = "model.layers.1.self_attn.k_proj.weight";  // [16, 32]
  Edit(dir, [&](St& s) {
    json_object_set_new(json_object_get(s.header, k), "shape", json_pack("[ii]", 32, 16));
  });
  Refused(dir, {std::string("tensor '") + k + "' is [32, 16]; the model needs [16, 32]"});
}

TEST(HuggingFace, AMissingTensorIsRefusedByName) {
  std::string dir = Copy();
  Edit(dir, [](St& s) {
    json_t* t = json_deep_copy(json_object_get(s.header, "model.norm.weight"));
    json_object_del(s.header, "model.norm.weight");
    json_object_set_new(s.header, "model.final_norm.weight", t);
  });
  Refused(dir, {"tensor 'model.norm.weight' is missing"});
}

TEST(HuggingFace, ALeftOverTensorIsRefusedByName) {
  std::string dir = Copy();
  Edit(dir, [](St& s) {
    const int64_t end = (int64_t)s.data.size();
    json_object_set_new(s.header, "model.layers.0.self_attn.rotary_emb.inv_freq",
                        json_pack("{s:s, s:[i], s:[I,I]}", "dtype", "F32", "shape", 4,
                                  "data_offsets", (json_int_t)end, (json_int_t)end + 16));
    s.data += std::string(16, '\0');
  });
  Refused(dir, {"tensor 'model.layers.0.self_attn.rotary_emb.inv_freq' is left over"});
}

TEST(HuggingFace, HolesAndOverlapsAreRefused) {
  std::string dir = Copy();
  Edit(dir, [](St& s) {  // one tensor's bytes moved past the end: a hole where it was
    json_t* t = json_object_get(s.header, "model.norm.weight");
    json_t* off = json_object_get(t, "data_offsets");
    const int64_t b = json_integer_value(json_array_get(off, 0));
    const int64_t e = json_integer_value(json_array_get(off, 1));
    const int64_t end = (int64_t)s.data.size();
    json_object_set_new(t, "data_offsets",
                        json_pack("[I,I]", (json_int_t)end, (json_int_t)(end + e - b)));
    s.data += s.data.substr(b, e - b);
  });
  Refused(dir, {"a hole of"});
  dir = Copy();
  Edit(dir, [](St& s) {  // two tensors on the same bytes
    json_t* a = json_object_get(s.header, "model.layers.0.input_layernorm.weight");
    json_t* b = json_object_get(s.header, "model.layers.1.input_layernorm.weight");
    json_object_set(b, "data_offsets", json_object_get(a, "data_offsets"));
  });
  Refused(dir, {"overlaps the tensor before it"});
}

TEST(HuggingFace, ADirectoryWithoutWeightsIsRefused) {
  std::string dir = Copy();
  unlink((dir + "/model.safetensors").c_str());
  Refused(dir, {"holds neither model.safetensors nor model.safetensors.index.json"});
}

// The good directory split in two files with an index; `spoil` may break
// the index before it is written.
std::string Sharded(const std::function<void(json_t*)>& spoil = nullptr) {
  std::string dir = TmpDir() + "/hf" + std::to_string(g_dirs++);
  mkdir(dir.c_str(), 0755);
  WriteFile(dir + "/config.json", ReadFile(std::string(kGood) + "/config.json"));
  St whole = Split(ReadFile(std::string(kGood) + "/model.safetensors"));
  St part[2] = {{json_object(), ""}, {json_object(), ""}};
  json_t* map = json_object();
  const char* key;
  json_t* v;
  int i = 0;
  json_object_foreach(whole.header, key, v) {
    if (std::string(key) == "__metadata__") continue;
    St& p = part[i++ % 2];
    json_t* off = json_object_get(v, "data_offsets");
    const int64_t b = json_integer_value(json_array_get(off, 0));
    const int64_t e = json_integer_value(json_array_get(off, 1));
    json_t* t = json_deep_copy(v);
    json_object_set_new(
        t, "data_offsets",
        json_pack("[I,I]", (json_int_t)p.data.size(), (json_int_t)(p.data.size() + e - b)));
    json_object_set_new(p.header, key, t);
    p.data += whole.data.substr(b, e - b);
    json_object_set_new(map, key,
                        json_string(&p == &part[0] ? "model-00001-of-00002.safetensors"
                                                   : "model-00002-of-00002.safetensors"));
  }
  json_decref(whole.header);
  WriteFile(dir + "/model-00001-of-00002.safetensors", Join(part[0]));
  WriteFile(dir + "/model-00002-of-00002.safetensors", Join(part[1]));
  json_decref(part[0].header);
  json_decref(part[1].header);
  json_t* index = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 0, "weight_map", map);
  if (spoil) spoil(index);
  json_dump_file(index, (dir + "/model.safetensors.index.json").c_str(), 0);
  json_decref(index);
  return dir;
}

TEST(HuggingFace, AShardedDirectoryLoadsAsTheSingleFile) {
  tl_model m = Model();
  std::string dir = Sharded();
  std::vector<float> one(m.n_params), two(m.n_params);
  ASSERT_EQ(tl_hf_model_read(kGood, &m, one.data()), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_hf_model_read(dir.c_str(), &m, two.data()), TL_OK) << tl_last_error();
  EXPECT_EQ(memcmp(one.data(), two.data(), sizeof(float) * one.size()), 0);
}

TEST(HuggingFace, AShardedDirectoryIsCheckedAgainstItsIndex) {
  // a file the index names is not there
  Refused(Sharded([](json_t* index) {
            json_object_set_new(json_object_get(index, "weight_map"), "model.norm.weight",
                                json_string("model-00003-of-00002.safetensors"));
          }),
          {"model-00003-of-00002.safetensors"});
  // the index maps a tensor to a file that does not hold it
  Refused(Sharded([](json_t* index) {
            json_t* map = json_object_get(index, "weight_map");
            const char* f = json_string_value(json_object_get(map, "model.norm.weight"));
            json_object_set_new(map, "model.norm.weight",
                                json_string(std::string(f).find("00001") != std::string::npos
                                                ? "model-00002-of-00002.safetensors"
                                                : "model-00001-of-00002.safetensors"));
          }),
          {"maps tensor 'model.norm.weight'", "which does not hold it"});
  // a tensor in a file that the index does not list
  Refused(Sharded([](json_t* index) {
            json_object_del(json_object_get(index, "weight_map"), "model.norm.weight");
          }),
          {"tensor 'model.norm.weight' is missing"});
  // an index that is not JSON
  std::string dir = Sharded();
  WriteFile(dir + "/model.safetensors.index.json", "{\"weight_map\": ");
  Refused(dir, {"model.safetensors.index.json' is not JSON"});
}

// Every tensor in BF16 (or F16): what loads is transformers' bits widened.
TEST(HuggingFace, SixteenBitTensorsLoadWidened) {
  tl_model m = Model();
  std::vector<float> f32(m.n_params);
  ASSERT_EQ(tl_hf_model_read(kGood, &m, f32.data()), TL_OK) << tl_last_error();
  for (const char* dtype : {"BF16", "F16"}) {
    const bool bf16 = std::string(dtype) == "BF16";
    std::string dir = Copy();
    Edit(dir, [&](St& s) {
      std::string half;
      const char* key;
      json_t* v;
      json_object_foreach(s.header, key, v) {
        if (std::string(key) == "__metadata__") continue;
        json_t* off = json_object_get(v, "data_offsets");
        const int64_t b = json_integer_value(json_array_get(off, 0));
        const int64_t e = json_integer_value(json_array_get(off, 1));
        const int64_t at = (int64_t)half.size();
        for (int64_t i = b; i < e; i += 4) {
          float x;
          memcpy(&x, s.data.data() + i, 4);
          uint16_t h = bf16 ? tl_f32_to_bf16(x) : tl_f32_to_f16(x);
          half.append(reinterpret_cast<const char*>(&h), 2);
        }
        json_object_set_new(v, "dtype", json_string(dtype));
        json_object_set_new(v, "data_offsets",
                            json_pack("[I,I]", (json_int_t)at, (json_int_t)half.size()));
      }
      s.data = half;
    });
    std::vector<float> got(m.n_params);
    ASSERT_EQ(tl_hf_model_read(dir.c_str(), &m, got.data()), TL_OK) << tl_last_error();
    int64_t differ = 0;
    for (int64_t i = 0; i < m.n_params; i++) {
      const float want =
          bf16 ? tl_bf16_to_f32(tl_f32_to_bf16(f32[i])) : tl_f16_to_f32(tl_f32_to_f16(f32[i]));
      differ += memcmp(&want, &got[i], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << dtype;
  }
}

// config.json: the architecture, agreement with the trellis config, and
// what trellis does not compute.
std::string ConfigProblem(const std::string& trellis_model,
                          const std::function<void(json_t*)>& edit) {
  std::string dir = Copy();
  json_error_t err;
  json_t* c = json_load_file((dir + "/config.json").c_str(), 0, &err);
  edit(c);
  json_dump_file(c, (dir + "/config.json").c_str(), 0);
  json_decref(c);
  std::string path = dir + ".json";
  std::ofstream(path) << R"({"model": {"init_from": ")" << dir << "\"" << trellis_model
                      << R"(}, "train": {"seq_len": 16}})";
  tl_config cfg;
  EXPECT_NE(tl_hf_config_load(path.c_str(), &cfg), TL_OK);
  return tl_last_error();
}

TEST(HuggingFace, ConfigJsonFieldsTheConfigAlsoSetsMustAgree) {
  auto none = [](json_t*) {};
  std::string msg = ConfigProblem(R"(, "n_layers": 3)", none);
  EXPECT_NE(msg.find("model.n_layers = 3 but '"), std::string::npos) << msg;
  EXPECT_NE(msg.find("config.json' has \"num_hidden_layers\" = 2"), std::string::npos) << msg;
  msg = ConfigProblem(R"(, "kind": "gpt")", none);
  EXPECT_NE(msg.find("model.kind = \"gpt\" but"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"model_type\" = \"llama\""), std::string::npos) << msg;
  msg = ConfigProblem(R"(, "rope_theta": 500000)", none);
  EXPECT_NE(msg.find("model.rope_theta = 500000 but"), std::string::npos) << msg;
  // the same values are fine
  std::string dir = Copy();
  std::string path = dir + ".json";
  std::ofstream(path) << R"({"model": {"init_from": ")" << dir
                      << R"(", "kind": "llama", "n_layers": 2, "n_kv_heads": 2},
                            "train": {"seq_len": 16}})";
  tl_config cfg;
  EXPECT_EQ(tl_hf_config_load(path.c_str(), &cfg), TL_OK) << tl_last_error();
}

TEST(HuggingFace, WhatTrellisDoesNotComputeIsRefusedByName) {
  struct Case {
    std::function<void(json_t*)> edit;
    std::string want;
  } cases[] = {
      {[](json_t* c) { json_object_set_new(c, "model_type", json_string("mistral")); },
       "\"model_type\" = \"mistral\"; trellis reads \"llama\" and \"gpt2\" models"},
      {[](json_t* c) { json_object_set_new(c, "hidden_act", json_string("gelu")); },
       "\"hidden_act\" = gelu; trellis computes \"silu\" here"},
      {[](json_t* c) { json_object_set_new(c, "attention_bias", json_true()); },
       "\"attention_bias\" = true"},
      {[](json_t* c) { json_object_set_new(c, "head_dim", json_integer(16)); },
       "\"head_dim\" = 16"},
      {[](json_t* c) {
         json_object_set_new(c, "rope_parameters",
                             json_pack("{s:s, s:f, s:f}", "rope_type", "yarn", "rope_theta",
                                       10000.0, "factor", 4.0));
       },
       "rope type \"yarn\""},
      {[](json_t* c) { json_object_del(c, "num_hidden_layers"); },
       "no \"num_hidden_layers\" (model.n_layers)"},
  };
  for (const Case& k : cases) {
    std::string msg = ConfigProblem("", k.edit);
    EXPECT_NE(msg.find(k.want), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.init_from"), std::string::npos) << msg;
  }
  std::string dir = Copy();
  unlink((dir + "/config.json").c_str());
  std::string path = dir + ".json";
  std::ofstream(path) << R"({"model": {"init_from": ")" << dir << R"("}})";
  // no config.json: the config stands as written; the directory is then
  // refused with the other input files
  tl_config cfg;
  ASSERT_EQ(tl_hf_config_load(path.c_str(), &cfg), TL_OK) << tl_last_error();
  tl_model m;
  ASSERT_EQ(tl_model_init(&cfg.model, &m), TL_OK);
  EXPECT_EQ(tl_hf_model_check(dir.c_str(), &m), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("is a directory without config.json"),
            std::string::npos)
      << tl_last_error();
}

// Through the CLI: refused before any rank starts, exit 1 (check) or 2
// (train), the message naming the file and the tensor, nothing written.
TEST(HuggingFace, TheCommandsRefuseABadDirectoryBeforeAnyRankStarts) {
  std::string dir = Copy();
  Edit(dir, [](St& s) {
    json_object_set_new(json_object_get(s.header, "lm_head.weight"), "dtype", json_string("F64"));
  });
  std::string corpus = TmpDir() + "/corpus.txt", bin = TmpDir() + "/corpus.bin";
  std::ofstream(corpus) << std::string(4000, 'a');
  ASSERT_EQ(RunProcess({kTrellis, "data", corpus, bin}).status, 0);
  std::string cfg = dir + "_run.json", out = TmpDir() + "/never";
  std::ofstream(cfg) << R"({"model": {"init_from": ")" << dir << R"("},
      "mesh": {"dp": 2}, "train": {"seq_len": 16, "steps": 1, "batch_size": 2},
      "data": {"train": ")"
                     << bin << R"("}, "checkpoint": {"dir": ")" << out << R"("}})";
  RunResult check = RunProcess({kTrellis, "check", cfg});
  EXPECT_EQ(check.status, 1) << check.output;
  RunResult train = RunProcess({kTrellis, "train", cfg}, {}, 60, true);
  EXPECT_NE(train.status, 0) << train.output;
  for (const RunResult* r : {&check, &train}) {
    EXPECT_NE(r->output.find("model.init_from"), std::string::npos) << r->output;
    EXPECT_NE(r->output.find("tensor 'lm_head.weight' is F64; trellis reads F32, BF16 and F16"),
              std::string::npos)
        << r->output;
  }
  EXPECT_EQ(train.output.find("starting 2 ranks"), std::string::npos) << train.output;
  struct stat sb;
  EXPECT_NE(stat(out.c_str(), &sb), 0) << "a checkpoint directory was made";
}

}  // namespace
