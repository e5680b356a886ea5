// Training on real text: token files, the default corpus, the loss falling,
// checkpoints that resume bit for bit, and llm.c model files.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/device.h"
#include "core/env.h"
#include "launcher/data/corpus.h"
#include "launcher/data/loader.h"
#include "launcher/data/tokenizer.h"
#include "launcher/data/tokens.h"
#include "launcher/train/checkpoint.h"
#include "launcher/train/optimizer.h"
#include "launcher/train/sample.h"
#include "launcher/train/trainer.h"

namespace {

// One CPU thread for every trainer here: CI runs this binary beside 8-rank
// jobs on two cores, where an OpenMP team spinning for a core it shares
// took minutes (results do not depend on the thread count).
class OneThread : public testing::Environment {
 public:
  void SetUp() override { tl_env_set_num_threads(1); }
};
testing::Environment* const g_one_thread = testing::AddGlobalTestEnvironment(new OneThread);

std::string TempPath(const char* name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// The default corpus, built once for the whole test binary.
const std::string& Corpus(bool val) {
  static std::string train = TempPath("corpus_train.bin"), valp = TempPath("corpus_val.bin");
  static bool built = false;
  if (!built) {
    int64_t nt = 0, nv = 0;
    EXPECT_EQ(tl_corpus_build(train.c_str(), valp.c_str(), &nt, &nv), TL_OK) << tl_last_error();
    EXPECT_GT(nt, 1000000);  // the fortunes text is a few megabytes
    EXPECT_GT(nv, 100000);
    built = true;
  }
  return val ? valp : train;
}

// A small GPT on the byte-level corpus; every field set here.
tl_config SmallConfig() {
  tl_config c;
  memset(&c, 0, sizeof c);
  c.model.kind = TL_MODEL_GPT;
  c.model.n_layers = 2, c.model.n_heads = 4, c.model.n_embd = 64;
  c.model.vocab_size = 256, c.model.max_seq_len = 64, c.model.seed = 1337;
  c.mesh.dp = c.mesh.tp = c.mesh.pp = c.mesh.cp = 1;
  c.schedule.kind = TL_SCHEDULE_1F1B, c.schedule.micro_batches = 1;
  c.train.steps = 300, c.train.batch_size = 8, c.train.seq_len = 64;
  c.train.lr = 3e-3f, c.train.min_lr = 3e-4f, c.train.warmup_steps = 20;
  c.train.lr_schedule = TL_LR_COSINE;
  c.train.beta1 = 0.9f, c.train.beta2 = 0.95f, c.train.eps = 1e-8f;
  c.train.weight_decay = 0.1f, c.train.grad_clip = 1.0f, c.train.val_batches = 4;
  c.device.type = TL_DEVICE_CPU;
  snprintf(c.data.train, sizeof c.data.train, "%s", Corpus(false).c_str());
  snprintf(c.data.val, sizeof c.data.val, "%s", Corpus(true).c_str());
  return c;
}

TEST(Tokens, RoundTripAndBadFilesAreNamed) {
  std::string p = TempPath("t.bin");
  std::vector<uint16_t> tok = {1, 2, 300, 4};
  ASSERT_EQ(tl_tokens_write(p.c_str(), tok.data(), 4), TL_OK);
  tl_token_file f;
  ASSERT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_OK);
  EXPECT_EQ(f.n_tokens, 4);
  EXPECT_EQ(tl_tokens_at(&f, 2), 300);
  EXPECT_EQ(f.width, 2);
  EXPECT_EQ(f.max_token, 300);
  tl_tokens_close(&f);
  EXPECT_EQ(tl_tokens_open(p.c_str(), 256, &f), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("token 300 at position 2"), std::string::npos);
  ASSERT_EQ(truncate(p.c_str(), 1024 + 5), 0);  // cut short mid-token
  EXPECT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("cut short"), std::string::npos) << tl_last_error();
  FILE* junk = fopen(p.c_str(), "wb");
  fputs("not tokens at all, but long enough?", junk);
  fclose(junk);
  EXPECT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_ERR_FORMAT);
  EXPECT_EQ(tl_tokens_open(TempPath("missing.bin").c_str(), 0, &f), TL_ERR_IO);
  EXPECT_NE(std::string(tl_last_error()).find("missing.bin"), std::string::npos);
}

