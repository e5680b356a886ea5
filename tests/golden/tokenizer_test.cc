// trellis's tokenizer.json reader against Hugging Face tokenizers itself,
// from tests/golden/make_tokenizer_golden.py and its committed output
// (tokenizers/): a GPT-2-style and a Llama-3-style byte-level BPE, each
// encoding varied texts (Unicode, numbers, whitespace runs, contractions,
// special tokens inline) id for id and decoding them back, and the whole
// default corpus as one text (its token count and a fingerprint of every
// id). Then what trellis refuses, each by name.
#include "launcher/data/tokenizer.h"

#include <gtest/gtest.h>
#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launcher/data/corpus.h"
#include "launcher/data/hf_tokenizer.h"

namespace {

const std::string kDir = "tests/golden/tokenizers/";

std::vector<uint32_t> Encode(const tl_hf_tokenizer* t, const std::string& text, int threads) {
  uint32_t* ids = nullptr;
  int64_t n = 0;
  EXPECT_EQ(
      tl_hf_tokenizer_encode(t, text.data(), text.size(), 1, threads, nullptr, nullptr, &ids, &n),
      TL_OK)
      << tl_last_error();
  std::vector<uint32_t> v(ids, ids + n);
  free(ids);
  return v;
}

// s with each ill-formed UTF-8 sequence as U+FFFD, as Rust's
// String::from_utf8_lossy (what tokenizers' decode returns) writes it: one
// for each maximal prefix of a well-formed sequence, else for the byte.
std::string Lossy(const std::string& s) {
  std::string out;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = b[i];
    size_t need = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      out += (char)c;
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = 1;
    for (; need && k <= need && i + k < n; k++) {
      const unsigned d = b[i + k];
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) break;
    }
    if (need && k == need + 1) {
      out.append(s, i, k);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += k;
  }
  return out;
}

std::string Decode(const tl_hf_tokenizer* t, const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) {
    size_t len = 0;
    const char* b = tl_hf_tokenizer_bytes(t, id, &len);
    EXPECT_NE(b, nullptr) << "id " << id;
    if (b) s.append(b, len);
  }
  return s;
}

class Golden : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    json_error_t err;
    cases_ = json_load_file((kDir + "cases.json").c_str(), 0, &err);
    ASSERT_NE(cases_, nullptr) << err.text;
    mine_ = json_object_get(cases_, GetParam());
    ASSERT_NE(mine_, nullptr);
    ASSERT_EQ(tl_hf_tokenizer_create((kDir + GetParam() + ".json").c_str(), &tok_), TL_OK)
        << tl_last_error();
  }
  void TearDown() override {
    tl_hf_tokenizer_destroy(tok_);
    json_decref(cases_);
  }
  json_t* cases_ = nullptr;
  json_t* mine_ = nullptr;
  tl_hf_tokenizer* tok_ = nullptr;
};

TEST_P(Golden, EncodesEveryTextIdForIdAndDecodesItBack) {
  const json_t* texts = json_object_get(mine_, "texts");
  ASSERT_GT(json_array_size(texts), 10u);
  for (size_t i = 0; i < json_array_size(texts); i++) {
    const json_t* c = json_array_get(texts, i);
    const std::string text(json_string_value(json_object_get(c, "text")),
                           json_string_length(json_object_get(c, "text")));
    std::vector<uint32_t> want;
    const json_t* ids = json_object_get(c, "ids");
    for (size_t k = 0; k < json_array_size(ids); k++)
      want.push_back((uint32_t)json_integer_value(json_array_get(ids, k)));
    for (int threads : {1, 2}) EXPECT_EQ(Encode(tok_, text, threads), want) << "text: " << text;
    const std::string decoded(json_string_value(json_object_get(c, "decoded")),
                              json_string_length(json_object_get(c, "decoded")));
    EXPECT_EQ(Lossy(Decode(tok_, want)), decoded) << "text: " << text;
  }
}

// The whole corpus (2.5 MB): every batch boundary, the pieces' cache filled
// and cleared, two threads and one.
TEST_P(Golden, EncodesTheDefaultCorpusAsTokenizersDoesOnAnyThreadCount) {
  char* text = nullptr;
  size_t len = 0, split = 0;
  ASSERT_EQ(tl_corpus_text(&text, &len, &split), TL_OK) << tl_last_error();
  const std::string s(text, len);
  free(text);
  const json_t* c = json_object_get(mine_, "corpus");
  ASSERT_EQ((int64_t)len, json_integer_value(json_object_get(c, "bytes")))
      << "the corpus is not the text the golden values were made from";
  for (int threads : {1, 2}) {
    const std::vector<uint32_t> ids = Encode(tok_, s, threads);
    uint64_t fp = 0;
    for (size_t i = 0; i < ids.size(); i++) fp += (uint64_t)(i + 1) * ids[i];
    EXPECT_EQ((int64_t)ids.size(), json_integer_value(json_object_get(c, "tokens")));
    EXPECT_EQ(std::to_string(fp), json_string_value(json_object_get(c, "fingerprint")))
        << threads << " threads";
  }
}

