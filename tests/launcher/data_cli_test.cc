// `trellis data --tokenizer`: the token file holds tokenizers' ids in the
// format the vocabulary needs, the same for any thread count; bad input
// (tokenizer, text, flag) is refused with one message and nothing written;
// a run trained on the file decodes its sample with the same tokenizer.json.
#include <gtest/gtest.h>
#include <jansson.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";
const std::string kDir = "tests/golden/tokenizers/";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) {
  return std::ifstream(path).good();
}

// The header's magic and the tokens of an llm.c token file.
std::vector<uint32_t> ReadTokens(const std::string& path, int32_t* magic) {
  const std::string b = ReadFile(path);
  EXPECT_GE(b.size(), 1024u) << path;
  int32_t h[3] = {0, 0, 0};
  if (b.size() >= 1024) memcpy(h, b.data(), sizeof h);
  *magic = h[0];
  const int width = h[0] == 20240801 ? 4 : 2;
  EXPECT_EQ(b.size(), 1024 + (size_t)width * (size_t)h[2]) << path;
  std::vector<uint32_t> v;
  for (int32_t i = 0; i < h[2] && 1024 + (size_t)(i + 1) * width <= b.size(); i++) {
    uint32_t x = 0;
    memcpy(&x, b.data() + 1024 + (size_t)i * width, (size_t)width);
    v.push_back(x);
  }
  return v;
}

// Case `index` of tokenizer `name` in the golden file: its text and ids.
void GoldenCase(const char* name, size_t index, std::string* text, std::vector<uint32_t>* ids) {
  json_error_t err;
  json_t* j = json_load_file((kDir + "cases.json").c_str(), 0, &err);
  ASSERT_NE(j, nullptr) << err.text;
  const json_t* c = json_array_get(json_object_get(json_object_get(j, name), "texts"), index);
  text->assign(json_string_value(json_object_get(c, "text")),
               json_string_length(json_object_get(c, "text")));
  const json_t* a = json_object_get(c, "ids");
  for (size_t i = 0; i < json_array_size(a); i++)
    ids->push_back((uint32_t)json_integer_value(json_array_get(a, i)));
  json_decref(j);
}

TEST(DataCli, WritesTokenizersIdsInTheFormatTheVocabularyNeeds) {
  std::string text;
  std::vector<uint32_t> want;
  GoldenCase("llama3", 12, &text, &want);  // special tokens inline
  ASSERT_NE(text.find("<|eot_id|>"), std::string::npos);
  const std::string in = WriteTempFile(text, ".txt");
  for (const char* threads : {"1", "2"}) {
    const std::string out = in + threads + ".bin";
    RunResult r = RunProcess(
        {kTrellis, "data", in, out, "--tokenizer", kDir + "llama3.json", "--threads", threads});
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("vocabulary 1501; llm.c's GPT-2 (uint16) format"), std::string::npos)
        << r.output;
    int32_t magic;
    EXPECT_EQ(ReadTokens(out, &magic), want);
    EXPECT_EQ(magic, 20240520);
  }
  const std::string wide = in + ".wide.bin";
  RunResult r =
      RunProcess({kTrellis, "data", in, wide, "--tokenizer", kDir + "llama3.json", "--uint32"});
  ASSERT_EQ(r.status, 0) << r.output;
  int32_t magic;
  EXPECT_EQ(ReadTokens(wide, &magic), want);
  EXPECT_EQ(magic, 20240801);

  // ids past 65,535: the wide format without being asked
  json_error_t err;
  json_t* j = json_load_file((kDir + "gpt2.json").c_str(), 0, &err);
  ASSERT_NE(j, nullptr);
  json_array_append_new(
      json_object_get(j, "added_tokens"),
      json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", 70000, "content", "<|far|>", "single_word",
                0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1));
  const std::string big = WriteTempFile("", ".json");
  ASSERT_EQ(json_dump_file(j, big.c_str(), 0), 0);
  json_decref(j);
  const std::string far = WriteTempFile("one <|far|> two", ".txt");
  r = RunProcess({kTrellis, "data", far, far + ".bin", "--tokenizer", big});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("vocabulary 70001; llm.c's Llama-3 (uint32) format"), std::string::npos)
      << r.output;
  std::vector<uint32_t> got = ReadTokens(far + ".bin", &magic);
  EXPECT_EQ(magic, 20240801);
  EXPECT_NE(std::find(got.begin(), got.end(), 70000u), got.end());
}