TEST(Tokens, RandomFilesAreReproducibleAndInRange) {
  std::string a = TempPath("r1.bin"), b = TempPath("r2.bin");
  ASSERT_EQ(tl_tokens_write_random(a.c_str(), 5000, 50, 9), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_tokens_write_random(b.c_str(), 5000, 50, 9), TL_OK);
  tl_token_file f, g;
  ASSERT_EQ(tl_tokens_open(a.c_str(), 50, &f), TL_OK) << tl_last_error();  // every token < 50
  ASSERT_EQ(tl_tokens_open(b.c_str(), 50, &g), TL_OK);
  EXPECT_EQ(f.n_tokens, 5000);
  EXPECT_EQ(memcmp(f.tokens, g.tokens, 5000 * sizeof(uint16_t)), 0);
  EXPECT_EQ(f.max_token, 49);  // 5000 draws reach the top of the range
  tl_tokens_close(&g);
  ASSERT_EQ(tl_tokens_write_random(b.c_str(), 5000, 50, 10), TL_OK);
  ASSERT_EQ(tl_tokens_open(b.c_str(), 50, &g), TL_OK);
  EXPECT_NE(memcmp(f.tokens, g.tokens, 5000 * sizeof(uint16_t)), 0) << "another seed";
  tl_tokens_close(&f);
  tl_tokens_close(&g);
  EXPECT_EQ(tl_tokens_write_random(a.c_str(), 10, 0, 1), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("vocabulary 0"), std::string::npos);
}

// llm.c's Llama-3 format (magic 20240801, version 7, uint32 tokens): read
// and written for vocabularies past 16 bits, and a GPT of a 100,000-token
// vocabulary trains from it.
TEST(Tokens, TheLlama3FormatHoldsVocabulariesBeyondSixteenBits) {
  std::string p = TempPath("wide.bin");
  ASSERT_EQ(tl_tokens_write_random(p.c_str(), 20000, 100000, 3), TL_OK) << tl_last_error();
  tl_token_file f;
  ASSERT_EQ(tl_tokens_open(p.c_str(), 100000, &f), TL_OK) << tl_last_error();
  EXPECT_EQ(f.width, 4);
  EXPECT_GT(f.max_token, 65535);
  EXPECT_LT(f.max_token, 100000);
  const int32_t* h = static_cast<const int32_t*>(f.map);
  EXPECT_EQ(h[0], 20240801);
  EXPECT_EQ(h[1], 7);
  tl_tokens_close(&f);
  // a model of that vocabulary trains a step from it
  tl_config c = SmallConfig();
  c.model.n_layers = 1, c.model.n_embd = 8, c.model.n_heads = 2, c.model.vocab_size = 100000;
  c.train.steps = 1, c.train.sample_tokens = 0;
  snprintf(c.data.train, sizeof c.data.train, "%s", p.c_str());
  c.data.val[0] = '\0';
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
  tl_step_stats s;
  ASSERT_EQ(tl_trainer_step(t, &s), TL_OK) << tl_last_error();
  EXPECT_NEAR(s.loss, std::log(100000.0), 0.5) << "a fresh model's loss is about ln V";
  tl_trainer_destroy(t);
  // narrow tokens go as uint16 unless asked; the wide form holds them alike
  std::vector<uint32_t> tok = {1, 70000, 3};
  ASSERT_EQ(tl_tokens_write32(p.c_str(), tok.data(), 3, 0), TL_OK);
  ASSERT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_OK);
  EXPECT_EQ(f.width, 4);  // 70000 needs the wide form
  EXPECT_EQ(tl_tokens_at(&f, 1), 70000);
  tl_tokens_close(&f);
  tok[1] = 2;
  for (int wide : {0, 1}) {
    ASSERT_EQ(tl_tokens_write32(p.c_str(), tok.data(), 3, wide), TL_OK);
    ASSERT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_OK);
    EXPECT_EQ(f.width, wide ? 4 : 2);
    EXPECT_EQ(tl_tokens_at(&f, 2), 3);
    tl_tokens_close(&f);
  }
  // a token past the vocabulary, and the Llama-3 magic with another version
  EXPECT_EQ(tl_tokens_open(p.c_str(), 3, &f), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("token 3 at position 2"), std::string::npos);
  {
    std::FILE* g = std::fopen(p.c_str(), "r+b");
    int32_t v = 1;
    std::fseek(g, 4, SEEK_SET);
    std::fwrite(&v, 4, 1, g);
    std::fclose(g);
  }
  EXPECT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("version 1, expected 7 for magic 20240801"),
            std::string::npos)
      << tl_last_error();
}

