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

TEST(Shard, RanksTileTheWholeModelAndDrawTheirSlice) {
  const tl_model_config cfg = Gpt();
  tl_model full;
  ASSERT_EQ(tl_model_init(&cfg, &full), TL_OK);
  std::vector<float> whole(full.n_params);
  tl_model_init_params(&full, 0, full.n_params, whole.data());
  for (int tp : {2, 4}) {
    for (bool sp : {false, true}) {
      std::vector<int> covered(full.n_params, 0);
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
        }
      }
      // every element is held: split and rank-0 tensors once, LayerNorms by all
      for (int k = 0; k < full.n_tensors; k++) {
        const tl_param_tensor& t = full.tensors[k];
        bool ln = t.name[0] == 'l' && t.name[1] == 'n';
        for (int64_t i = t.offset; i < t.offset + t.numel; i++)
          ASSERT_EQ(covered[i], ln ? tp : 1) << t.name << " element " << i - t.offset;
      }
    }
  }
}

TEST(Shard, QkvRowsOfRankOneAreItsHeadsOfQKAndV) {
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

TEST(Shard, RefusesWhatDoesNotSplit) {
  tl_model m;
  tl_model_config c = Gpt();
  EXPECT_EQ(tl_tp_model_init(&c, 8, 0, false, &m), TL_ERR_CONFIG);  // 4 heads
  EXPECT_NE(std::string(tl_last_error()).find("model.n_heads=4"), std::string::npos);
  c.n_heads = 8, c.padded_vocab_size = 100;  // 8 does not divide a vocabulary of 100
  EXPECT_EQ(tl_tp_model_init(&c, 8, 0, false, &m), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("padded vocabulary 100"), std::string::npos);
  tl_config mlp;
  tl_config_defaults(&mlp);
  mlp.model.kind = TL_MODEL_MLP;
  mlp.model.vocab_size = 8, mlp.model.n_mlp_layers = 1, mlp.model.mlp_sizes[0] = 4;
  mlp.model.mlp_sizes[1] = 8;
  EXPECT_EQ(tl_tp_model_init(&mlp.model, 2, 0, false, &m), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("mlp model needs mesh.tp=1"), std::string::npos);
}

}  // namespace
