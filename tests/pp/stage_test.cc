// Stage partition and stage executors: a GPT and an MLP cut into stages and
// run stage by stage in one process (passing the boundary activations and
// their gradients by copy) give the whole graph's loss and gradients.
#include "pp/stage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dp/layout.h"
#include "graph/exec.h"

namespace {

tl_model_config Gpt(int layers) {
  tl_model_config c = {};
  c.kind = TL_MODEL_GPT;
  c.n_layers = layers, c.n_heads = 2, c.n_embd = 16, c.vocab_size = 40, c.max_seq_len = 8;
  c.seed = 5;
  return c;
}

TEST(Partition, BalancesFlopsAndKeepsEveryLayer) {
  tl_model m;
  tl_model_config c = Gpt(5);
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g, &io), TL_OK);
  tl_pp_stage st[2];
  ASSERT_EQ(tl_pp_partition(g, &io, 2, nullptr, st), TL_OK) << tl_last_error();
  EXPECT_EQ(st[0].layer_begin, 0);
  EXPECT_EQ(st[0].layer_end, st[1].layer_begin);
  EXPECT_EQ(st[1].layer_end, 5);  // 5 layers over 2 stages: uneven, none dropped
  EXPECT_EQ(st[0].node_begin, 0);
  EXPECT_EQ(st[1].node_end, g->n_forward);
  EXPECT_EQ(st[0].n_send, 1);  // the residual stream
  EXPECT_EQ(st[1].n_recv, 1);
  EXPECT_EQ(st[0].send[0], st[1].recv[0]);
  // the head (vocabulary 128 x 16) sits on the last stage with fewer layers
  double total = tl_graph_flops(g, 0, g->n_forward) * 3;
  EXPECT_NEAR(st[0].flops + st[1].flops, total, 1e-6 * total);
  // wte is on both stages, marked shared; nothing else is
  int wte = tl_graph_find(g, "wte");
  for (auto& s : st) {
    EXPECT_EQ(s.n_shared, 1);
    EXPECT_TRUE(tl_pp_stage_shares(&s, wte));
  }
  int fixed[2] = {1, 4};
  ASSERT_EQ(tl_pp_partition(g, &io, 2, fixed, st), TL_OK);
  EXPECT_EQ(st[0].layer_end, 1);
  int bad[2] = {2, 2};
  EXPECT_EQ(tl_pp_partition(g, &io, 2, bad, st), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("add up to 4; the model has 5 layers"),
            std::string::npos);
  EXPECT_EQ(tl_pp_partition(g, &io, 6, nullptr, st), TL_ERR_CONFIG);
  tl_graph_destroy(g);
}