// llm.c's tokenizer file: pieces back as written, the end-of-text token,
// and damaged files named.
TEST(Tokenizer, ReadsLlmcsFileAndNamesDamage) {
  std::string p = TempPath("tok.bin");
  const char* pieces[3] = {"he", "llo", " w\xc3\xb6rld"};
  const uint8_t lengths[3] = {2, 3, 7};
  ASSERT_EQ(tl_tokenizer_write(p.c_str(), 3, pieces, lengths, 2), TL_OK);
  tl_tokenizer t;
  ASSERT_EQ(tl_tokenizer_open(p.c_str(), &t), TL_OK) << tl_last_error();
  EXPECT_EQ(t.vocab, 3);
  EXPECT_EQ(t.eot, 2);
  size_t len = 0;
  const char* s = tl_tokenizer_piece(&t, 2, &len);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(std::string(s, len), " w\xc3\xb6rld");
  EXPECT_EQ(tl_tokenizer_piece(&t, 3, &len), nullptr);
  tl_tokenizer_close(&t);
  ASSERT_EQ(truncate(p.c_str(), 1024 + 1 + 2 + 1 + 2), 0);  // inside token 1
  EXPECT_EQ(tl_tokenizer_open(p.c_str(), &t), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("ends inside token 1"), std::string::npos)
      << tl_last_error();
  ASSERT_EQ(tl_tokens_write_random(p.c_str(), 600, 50, 1), TL_OK);  // a token file instead
  EXPECT_EQ(tl_tokenizer_open(p.c_str(), &t), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("not an llm.c tokenizer file"), std::string::npos);
}

TEST(Loader, BatchesAreContiguousSequencesAndWrap) {
  std::vector<uint16_t> tok(50);
  for (int i = 0; i < 50; i++) tok[i] = i;
  std::string p = TempPath("l.bin");
  ASSERT_EQ(tl_tokens_write(p.c_str(), tok.data(), 50), TL_OK);
  tl_token_file f;
  ASSERT_EQ(tl_tokens_open(p.c_str(), 0, &f), TL_OK);
  tl_loader l;
  ASSERT_EQ(tl_loader_init(&l, &f, 3, 5, 0), TL_OK);
  int32_t in[10], tg[10];
  tl_loader_get(&l, 1, 2, in, tg);  // sequences 1 and 2 of the global batch
  EXPECT_EQ(in[0], 5);
  EXPECT_EQ(tg[0], 6);
  EXPECT_EQ(in[5], 10);
  EXPECT_EQ(tg[9], 15);
  tl_loader_advance(&l);  // 15
  tl_loader_advance(&l);  // 30
  EXPECT_EQ(l.position, 30);
  tl_loader_advance(&l);  // 45 + 16 > 50: wraps
  EXPECT_EQ(l.position, 0);
  EXPECT_EQ(tl_loader_init(&l, &f, 10, 5, 0), TL_ERR_CONFIG);
  tl_tokens_close(&f);
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  tl_train_config c = {};
  c.steps = 110, c.warmup_steps = 10, c.lr = 1.0f, c.min_lr = 0.1f, c.lr_schedule = TL_LR_COSINE;
  EXPECT_FLOAT_EQ(tl_lr_at(&c, 0), 0.1f);
  EXPECT_FLOAT_EQ(tl_lr_at(&c, 9), 1.0f);
  EXPECT_FLOAT_EQ(tl_lr_at(&c, 10), 1.0f);
  EXPECT_NEAR(tl_lr_at(&c, 60), 0.55f, 1e-6);
  EXPECT_NEAR(tl_lr_at(&c, 110), 0.1f, 1e-6);
  c.lr_schedule = TL_LR_CONSTANT;
  EXPECT_FLOAT_EQ(tl_lr_at(&c, 60), 1.0f);
}

