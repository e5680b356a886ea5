// A tensor-parallel rank's parameters are a slice of the single-device
// model's: its layout names where each element lies in the whole tensor, the
// RNG draws it there, and the shards of all ranks tile the whole vector.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graph/model.h"
#include "tp/tp.h"

namespace {

tl_model_config Gpt() {
  tl_config c;
  tl_config_defaults(&c);
  c.model.kind = TL_MODEL_GPT;
  c.model.vocab_size = 100, c.model.n_layers = 2, c.model.n_heads = 4, c.model.n_embd = 16;
  c.model.max_seq_len = 8;
  return c.model;
}

tl_model_config Mlp(int layers) {
  tl_config c;
  tl_config_defaults(&c);
  c.model.kind = TL_MODEL_MLP;
  c.model.vocab_size = 64, c.model.n_mlp_layers = layers;
  for (int i = 0; i < layers; i++) c.model.mlp_sizes[i] = 8 + 8 * i;
  c.model.mlp_sizes[layers] = 64;
  return c.model;
}

class Shard : public ::testing::TestWithParam<int> {};

TEST_P(Shard, RanksTileTheWholeModelAndDrawTheirSlice) {
  // 0: gpt; n: an mlp of n layers (odd: the last layer is split too)
  const tl_model_config cfg = GetParam() == 0 ? Gpt() : Mlp(GetParam());
  tl_model full;
  ASSERT_EQ(tl_model_init(&cfg, &full), TL_OK);
  std::vector<float> whole(full.n_params);
  tl_model_init_params(&full, 0, full.n_params, whole.data());
  for (int tp : {2, 4}) {
    for (bool sp : {false, true}) {
      std::vector<int> covered(full.n_params, 0);
      std::vector<tl_shard_kind> kind(full.n_tensors);
      for (int r = 0; r < tp; r++) {
        tl_model m;
        ASSERT_EQ(tl_tp_model_init(&cfg, tp, r, sp, &m), TL_OK);
        std::vector<float> drawn(m.n_params), sliced(m.n_params);
        tl_model_init_params(&m, 0, m.n_params, drawn.data());
        tl_tp_from_full(&m, whole.data(), sliced.data());
        ASSERT_EQ(drawn, sliced) << "tp=" << tp << " rank " << r;
        // mark where this rank's elements land
        std::vector<float> marks(m.n_params, 1.0f), out(full.n_params, 0.0f);
        tl_tp_to_full(&m, marks.data(), out.data());
        for (int64_t i = 0; i < full.n_params; i++) covered[i] += out[i] != 0.0f;
        // split tensors are a tp-th of the whole; rank 0 alone holds wpe
        for (int k = 0; k < m.n_tensors; k++) {
          const tl_param_tensor& t = m.tensors[k];
          int64_t want = t.shard == TL_SHARD_SPLIT        ? t.full_numel / tp
                         : t.shard == TL_SHARD_REPLICATED ? t.full_numel
                         : r == 0                         ? t.full_numel
                                                          : 0;
          EXPECT_EQ(t.numel, want) << t.name;
          kind[k] = t.shard;
        }
      }
      // every element is held: split and rank-0 tensors once, whole ones by all
      int split = 0;
      for (int k = 0; k < full.n_tensors; k++) {
        const tl_param_tensor& t = full.tensors[k];
        split += kind[k] == TL_SHARD_SPLIT;
        for (int64_t i = t.offset; i < t.offset + t.numel; i++)
          ASSERT_EQ(covered[i], kind[k] == TL_SHARD_REPLICATED ? tp : 1)
              << t.name << " element " << i - t.offset;
      }
      EXPECT_GE(split, 2);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Shard, ::testing::Values(0, 2, 3));

TEST(ShardLayout, QkvRowsOfRankOneAreItsHeadsOfQKAndV) {
  // C = 16, 4 heads of 4, tp = 2: rank 1 holds heads 2-3, rows 8-15 of each of Q, K, V
  const tl_model_config cfg = Gpt();
  tl_model m;
  ASSERT_EQ(tl_tp_model_init(&cfg, 2, 1, false, &m), TL_OK);
  int k = tl_model_tensor(&m, "qkvw");
  int64_t run = 0;
  EXPECT_EQ(tl_model_shard_index(&m, k, 0, &run), 8 * 16);  // Q row 8
  EXPECT_EQ(run, 8 * 16);
  EXPECT_EQ(tl_model_shard_index(&m, k, 8 * 16, &run), (16 + 8) * 16);      // K row 8
  EXPECT_EQ(tl_model_shard_index(&m, k, 24 * 16, &run), 48 * 16 + 8 * 16);  // layer 1, Q row 8
  k = tl_model_tensor(&m, "attprojw");  // row-parallel: input columns 8-15
  EXPECT_EQ(tl_model_shard_index(&m, k, 0, &run), 8);
  EXPECT_EQ(run, 8);
  EXPECT_EQ(tl_model_shard_index(&m, k, 8, &run), 16 + 8);
}

TEST(ShardLayout, MlpLayersPairColumnThenRowParallel) {
  const tl_model_config cfg = Mlp(3);  // 8 -> 16 -> 24 -> 64
  tl_model m;
  ASSERT_EQ(tl_tp_model_init(&cfg, 2, 1, false, &m), TL_OK);
  const tl_param_tensor& w0 = m.tensors[tl_model_tensor(&m, "w0")];
  const tl_param_tensor& w1 = m.tensors[tl_model_tensor(&m, "w1")];
  const tl_param_tensor& w2 = m.tensors[tl_model_tensor(&m, "w2")];
  EXPECT_EQ(w0.shape[0], 8);   // 16 outputs, split
  EXPECT_EQ(w1.shape[1], 8);   // 16 inputs, split
  EXPECT_EQ(w1.shape[0], 24);  // its outputs whole
  EXPECT_EQ(w2.shape[0], 32);  // the odd last layer: 64 outputs, split
  EXPECT_EQ(m.tensors[tl_model_tensor(&m, "b1")].numel, 0);  // rank 0 adds it
  EXPECT_TRUE(tl_model_logits_split(&m));
}

TEST(ShardLayout, RefusesWhatDoesNotSplit) {
  tl_model m;
  tl_model_config c = Gpt();
  EXPECT_EQ(tl_tp_model_init(&c, 8, 0, false, &m), TL_ERR_CONFIG);  // 4 heads
  EXPECT_NE(std::string(tl_last_error()).find("model.n_heads=4"), std::string::npos);
  c.n_heads = 8, c.padded_vocab_size = 100;  // 8 does not divide a vocabulary of 100
  EXPECT_EQ(tl_tp_model_init(&c, 8, 0, false, &m), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("padded vocabulary 100"), std::string::npos);
  tl_model_config mlp = Mlp(2);  // 8 -> 16 -> 64
  EXPECT_EQ(tl_tp_model_init(&mlp, 32, 0, false, &m), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("model.mlp_sizes[1]=16"), std::string::npos);
}

}  // namespace
