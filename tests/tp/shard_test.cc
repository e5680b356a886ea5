// The tensor-parallel pass's layouts: what it decides for each parameter of
// the GPT and the MLP graphs (Megatron-LM's split, found by rules on op
// patterns), that a rank's parameters are a slice of the single-device
// model's (the RNG draws each element at its place in the whole, and the
// shards of all ranks tile the whole vector), and that a degree the model
// cannot split runs that part whole instead of failing.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "graph/model.h"
#include "tp/tp.h"

namespace {

tl_model_config Gpt(int heads = 4) {
  tl_config c;
  tl_config_defaults(&c);
  c.model.kind = TL_MODEL_GPT;
  c.model.vocab_size = 100, c.model.n_layers = 2, c.model.n_heads = heads, c.model.n_embd = 16;
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

// The full forward graph of a model and its layout on rank r of tp.
struct Layout {
  tl_model m;
  tl_graph* full = nullptr;
  tl_tp_shard sh = {};
  Layout(const tl_model_config& cfg, int tp, int r, bool sp) {
    EXPECT_EQ(tl_model_init(&cfg, &m), TL_OK);
    tl_model_io io;
    EXPECT_EQ(tl_model_build_forward(&m, 2, 8, true, &full, &io), TL_OK) << tl_last_error();
    EXPECT_EQ(tl_tp_shard_layout(full, tp, r, sp, &sh), TL_OK) << tl_last_error();
  }
  ~Layout() {
    tl_tp_shard_free(&sh);
    tl_graph_destroy(full);
  }
  // kind, dim and parts of the parameter value named `name`
  std::string Of(const std::string& name) const {
    int v = tl_graph_find(full, name.c_str());
    for (int k = 0; k < sh.n_params; k++) {
      const tl_tp_param& p = sh.params[k];
      if (p.full_value != v) continue;
      if (p.kind == TL_TP_WHOLE) return "whole";
      if (p.kind == TL_TP_FIRST) return "first";
      return "split " + std::to_string(p.dim) + (p.parts > 1 ? "/" + std::to_string(p.parts) : "");
    }
    return "absent";
  }
};

TEST(Shard, TheGptSplitsAsMegatronDoes) {
  Layout l(Gpt(), 2, 1, false);
  EXPECT_EQ(l.Of("wte"), "split 0");  // vocabulary rows (embedding and tied head)
  EXPECT_EQ(l.Of("wpe"), "first");    // added once, before the embedding's sum
  for (const char* layer : {".0", ".1"}) {
    std::string s = layer;
    EXPECT_EQ(l.Of("qkvw" + s), "split 0/3");  // column-parallel, Q, K and V alike
    EXPECT_EQ(l.Of("qkvb" + s), "split 0/3");
    EXPECT_EQ(l.Of("attprojw" + s), "split 1");  // row-parallel
    EXPECT_EQ(l.Of("attprojb" + s), "first");
    EXPECT_EQ(l.Of("fcw" + s), "split 0");
    EXPECT_EQ(l.Of("fcb" + s), "split 0");
    EXPECT_EQ(l.Of("fcprojw" + s), "split 1");
    EXPECT_EQ(l.Of("fcprojb" + s), "first");
    EXPECT_EQ(l.Of("ln1w" + s), "whole");
    EXPECT_EQ(l.Of("ln2b" + s), "whole");
  }
  EXPECT_EQ(l.Of("lnfw"), "whole");
  EXPECT_TRUE(l.sh.loss_split);
  EXPECT_EQ(l.sh.n_linear, 9);  // 4 per block and the head, all of them split
  EXPECT_EQ(l.sh.n_linear_split, 9);
  // rank 1 holds neither wpe nor the row-parallel biases
  for (int k = 0; k < l.sh.n_params; k++)
    if (l.sh.params[k].kind == TL_TP_FIRST) {
      EXPECT_EQ(l.sh.params[k].numel, 0);
    }
}

TEST(Shard, TheMlpPairsColumnThenRowParallel) {
  for (int layers : {2, 3}) {
    Layout l(Mlp(layers), 2, 0, false);
    EXPECT_EQ(l.Of("wte"), "split 0");
    EXPECT_EQ(l.Of("w0"), "split 0");
    EXPECT_EQ(l.Of("b0"), "split 0");
    EXPECT_EQ(l.Of("w1"), "split 1");
    EXPECT_EQ(l.Of("b1"), "first");
    if (layers == 3) {
      EXPECT_EQ(l.Of("w2"), "split 0");  // an odd last layer: by outputs
    }
    EXPECT_EQ(l.sh.loss_split, layers == 3) << layers;
    EXPECT_EQ(l.sh.n_linear_split, layers);
  }
}

// 4 heads do not split 8 ways: the attention block runs whole on every
// rank (its projections too: their output meets the whole residual), the
// MLP blocks still split.
TEST(Shard, ADegreeTheAttentionCannotTakeRunsItWhole) {
  Layout l(Gpt(4), 8, 3, false);
  EXPECT_EQ(l.Of("qkvw.0"), "whole");
  EXPECT_EQ(l.Of("attprojw.0"), "whole");
  EXPECT_EQ(l.Of("fcw.0"), "split 0");
  EXPECT_EQ(l.Of("fcprojw.1"), "split 1");
  EXPECT_LT(l.sh.n_linear_split, l.sh.n_linear);
}

class Tiling : public ::testing::TestWithParam<int> {};

TEST_P(Tiling, RanksTileTheWholeModelAndDrawTheirSlice) {
  // 0: gpt; n: an mlp of n layers (odd: the last layer is split too)
  const tl_model_config cfg = GetParam() == 0 ? Gpt() : Mlp(GetParam());
  tl_model full;
  ASSERT_EQ(tl_model_init(&cfg, &full), TL_OK);
  std::vector<float> whole(full.n_params);
  tl_model_init_params(&full, 0, full.n_params, whole.data());
  for (int tp : {2, 4}) {
    for (bool sp : {false, true}) {
      std::vector<int> covered(full.n_params, 0);
      std::map<int, tl_tp_kind> kind;  // by parameter value
      for (int r = 0; r < tp; r++) {
        Layout l(cfg, tp, r, sp);
        const tl_tp_shard& sh = l.sh;
        std::vector<float> drawn(sh.n_local), sliced(sh.n_local);
        tl_tp_init_params(&sh, &full, 0, sh.n_local, drawn.data());
        tl_tp_from_full(&sh, whole.data(), sliced.data());
        ASSERT_EQ(drawn, sliced) << "tp=" << tp << " rank " << r;
        // a range that starts and ends inside parameters draws the same
        if (sh.n_local > 10) {
          std::vector<float> part(sh.n_local - 10);
          tl_tp_init_params(&sh, &full, 5, sh.n_local - 5, part.data());
          ASSERT_TRUE(std::equal(part.begin(), part.end(), drawn.begin() + 5));
        }
        // mark where this rank's elements land
        std::vector<float> marks(sh.n_local, 1.0f), out(full.n_params, 0.0f);
        tl_tp_to_full(&sh, marks.data(), out.data());
        for (int64_t i = 0; i < full.n_params; i++) covered[i] += out[i] != 0.0f;
        for (int k = 0; k < sh.n_params; k++) {
          const tl_tp_param& p = sh.params[k];
          int64_t want = p.kind == TL_TP_SPLIT   ? p.full_numel / tp
                         : p.kind == TL_TP_WHOLE ? p.full_numel
                         : r == 0                ? p.full_numel
                                                 : 0;
          EXPECT_EQ(p.numel, want) << full.tensors[tl_model_tensor_at(&full, p.full_offset)].name;
          kind[p.full_value] = p.kind;
        }
        EXPECT_EQ(sh.n_full, full.n_params);
      }
      // split and rank-0 parameters once, whole ones on every rank
      Layout l(cfg, tp, 0, sp);
      for (int k = 0; k < l.sh.n_params; k++) {
        const tl_tp_param& p = l.sh.params[k];
        int want = p.kind == TL_TP_WHOLE ? tp : 1;
        for (int64_t i = p.full_offset; i < p.full_offset + p.full_numel; i++)
          ASSERT_EQ(covered[i], want) << "element " << i << " tp=" << tp;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Tiling, ::testing::Values(0, 2, 3));

// Where a rank's elements lie: Q, K and V rows of this rank's heads; a
// row-parallel weight's columns.
TEST(Shard, ElementsLieWhereTheirHeadsAndColumnsAre) {
  Layout l(Gpt(), 2, 1, false);
  const int64_t C = 16;
  for (int k = 0; k < l.sh.n_params; k++) {
    const tl_tp_param& p = l.sh.params[k];
    std::string name = l.full->values[p.full_value].name;
    int64_t run = 0;
    if (name == "qkvw.0") {
      // local rows [0, C/2) are Q rows [C/2, C); [C/2, C) are K rows [3C/2, 2C)
      EXPECT_EQ(tl_tp_full_index(&l.sh, &p, 0, &run), p.full_offset + (C / 2) * C);
      EXPECT_EQ(run, (C / 2) * C);
      EXPECT_EQ(tl_tp_full_index(&l.sh, &p, (C / 2) * C, &run), p.full_offset + (C + C / 2) * C);
      EXPECT_EQ(tl_tp_full_index(&l.sh, &p, C * C + 3, &run),
                p.full_offset + (2 * C + C / 2) * C + 3);
    } else if (name == "attprojw.0") {
      // (C, C/2): row i holds columns [C/2, C) of the whole's row i
      EXPECT_EQ(tl_tp_full_index(&l.sh, &p, 0, &run), p.full_offset + C / 2);
      EXPECT_EQ(run, C / 2);
      EXPECT_EQ(tl_tp_full_index(&l.sh, &p, 3 * (C / 2) + 1, &run),
                p.full_offset + 3 * C + C / 2 + 1);
    }
  }
}

}  // namespace