TEST(Train, LossOfASmallGptFallsOnTheDefaultCorpus) {
  // A 2-layer, 64-channel byte-level GPT: the loss starts near ln(256) = 5.55;
  // averaged over steps 281-300 (8 x 64 tokens each) it must be below 3.0, and
  // the validation loss below 3.0 too (measured: 2.89 and 2.79).
  tl_config c = SmallConfig();
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
  tl_step_stats s;
  ASSERT_EQ(tl_trainer_step(t, &s), TL_OK) << tl_last_error();
  EXPECT_NEAR(s.loss, std::log(256.0), 0.1);
  double val0 = 0, val1 = 0;
  ASSERT_EQ(tl_trainer_eval(t, &val0), TL_OK);
  double last20 = 0;
  for (int i = 1; i < c.train.steps; i++) {
    ASSERT_EQ(tl_trainer_step(t, &s), TL_OK) << tl_last_error();
    if (i >= c.train.steps - 20) last20 += s.loss / 20;
  }
  ASSERT_EQ(tl_trainer_eval(t, &val1), TL_OK);
  printf("loss: first step %.4f, last 20 steps %.4f; validation %.4f -> %.4f\n", std::log(256.0),
         last20, val0, val1);
  EXPECT_LT(last20, 3.0) << "training loss over the last 20 of 300 steps";
  EXPECT_LT(val1, 3.0) << "validation loss after 300 steps (was " << val0 << ")";
  // it writes something English-like: mostly letters and spaces
  int32_t prompt = 'T', out[64];
  std::vector<float> params(tl_trainer_model(t)->n_params);
  ASSERT_EQ(tl_trainer_gather(t, params.data(), 0), TL_OK);
  ASSERT_EQ(
      tl_sample(tl_trainer_model(t), c.train.seq_len, params.data(), &prompt, 1, 64, 1, 0, out),
      TL_OK);
  int letters = 0;
  for (int32_t o : out) letters += isalpha(o) || o == ' ';
  EXPECT_GT(letters, 40);
  tl_trainer_destroy(t);
}

// The Llama learns the default corpus as the GPT does, and writes text: a
// 2-layer, 64-channel Llama (4 query heads over 2 key/value heads, SwiGLU
// 176 wide, an untied head), the GPT's schedule and bounds (measured: 2.76
// over the last 20 of 300 steps, validation 2.66). Sampled among the 4
// likeliest tokens: greedily this one falls into a run of '-' after a few
// tokens, as transformers' own greedy decoding of its export does.
TEST(Train, LossOfASmallLlamaFallsAndItWritesText) {
  tl_config c = SmallConfig();
  c.model.kind = TL_MODEL_LLAMA;
  c.model.n_kv_heads = 2, c.model.ffn_hidden = 176, c.model.rope_theta = 10000.0f;
  c.model.norm_eps = 1e-5f;
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
  tl_step_stats s;
  double last20 = 0, val = 0;
  for (int i = 0; i < c.train.steps; i++) {
    ASSERT_EQ(tl_trainer_step(t, &s), TL_OK) << tl_last_error();
    if (i == 0) {
      EXPECT_NEAR(s.loss, std::log(256.0), 0.1) << "the first step";
    }
    if (i >= c.train.steps - 20) last20 += s.loss / 20;
  }
  ASSERT_EQ(tl_trainer_eval(t, &val), TL_OK);
  printf("llama loss: last 20 steps %.4f; validation %.4f\n", last20, val);
  EXPECT_LT(last20, 3.0) << "training loss over the last 20 of 300 steps";
  EXPECT_LT(val, 3.0) << "validation loss after 300 steps";
  int32_t prompt = 'T', out[64];
  std::vector<float> params(tl_trainer_model(t)->n_params);
  ASSERT_EQ(tl_trainer_gather(t, params.data(), 0), TL_OK);
  ASSERT_EQ(
      tl_sample(tl_trainer_model(t), c.train.seq_len, params.data(), &prompt, 1, 64, 4, 1, out),
      TL_OK);
  int letters = 0;
  for (int32_t o : out) letters += isalpha(o) || o == ' ';
  std::string text;
  for (int32_t o : out) text += (char)o;
  printf("llama sample: \"%s\"\n", text.c_str());
  EXPECT_GT(letters, 40) << text;
  tl_trainer_destroy(t);
}