// data.tokenizer reads the same file to decode samples.
TEST_P(Golden, DecodesSamplesThroughDataTokenizer) {
  tl_tokenizer dec;
  ASSERT_EQ(tl_tokenizer_open((kDir + GetParam() + ".json").c_str(), &dec), TL_OK)
      << tl_last_error();
  EXPECT_EQ(dec.vocab, tl_hf_tokenizer_vocab(tok_));
  const std::vector<uint32_t> ids = Encode(tok_, "Hello, world: 42 ☃", 1);
  std::string s;
  for (uint32_t id : ids) {
    size_t len;
    const char* p = tl_tokenizer_piece(&dec, id, &len);
    ASSERT_NE(p, nullptr);
    s.append(p, len);
  }
  EXPECT_EQ(s, Decode(tok_, ids));
  EXPECT_NE(s.find("Hello, world: 42 ☃"), std::string::npos) << s;
  tl_tokenizer_close(&dec);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, Golden, ::testing::Values("gpt2", "llama3", "qwen2"));

// The GPT-2 golden file with one field changed, written to a temporary file.
std::string Variant(const char* name, void (*edit)(json_t*)) {
  json_error_t err;
  json_t* j = json_load_file((kDir + "gpt2.json").c_str(), 0, &err);
  EXPECT_NE(j, nullptr);
  edit(j);
  const std::string path =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/" + name + ".json";
  EXPECT_EQ(json_dump_file(j, path.c_str(), 0), 0);
  json_decref(j);
  return path;
}

void ExpectRefused(const std::string& path, tl_status code, const std::vector<std::string>& words) {
  tl_hf_tokenizer* t = reinterpret_cast<tl_hf_tokenizer*>(1);
  EXPECT_EQ(tl_hf_tokenizer_create(path.c_str(), &t), code) << path;
  EXPECT_EQ(t, nullptr);
  const std::string msg = tl_last_error();
  for (const std::string& w : words) EXPECT_NE(msg.find(w), std::string::npos) << msg;
}

// GPT-2's published tokenizer.json has no model.type (tokenizers takes a
// model with merges for a BPE) and its <|endoftext|> is "normalized": read
// as tokenizers reads it, the same ids.
TEST(Layouts, GptTwosPublishedFileWithoutAModelType) {
  const std::string path = Variant("published", [](json_t* j) {
    json_object_del(json_object_get(j, "model"), "type");
    json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0), "normalized",
                        json_true());
  });
  tl_hf_tokenizer *a, *b;
  ASSERT_EQ(tl_hf_tokenizer_create(path.c_str(), &a), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_hf_tokenizer_create((kDir + "gpt2.json").c_str(), &b), TL_OK) << tl_last_error();
  const std::string text = "one<|endoftext|>two <|endoftext|> three's 42";
  EXPECT_EQ(Encode(a, text, 1), Encode(b, text, 1));
  tl_hf_tokenizer_destroy(a);
  tl_hf_tokenizer_destroy(b);
}