TEST(DataCli, BadInputIsRefusedWithOneMessageAndNothingWritten) {
  const std::string good = WriteTempFile("plain text\n", ".txt");
  const std::string bad_text = WriteTempFile(std::string("caf\xe9\n"), ".txt");
  json_error_t err;
  json_t* j = json_load_file((kDir + "gpt2.json").c_str(), 0, &err);
  ASSERT_NE(j, nullptr);
  json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "Replace"));
  const std::string nfc = WriteTempFile("", ".json");
  ASSERT_EQ(json_dump_file(j, nfc.c_str(), 0), 0);
  json_decref(j);
  struct Case {
    std::vector<std::string> args;
    int status;
    std::string want;
  } cases[] = {
      {{good, "--tokenizer", "/nonexistent/tokenizer.json"},
       1,
       "cannot open tokenizer '/nonexistent/tokenizer.json'"},
      {{good, "--tokenizer", nfc},
       1,
       "normalizer.type Replace (NFC, NFD, NFKC and NFKD are) is not supported"},
      {{bad_text, "--tokenizer", kDir + "gpt2.json"},
       1,
       bad_text + ": the text is not UTF-8: byte 3 (0xe9)"},
      {{"/nonexistent/text.txt", "--tokenizer", kDir + "gpt2.json"},
       1,
       "cannot read text file '/nonexistent/text.txt'"},
      {{good, "--tokenizer", kDir + "gpt2.json", "--threads", "0"},
       2,
       "--threads 0: expected a count from 1 to 64"},
      {{good, "--tokenizer"}, 2, "unknown or incomplete argument '--tokenizer'"},
  };
  int k = 0;
  for (const Case& c : cases) {
    const std::string out = good + ".out" + std::to_string(k++) + ".bin";
    std::vector<std::string> argv = {kTrellis, "data", c.args[0], out};
    argv.insert(argv.end(), c.args.begin() + 1, c.args.end());
    RunResult r = RunProcess(argv);
    EXPECT_EQ(r.status, c.status) << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << "wanted: " << c.want << "\n" << r.output;
    EXPECT_EQ(r.output.find("trellis data:"), r.output.rfind("trellis data:")) << r.output;
    EXPECT_FALSE(Exists(out)) << out;
  }
}

// The default corpus with a tokenizer: both files, each a whole text with
// the post-processor's <|begin_of_text|> in front, every id in the
// vocabulary, about 2.6 bytes a token (byte-level would be 1).
TEST(DataCli, TheDefaultCorpusWithATokenizer) {
  const std::string dir = WriteTempFile("", ".dir") + "_corpus";
  RunResult r =
      RunProcess({kTrellis, "data", "--corpus", dir, "--tokenizer", kDir + "llama3.json"}, {}, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  int64_t total = 0;
  for (const char* f : {"/fortunes_train.bin", "/fortunes_val.bin"}) {
    int32_t magic;
    const std::vector<uint32_t> ids = ReadTokens(dir + f, &magic);
    ASSERT_GT(ids.size(), 1000u) << f;
    EXPECT_EQ(magic, 20240520) << f;
    EXPECT_EQ(ids[0], 0u) << f << ": <|begin_of_text|> first";
    for (uint32_t id : ids) ASSERT_LT(id, 1501u) << f;
    total += (int64_t)ids.size();
  }
  EXPECT_LT(total, 2546242 / 2) << "no better than bytes";
  r = RunProcess({kTrellis, "data", "--corpus", dir, "--uint32"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--corpus DIR takes no --uint32"), std::string::npos) << r.output;
}

// Trained on a file the tokenizer wrote, the run's sample is text decoded
// by the same tokenizer.json (data.tokenizer), not ids.
TEST(DataCli, ARunDecodesItsSampleWithTheTokenizerJson) {
  std::string text;
  for (int i = 0; i < 60; i++) text += "The quick brown fox jumps over the lazy dog. ";
  const std::string in = WriteTempFile(text, ".txt");
  const std::string tokens = in + ".bin";
  RunResult r = RunProcess({kTrellis, "data", in, tokens, "--tokenizer", kDir + "gpt2.json"});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string cfg = WriteTempFile(
      R"({"model": {"kind": "gpt", "n_layers": 1, "n_heads": 2, "n_embd": 16,
                    "vocab_size": 1200, "max_seq_len": 16},
          "train": {"steps": 2, "batch_size": 2, "seq_len": 16, "sample_tokens": 12},
          "data": {"train": ")" +
      tokens + R"(", "tokenizer": ")" + kDir + R"(gpt2.json"}})");
  r = RunProcess({kTrellis, "train", cfg}, {}, 120);
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t at = r.output.find("sample: \"");
  ASSERT_NE(at, std::string::npos) << "the sample prints as text:\n" << r.output;
}

}  // namespace