// ZeRO-3 on one rank under bf16 training keeps its units in bf16 slots,
// rounded from the shard without a gather: the values a bf16 graph reads
// anyway, so the losses are ZeRO-0's bit for bit (no clipping: the norm's
// sum is cut differently by the two).
TEST(Train, ZeroThreeOnOneRankInBf16IsZeroZerosRun) {
  std::vector<double> losses[2];
  for (int k = 0; k < 2; k++) {
    tl_config c = SmallConfig();
    c.train.steps = 3, c.train.grad_clip = 0, c.train.precision = TL_PRECISION_BF16;
    c.parallel.zero = k ? 3 : 0, c.parallel.bucket_mb = 25;
    tl_trainer* t = nullptr;
    ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
    for (int s = 0; s < c.train.steps; s++) {
      tl_step_stats st;
      ASSERT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
      losses[k].push_back(st.loss);
    }
    tl_trainer_destroy(t);
  }
  for (int s = 0; s < 3; s++) EXPECT_EQ(losses[1][s], losses[0][s]) << "step " << s + 1;
}

// Attention keeps one number per query row, not the T x T probabilities
// (flash attention): for the same tokens per batch, a long sequence costs
// about what short ones do, in fp32 and in bf16. The 4-layer, 128-channel
// GPT at B = 2, T = 1024 against B = 8, T = 256: peaks of 96.4 MB each in
// fp32 (230.4 MB against 129.8 MB, 1.78x, when the probabilities were
// kept).
TEST(Train, ActivationMemoryIsLinearInTheSequence) {
  for (tl_precision precision : {TL_PRECISION_FP32, TL_PRECISION_BF16}) {
    int64_t peak[2];
    const int shapes[2][2] = {{2, 1024}, {8, 256}};
    for (int i = 0; i < 2; i++) {
      tl_config c = SmallConfig();
      c.model.n_layers = 4, c.model.n_embd = 128, c.model.max_seq_len = 1024;
      c.train.batch_size = shapes[i][0], c.train.seq_len = shapes[i][1];
      c.train.precision = precision;
      tl_alloc_reset_peak(tl_cpu());
      const int64_t before = tl_alloc_stats_get(tl_cpu()).live_bytes;
      tl_trainer* t = nullptr;
      // the executors' arenas are planned and allocated here; a step adds
      // nothing to the peak (measured: the same bytes after one), and one of
      // T = 1024 would cost minutes under ASan
      ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
      peak[i] = tl_alloc_stats_get(tl_cpu()).peak_bytes - before;
      tl_trainer_destroy(t);
    }
    const char* name = precision == TL_PRECISION_BF16 ? "bf16" : "fp32";
    std::printf("%s peak bytes: B=2 T=1024 %lld, B=8 T=256 %lld, ratio %.3f\n", name,
                (long long)peak[0], (long long)peak[1], (double)peak[0] / (double)peak[1]);
    EXPECT_LE((double)peak[0], 1.15 * (double)peak[1]) << name;
  }
}

// train.precision "bf16" (activations and their gradients stored in bf16,
// fp32 master weights, gradients, moments and arithmetic) trains the small
// GPT as fp32 does: over 300 steps from the same start and data, the mean
// loss of the last 20 steps and the validation loss each within 0.5% of
// fp32's. At lr 1e-3: at this config's 3e-3 the 300-step trajectory is
// chaotic (fp32 runs from seeds 1337, 1338 and 1339 end 3.03, 3.49 and
// 3.32), and bf16 lands anywhere within 5% of fp32 on either side; at 1e-3
// the three seeds' bf16 runs end within 0.15% of their fp32 runs. The two
// runs are not the same run: the first step's loss already differs. Every
// other bf16 test compares bf16 with bf16; this one is what catches a bf16
// fault the mesh and its single-device reference share.
TEST(Train, Bf16MixedPrecisionTrainsAsFp32Does) {
  double last20[2] = {0, 0}, val[2] = {0, 0}, first[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    tl_config c = SmallConfig();
    c.train.lr = 1e-3f, c.train.min_lr = 1e-4f;
    c.train.precision = i ? TL_PRECISION_BF16 : TL_PRECISION_FP32;
    tl_trainer* t = nullptr;
    ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
    tl_step_stats s;
    for (int k = 0; k < c.train.steps; k++) {
      ASSERT_EQ(tl_trainer_step(t, &s), TL_OK) << tl_last_error();
      if (k == 0) first[i] = s.loss;
      if (k >= c.train.steps - 20) last20[i] += s.loss / 20;
    }
    ASSERT_EQ(tl_trainer_eval(t, &val[i]), TL_OK) << tl_last_error();
    tl_trainer_destroy(t);
  }
  std::printf("fp32: first %.6f, last 20 %.4f, validation %.4f\n", first[0], last20[0], val[0]);
  std::printf("bf16: first %.6f, last 20 %.4f, validation %.4f\n", first[1], last20[1], val[1]);
  EXPECT_NE(first[0], first[1]) << "bf16 storage changes the arithmetic";
  EXPECT_NEAR(first[1], first[0], 1e-2 * first[0]);
  EXPECT_NEAR(last20[1], last20[0], 0.005 * last20[0]);
  EXPECT_NEAR(val[1], val[0], 0.005 * val[0]);
}