TEST(Refused, EachUnsupportedPartByName) {
  ExpectRefused(Variant("norm",
                        [](json_t* j) {
                          json_object_set_new(j, "normalizer",
                                              json_pack("{s:s}", "type", "Lowercase"));
                        }),
                TL_ERR_UNSUPPORTED, {"norm.json", "normalizer.type", "Lowercase"});
  ExpectRefused(Variant("normseq",
                        [](json_t* j) {
                          json_object_set_new(
                              j, "normalizer",
                              json_pack("{s:s,s:[{s:s},{s:s}]}", "type", "Sequence", "normalizers",
                                        "type", "NFC", "type", "Strip"));
                        }),
                TL_ERR_UNSUPPORTED, {"normalizer.normalizers[1].type", "Strip"});
  ExpectRefused(Variant("wordpiece",
                        [](json_t* j) {
                          json_object_set_new(json_object_get(j, "model"), "type",
                                              json_string("WordPiece"));
                        }),
                TL_ERR_UNSUPPORTED, {"model.type", "WordPiece"});
  ExpectRefused(Variant("fallback",
                        [](json_t* j) {
                          json_object_set_new(json_object_get(j, "model"), "byte_fallback",
                                              json_true());
                        }),
                TL_ERR_UNSUPPORTED, {"model.byte_fallback"});
  ExpectRefused(Variant("lstrip",
                        [](json_t* j) {
                          json_object_set_new(json_array_get(json_object_get(j, "added_tokens"), 0),
                                              "lstrip", json_true());
                        }),
                TL_ERR_UNSUPPORTED, {"added_tokens[0]", "<|endoftext|>", "lstrip"});
  ExpectRefused(Variant("metaspace",
                        [](json_t* j) {
                          json_object_set_new(j, "pre_tokenizer",
                                              json_pack("{s:s}", "type", "Metaspace"));
                        }),
                TL_ERR_UNSUPPORTED, {"pre_tokenizer.type", "Metaspace"});
  ExpectRefused(Variant("merged",
                        [](json_t* j) {
                          json_object_set_new(
                              j, "pre_tokenizer",
                              json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b}]}", "type",
                                        "Sequence", "pretokenizers", "type", "Split", "pattern",
                                        "Regex", "\\s+", "behavior", "MergedWithPrevious", "invert",
                                        0, "type", "ByteLevel", "use_regex", 0));
                        }),
                TL_ERR_UNSUPPORTED,
                {"pre_tokenizer.pretokenizers[0].behavior", "MergedWithPrevious"});
  ExpectRefused(Variant("badregex",
                        [](json_t* j) {
                          json_object_set_new(
                              j, "pre_tokenizer",
                              json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},{s:s,s:b}]}", "type",
                                        "Sequence", "pretokenizers", "type", "Split", "pattern",
                                        "Regex", "(unclosed", "behavior", "Isolated", "invert", 0,
                                        "type", "ByteLevel", "use_regex", 0));
                        }),
                TL_ERR_UNSUPPORTED, {"pre_tokenizer.pretokenizers[0].pattern", "(unclosed"});
  ExpectRefused(Variant("decoder",
                        [](json_t* j) {
                          json_object_set_new(j, "decoder",
                                              json_pack("{s:s}", "type", "WordPiece"));
                        }),
                TL_ERR_UNSUPPORTED, {"decoder.type", "WordPiece"});
  ExpectRefused(Variant("truncation",
                        [](json_t* j) {
                          json_object_set_new(j, "truncation", json_pack("{s:i}", "max_length", 8));
                        }),
                TL_ERR_UNSUPPORTED, {"truncation"});
}

TEST(Refused, BrokenFilesByName) {
  ExpectRefused("/nonexistent/tokenizer.json", TL_ERR_IO, {"/nonexistent/tokenizer.json"});
  ExpectRefused(Variant("badmerge",
                        [](json_t* j) {
                          json_array_append_new(
                              json_object_get(json_object_get(j, "model"), "merges"),
                              json_string("zzzq qqqz"));
                        }),
                TL_ERR_FORMAT, {"model.merges[", "zzzq", "not in model.vocab"});
  ExpectRefused(Variant("nobyte",
                        [](json_t* j) {
                          json_object_del(json_object_get(json_object_get(j, "model"), "vocab"),
                                          "Ġ");
                        }),
                TL_ERR_UNSUPPORTED, {"byte 0x20"});
  const std::string text =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/not_json.json";
  FILE* f = fopen(text.c_str(), "w");
  fputs("{\"model\": ", f);
  fclose(f);
  ExpectRefused(text, TL_ERR_FORMAT, {"not_json.json", "not a readable tokenizer.json"});
}

TEST(Refused, TextThatIsNotUtf8WithItsOffset) {
  tl_hf_tokenizer* t;
  ASSERT_EQ(tl_hf_tokenizer_create((kDir + "gpt2.json").c_str(), &t), TL_OK) << tl_last_error();
  for (const std::string& bad : {std::string("caf\xe9 au lait"), std::string("ab\xc0\xaf"),
                                 std::string("x\xed\xa0\x80"), std::string("end\xe2\x82")}) {
    uint32_t* ids = reinterpret_cast<uint32_t*>(1);
    int64_t n = 7;
    EXPECT_EQ(tl_hf_tokenizer_encode(t, bad.data(), bad.size(), 1, 1, nullptr, nullptr, &ids, &n),
              TL_ERR_FORMAT);
    EXPECT_EQ(ids, nullptr);
    EXPECT_EQ(n, 0);
    const std::string msg = tl_last_error();
    EXPECT_NE(msg.find("not UTF-8: byte " + std::to_string(bad.find_first_of("\xe9\xc0\xed\xe2"))),
              std::string::npos)
        << msg;
  }
  tl_hf_tokenizer_destroy(t);
}

}  // namespace