// Runs the model whole and as `p` stages; compares losses and gradients.
void CompareStaged(const tl_model_config& c, int p, int b, int t) {
  tl_model m;
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, b, t, true, &g, &io), TL_OK);
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  size_t bytes = sizeof(float) * m.n_params;
  tl_buffer *params = nullptr, *grads = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &params), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &grads), TL_OK);
  tl_model_init_params(&m, 0, m.n_params, (float*)params->data);
  std::vector<int32_t> tok(b * t), tgt(b * t);
  for (int i = 0; i < b * t; i++) tok[i] = (i * 11 + 1) % m.vocab, tgt[i] = (i * 3 + 2) % m.vocab;
  float scale = 1.0f / (b * t);
  // whole
  tl_exec* whole = nullptr;
  ASSERT_EQ(tl_exec_create(g, be, params, grads, &whole), TL_OK);
  ASSERT_EQ(tl_exec_set_input(whole, io.tokens, tok.data(), tok.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_set_input(whole, io.targets, tgt.data(), tgt.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_forward(whole, 0, g->n_forward), TL_OK);
  ASSERT_EQ(tl_exec_backward(whole, 0, g->n_forward, scale), TL_OK);
  std::vector<float> losses_whole(b * t), losses_staged(b * t);
  ASSERT_EQ(tl_exec_get(whole, io.losses, losses_whole.data(), b * t * 4), TL_OK);
  // staged
  std::vector<tl_pp_stage> st(p);
  std::vector<tl_dp_layout> lay(p);
  ASSERT_EQ(tl_pp_partition(g, &io, p, nullptr, st.data()), TL_OK) << tl_last_error();
  std::vector<tl_buffer*> sp(p), sg(p);
  std::vector<tl_exec*> x(p);
  for (int s = 0; s < p; s++) {
    ASSERT_EQ(tl_dp_layout_build(g, st[s].node_begin, st[s].node_end, &lay[s]), TL_OK);
    ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * lay[s].n, &sp[s]), TL_OK);
    ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * lay[s].n, &sg[s]), TL_OK);
    for (int i = 0; i < lay[s].n_segments; i++) {
      const tl_dp_segment& seg = lay[s].segments[i];
      memcpy((float*)sp[s]->data + seg.offset, (float*)params->data + g->values[seg.value].offset,
             seg.n * 4);
    }
    tl_exec_options opt = {st[s].node_begin,
                           st[s].node_end,
                           lay[s].offset,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           TL_F32,
                           NULL,
                           {},
                           NULL};
    ASSERT_EQ(tl_exec_create_ex(g, be, sp[s], sg[s], &opt, &x[s]), TL_OK) << tl_last_error();
  }
  ASSERT_EQ(tl_exec_set_input(x[0], io.tokens, tok.data(), tok.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_set_input(x[p - 1], io.targets, tgt.data(), tgt.size() * 4), TL_OK);
  for (int s = 0; s < p; s++) {
    for (int k = 0; s > 0 && k < st[s].n_recv; k++) {
      int v = st[s].recv[k];
      memcpy(tl_exec_data(x[s], v), tl_exec_data(x[s - 1], v), tl_value_numel(&g->values[v]) * 4);
    }
    ASSERT_EQ(tl_exec_forward(x[s], st[s].node_begin, st[s].node_end), TL_OK);
  }
  for (int s = p - 1; s >= 0; s--) {
    for (int k = 0; s < p - 1 && k < st[s].n_send; k++) {
      int v = g->values[st[s].send[k]].grad;
      memcpy(tl_exec_data(x[s], v), tl_exec_data(x[s + 1], v), tl_value_numel(&g->values[v]) * 4);
    }
    ASSERT_EQ(tl_exec_backward(x[s], st[s].node_begin, st[s].node_end, scale), TL_OK);
  }
  ASSERT_EQ(tl_exec_get(x[p - 1], io.losses, losses_staged.data(), b * t * 4), TL_OK);
  EXPECT_EQ(losses_whole, losses_staged);
  // gradients mapped back; shared segments summed
  std::vector<float> staged(m.n_params, 0.0f);
  for (int s = 0; s < p; s++)
    for (int i = 0; i < lay[s].n_segments; i++) {
      const tl_dp_segment& seg = lay[s].segments[i];
      for (int64_t j = 0; j < seg.n; j++)
        staged[g->values[seg.value].offset + j] += ((float*)sg[s]->data)[seg.offset + j];
    }
  const float* want = (const float*)grads->data;
  double worst = 0;
  for (int64_t i = 0; i < m.n_params; i++)
    worst = std::fmax(worst, std::fabs(staged[i] - want[i]) / (std::fabs(want[i]) + 1e-6));
  EXPECT_LT(worst, 1e-5) << p << " stages";
  for (int s = 0; s < p; s++) {
    tl_exec_destroy(x[s]);
    tl_buffer_destroy(sp[s]);
    tl_buffer_destroy(sg[s]);
    tl_dp_layout_free(&lay[s]);
  }
  tl_exec_destroy(whole);
  tl_buffer_destroy(params);
  tl_buffer_destroy(grads);
  tl_backend_destroy(be);
  tl_graph_destroy(g);
}

TEST(StagedRun, GptStagesEqualTheWholeGraph) {
  for (int p : {1, 2, 3, 4}) CompareStaged(Gpt(4), p, 2, 8);
}

TEST(StagedRun, MlpStagesEqualTheWholeGraph) {
  tl_model_config c = {};
  c.kind = TL_MODEL_MLP;
  c.vocab_size = 20, c.n_mlp_layers = 4, c.seed = 2;
  c.mlp_sizes[0] = 8, c.mlp_sizes[1] = 12, c.mlp_sizes[2] = 12, c.mlp_sizes[3] = 10,
  c.mlp_sizes[4] = 20;
  for (int p : {1, 2, 4}) CompareStaged(c, p, 3, 4);
}

}  // namespace