// bf16 storage is real: what the executors allocate for the 4-layer,
// 128-channel GPT at B = 8, T = 256 — the trainer's peak less its 16 bytes
// a parameter of weights, gradients and moments — falls to at most 0.70 of
// fp32's: the stored activations halve, and what stays fp32 is the logits
// and their gradient, the saved statistics, the per-position losses and
// the fp32 copies of the largest node's values.
TEST(Train, Bf16HalvesTheActivationBytes) {
  int64_t act[2];
  for (int i = 0; i < 2; i++) {
    tl_config c = SmallConfig();
    c.model.n_layers = 4, c.model.n_embd = 128, c.model.max_seq_len = 256;
    c.train.batch_size = 8, c.train.seq_len = 256;
    c.train.precision = i ? TL_PRECISION_BF16 : TL_PRECISION_FP32;
    tl_alloc_reset_peak(tl_cpu());
    const int64_t before = tl_alloc_stats_get(tl_cpu()).live_bytes;
    tl_trainer* t = nullptr;
    ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
    act[i] = tl_alloc_stats_get(tl_cpu()).peak_bytes - before - 16 * tl_trainer_model(t)->n_params;
    tl_trainer_destroy(t);
  }
  std::printf("activation bytes: fp32 %lld, bf16 %lld, ratio %.3f\n", (long long)act[0],
              (long long)act[1], (double)act[1] / (double)act[0]);
  EXPECT_LE((double)act[1], 0.70 * (double)act[0]);
  EXPECT_GE((double)act[1], 0.5 * (double)act[0]) << "bf16 is half of fp32, no less";
}

// A run stopped after K steps and resumed from its checkpoint is the run
// of N steps bit for bit, in fp32 and in bf16 (the checkpoint holds the
// fp32 master weights and moments; bf16 activations are made again).
TEST(Train, ResumeContinuesBitForBit) {
  for (tl_precision precision : {TL_PRECISION_FP32, TL_PRECISION_BF16}) {
    tl_config c = SmallConfig();
    c.model.n_layers = 1, c.model.n_embd = 32, c.train.steps = 6, c.schedule.micro_batches = 2;
    c.train.precision = precision;
    const char* name = precision == TL_PRECISION_BF16 ? "bf16" : "fp32";
    const int n = 6, k = 3;
    // N steps straight
    tl_trainer* a = nullptr;
    ASSERT_EQ(tl_trainer_create(&c, nullptr, &a), TL_OK) << tl_last_error();
    std::vector<double> losses_a;
    tl_step_stats s;
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(tl_trainer_step(a, &s), TL_OK);
      losses_a.push_back(s.loss);
    }
    // K steps, checkpoint, a new trainer resumes, N - K more
    tl_trainer* b = nullptr;
    ASSERT_EQ(tl_trainer_create(&c, nullptr, &b), TL_OK);
    for (int i = 0; i < k; i++) ASSERT_EQ(tl_trainer_step(b, &s), TL_OK);
    std::string ck = TempPath((std::string("resume_") + name + ".ckpt").c_str());
    ASSERT_EQ(tl_trainer_save(b, ck.c_str()), TL_OK) << tl_last_error();
    tl_trainer_destroy(b);
    snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", ck.c_str());
    ASSERT_EQ(tl_trainer_create(&c, nullptr, &b), TL_OK) << tl_last_error();
    EXPECT_EQ(tl_trainer_steps_done(b), k);
    for (int i = k; i < n; i++) {
      ASSERT_EQ(tl_trainer_step(b, &s), TL_OK);
      EXPECT_EQ(s.loss, losses_a[i]) << name << ": step " << i + 1;
    }
    int64_t np = tl_trainer_model(a)->n_params;
    std::vector<float> pa(np), pb(np);
    ASSERT_EQ(tl_trainer_gather(a, pa.data(), 0), TL_OK);
    ASSERT_EQ(tl_trainer_gather(b, pb.data(), 0), TL_OK);
    EXPECT_EQ(memcmp(pa.data(), pb.data(), np * 4), 0)
        << name << ": parameters differ after resuming";
    tl_trainer_destroy(a);
    tl_trainer_destroy(b);
  }
}

// A weight gone NaN makes every gradient NaN: the step must stop, naming
// the norm, not read the NaN sum of squares as 0 and step on.
TEST(Train, ANonFiniteGradientStopsTheStep) {
  tl_config c = SmallConfig();
  c.model.n_layers = 1, c.model.n_embd = 32, c.train.steps = 2;
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
  int64_t n = tl_trainer_model(t)->n_params;
  std::vector<float> state(3 * n);
  ASSERT_EQ(tl_trainer_gather(t, state.data(), 1), TL_OK);
  state[n / 2] = NAN;
  ASSERT_EQ(tl_trainer_set_state(t, state.data()), TL_OK);
  tl_step_stats s;
  EXPECT_EQ(tl_trainer_step(t, &s), TL_ERR_INTERNAL);
  EXPECT_NE(std::string(tl_last_error())
                .find("not finite; the first parameter whose gradient is not finite: "),
            std::string::npos)
      << tl_last_error();
  tl_trainer_destroy(t);
}

TEST(Checkpoint, MismatchesAndDamageAreNamed) {
  tl_config c = SmallConfig();
  c.model.n_layers = 1, c.model.n_embd = 32;
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK);
  std::string ck = TempPath("m.ckpt"), llmc = TempPath("m.llmc.bin");
  ASSERT_EQ(tl_trainer_save(t, ck.c_str()), TL_OK);
  ASSERT_EQ(tl_trainer_export(t, llmc.c_str()), TL_OK);
  tl_trainer_destroy(t);
  // a config with another shape
  tl_config other = c;
  other.model.n_layers = 2;
  snprintf(other.checkpoint.resume, sizeof other.checkpoint.resume, "%s", ck.c_str());
  EXPECT_EQ(tl_trainer_create(&other, nullptr, &t), TL_ERR_FORMAT);
  EXPECT_NE(
      std::string(tl_last_error()).find("has n_layers=1 but the config says model.n_layers=2"),
      std::string::npos)
      << tl_last_error();
  other.checkpoint.resume[0] = 0;
  snprintf(other.model.init_from, sizeof other.model.init_from, "%s", llmc.c_str());
  EXPECT_EQ(tl_trainer_create(&other, nullptr, &t), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("n_layers=1 but the config says model.n_layers=2"),
            std::string::npos);
  // the llm.c file loads into the matching model and equals the weights
  snprintf(c.model.init_from, sizeof c.model.init_from, "%s", llmc.c_str());
  ASSERT_EQ(tl_trainer_create(&c, nullptr, &t), TL_OK) << tl_last_error();
  tl_trainer_destroy(t);
  // cut short
  ASSERT_EQ(truncate(ck.c_str(), 4000), 0);
  c.model.init_from[0] = 0;
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", ck.c_str());
  EXPECT_EQ(tl_trainer_create(&c, nullptr, &t), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("cut short"), std::string::npos);
  // an llm.c file passed as a checkpoint
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", llmc.c_str());
  EXPECT_EQ(tl_trainer_create(&c, nullptr, &t), TL_ERR_FORMAT);
  EXPECT_NE(std::string(tl_last_error()).find("use model.init_from"), std::string::npos);
  // no temporary files left behind by the writes
  std::string cmd = "ls " + TempPath("") + " | grep -c '.tmp.' > " + TempPath("count.txt");
  ASSERT_EQ(system(cmd.c_str()) >= 0, true);
}

}  // namespace
