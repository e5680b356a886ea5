// The graph IR, shape inference, the memory plan and range execution.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "graph/exec.h"
#include "graph/model.h"
#include "graph/op.h"

namespace {

tl_model_config SmallGpt() {
  tl_model_config c = {};
  c.kind = TL_MODEL_GPT;
  c.n_layers = 2, c.n_heads = 2, c.n_embd = 16, c.vocab_size = 50, c.max_seq_len = 8, c.seed = 3;
  return c;
}

TEST(Graph, ShapeInferenceRejectsMismatchesAndLeavesTheGraphUnchanged) {
  tl_graph* g = nullptr;
  ASSERT_EQ(tl_graph_create(&g), TL_OK);
  int a, b, out;
  int64_t sa[2] = {4, 3}, sb[2] = {5, 2};
  ASSERT_EQ(tl_graph_param(g, "a", 0, 2, sa, &a), TL_OK);
  ASSERT_EQ(tl_graph_param(g, "b", 12, 2, sb, &b), TL_OK);
  EXPECT_EQ(g->n_params, 22);
  int in[2] = {a, b}, attr[6] = {0, 0};
  int n_values = g->n_values;
  EXPECT_EQ(tl_graph_node(g, TL_OP_MATMUL, "mm", 2, in, attr, 6, &out), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("inner dimensions differ: [4,3] times [5,2]"),
            std::string::npos)
      << tl_last_error();
  EXPECT_EQ(g->n_nodes, 0);
  EXPECT_EQ(g->n_values, n_values);
  EXPECT_EQ(tl_graph_node(g, TL_OP_ADD, "add", 2, in, attr, 6, &out), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("shapes [4,3] and [5,2] differ"), std::string::npos);
  int64_t sc[2] = {2, 3};
  int c;
  ASSERT_EQ(tl_graph_param(g, "c", 22, 2, sc, &c), TL_OK);
  int in2[2] = {a, c};
  attr[1] = 1;  // a (4,3) times c^T (3,2)
  ASSERT_EQ(tl_graph_node(g, TL_OP_MATMUL, "mm", 2, in2, attr, 6, &out), TL_OK);
  EXPECT_EQ(g->values[out].shape[0], 4);
  EXPECT_EQ(g->values[out].shape[1], 2);
  EXPECT_DOUBLE_EQ(g->nodes[0].flops, 2.0 * 4 * 2 * 3);
  tl_graph_destroy(g);
}

TEST(Graph, GptHasTheExpectedNodesAndFlops) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  EXPECT_EQ(m.padded_vocab, 128);
  // llm.c's parameter count: Vp*C + T*C + L*(12 C^2 + 13 C) + 2C
  int64_t C = 16, L = 2;
  EXPECT_EQ(m.n_params, 128 * C + 8 * C + L * (12 * C * C + 13 * C) + 2 * C);
  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g, &io), TL_OK) << tl_last_error();
  EXPECT_EQ(g->n_forward, 1 + 10 * 2 + 3);  // encoder, 10 per layer, lnf, head, loss
  EXPECT_EQ(g->n_nodes, 2 * g->n_forward);  // one backward node per forward node
  // Backward nodes come in reverse order of their forward nodes.
  for (int i = g->n_forward; i + 1 < g->n_nodes; i++)
    EXPECT_GT(g->nodes[i].forward_of, g->nodes[i + 1].forward_of);
  // Matmul FLOPs: 2 * tokens * (params in matmuls + tied head).
  double mm = 0;
  for (int i = 0; i < g->n_forward; i++)
    if (g->nodes[i].op == TL_OP_MATMUL) mm += g->nodes[i].flops;
  EXPECT_DOUBLE_EQ(mm, 2.0 * 16 * (L * 12 * C * C + 128 * C));
  // wte is used twice (embedding and head): its gradient gets two writers.
  int wte_grad = g->values[tl_graph_find(g, "wte")].grad;
  int writers = 0;
  for (int i = g->n_forward; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) writers += g->nodes[i].out[k] == wte_grad;
  EXPECT_EQ(writers, 2);
  tl_graph_destroy(g);
}

TEST(MemPlan, ValuesLiveAtTheSameTimeNeverShareBytes) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g, &io), TL_OK);
  tl_memplan p;
  ASSERT_EQ(tl_memplan_build(g, &p), TL_OK);
  size_t total = 0;
  int planned = 0;
  for (int u = 0; u < g->n_values; u++) {
    if (p.offset[u] < 0) continue;
    planned++;
    size_t su = tl_value_numel(&g->values[u]) * 4;
    total += su;
    EXPECT_LE(p.offset[u] + (int64_t)su,
              (int64_t)(p.transient[u] ? p.transient_bytes : p.arena_bytes));
    // what lives within one pass: read and written by forward nodes only,
    // or by backward nodes only
    bool one_pass = p.last[u] < g->n_forward || p.first[u] >= g->n_forward;
    EXPECT_EQ(p.transient[u], one_pass && !g->values[u].output) << g->values[u].name;
    for (int v = u + 1; v < g->n_values; v++) {
      if (p.offset[v] < 0 || p.transient[u] != p.transient[v]) continue;  // another arena
      bool live_together = p.first[u] <= p.last[v] && p.first[v] <= p.last[u];
      if (!live_together) continue;
      size_t sv = tl_value_numel(&g->values[v]) * 4;
      bool disjoint =
          p.offset[u] + (int64_t)su <= p.offset[v] || p.offset[v] + (int64_t)sv <= p.offset[u];
      EXPECT_TRUE(disjoint) << g->values[u].name << " and " << g->values[v].name;
    }
  }
  EXPECT_GT(planned, 50);
  EXPECT_GE(p.arena_bytes + p.transient_bytes, p.peak_live_bytes);
  EXPECT_LT(p.arena_bytes + p.transient_bytes, total);  // memory is reused
  EXPECT_GT(p.transient_bytes, 0u);
  tl_memplan_free(&p);
  tl_graph_destroy(g);
}

TEST(Exec, RunningRangesEqualsRunningTheWhole) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, 1, 8, true, &g, &io), TL_OK);
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  tl_buffer *p = nullptr, *g1 = nullptr, *g2 = nullptr;
  size_t bytes = sizeof(float) * m.n_params;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &p), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &g1), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &g2), TL_OK);
  tl_model_init_params(&m, 0, m.n_params, (float*)p->data);
  tl_exec *x1 = nullptr, *x2 = nullptr;
  ASSERT_EQ(tl_exec_create(g, be, p, g1, &x1), TL_OK);
  ASSERT_EQ(tl_exec_create(g, be, p, g2, &x2), TL_OK);
  std::vector<int32_t> tok = {1, 5, 9, 2, 7, 7, 3, 0}, tgt = {5, 9, 2, 7, 7, 3, 0, 4};
  for (tl_exec* x : {x1, x2}) {
    ASSERT_EQ(tl_exec_set_input(x, io.tokens, tok.data(), 32), TL_OK);
    ASSERT_EQ(tl_exec_set_input(x, io.targets, tgt.data(), 32), TL_OK);
  }
  int n = g->n_forward, mid = n / 2;
  ASSERT_EQ(tl_exec_forward(x1, 0, n), TL_OK);
  ASSERT_EQ(tl_exec_backward(x1, 0, n, 0.125f), TL_OK);
  // as two pipeline stages would: forward 0..mid, mid..n; backward mid..n, 0..mid
  ASSERT_EQ(tl_exec_forward(x2, 0, mid), TL_OK);
  ASSERT_EQ(tl_exec_forward(x2, mid, n), TL_OK);
  ASSERT_EQ(tl_exec_backward(x2, mid, n, 0.125f), TL_OK);
  ASSERT_EQ(tl_exec_backward(x2, 0, mid, 0.125f), TL_OK);
  EXPECT_EQ(memcmp(g1->data, g2->data, bytes), 0);
  EXPECT_EQ(tl_exec_forward(x2, 0, n + 1), TL_ERR_INVALID);
  int32_t short_input[3] = {0};
  EXPECT_EQ(tl_exec_set_input(x2, io.tokens, short_input, sizeof short_input), TL_ERR_INVALID);
  EXPECT_NE(std::string(tl_last_error()).find("takes 32 bytes; got 12"), std::string::npos);
  tl_exec_destroy(x1);
  tl_exec_destroy(x2);
  tl_buffer_destroy(p);
  tl_buffer_destroy(g1);
  tl_buffer_destroy(g2);
  tl_backend_destroy(be);
  tl_graph_destroy(g);
}

// bf16 mixed precision (tl_graph_set_precision): what a kernel sees and
// what is stored, through a probe op that records the fp32 numbers its
// kernel is handed and writes each times 1.01 (not a bf16 number). In a
// bf16 graph the probe of a parameter sees the fp32 master rounded to bf16;
// its output is stored as the bf16 rounding of what it wrote (2 bytes an
// element); the next probe sees that widened, exactly. In an fp32 graph
// it sees the parameter's own bits.
std::vector<std::vector<float>> g_probe_seen;

tl_status ProbeInfer(tl_graph* g, tl_node* n) {
  const tl_value* in = &g->values[n->in[0]];
  return tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, in->n_dims, in->shape);
}

tl_status ProbeRun(const tl_run_ctx* x, const tl_node* n) {
  const int64_t count = tl_value_numel(&x->g->values[n->in[0]]);
  const float* in = TL_DATA(x, n->in[0]);
  float* out = TL_DATA(x, n->out[0]);
  g_probe_seen.emplace_back(in, in + count);
  for (int64_t i = 0; i < count; i++) out[i] = in[i] * 1.01f;
  return TL_OK;
}

tl_status ProbeBackward(tl_graph*, int) {
  return TL_OK;
}

const tl_op_def kProbe = {"probe", 1,       ProbeInfer, ProbeRun, ProbeBackward,
                          0,       nullptr, nullptr,    nullptr,  nullptr};

TEST(Exec, Bf16GraphsStoreBf16AndHandKernelsFp32Copies) {
  int probe = -1;
  ASSERT_EQ(tl_op_register(&kProbe, &probe), TL_OK);
  const int64_t count = 64;
  std::vector<float> master(count);
  for (int64_t i = 0; i < count; i++) master[i] = 1.0f + (float)i * 0x1p-12f;  // not bf16 numbers
  for (bool bf16 : {false, true}) {
    tl_graph* g = nullptr;
    ASSERT_EQ(tl_graph_create(&g), TL_OK);
    int x, y, z;
    ASSERT_EQ(tl_graph_param(g, "x", 0, 1, &count, &x), TL_OK);
    int attr[1] = {0};
    ASSERT_EQ(tl_graph_node(g, probe, "p1", 1, &x, attr, 0, &y), TL_OK);
    ASSERT_EQ(tl_graph_node(g, probe, "p2", 1, &y, attr, 0, &z), TL_OK);
    ASSERT_EQ(tl_graph_mark_output(g, z), TL_OK);
    if (bf16) {
      ASSERT_EQ(tl_graph_set_precision(g, TL_BF16), TL_OK);
    }
    EXPECT_EQ(g->values[y].dtype, bf16 ? TL_BF16 : TL_F32);
    EXPECT_EQ(g->values[x].dtype, TL_F32);  // the master weights
    tl_backend* be = nullptr;
    ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
    tl_buffer* p = nullptr;
    ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * count, &p), TL_OK);
    memcpy(p->data, master.data(), sizeof(float) * count);
    tl_exec* ex = nullptr;
    ASSERT_EQ(tl_exec_create(g, be, p, nullptr, &ex), TL_OK);
    g_probe_seen.clear();
    ASSERT_EQ(tl_exec_forward(ex, 0, g->n_forward), TL_OK) << tl_last_error();
    ASSERT_EQ(g_probe_seen.size(), 2u);
    std::vector<float> zf(count);
    ASSERT_EQ(tl_exec_get_f32(ex, z, zf.data(), count), TL_OK) << tl_last_error();
    const uint16_t* y_raw = (const uint16_t*)tl_exec_data(ex, y);
    for (int64_t i = 0; i < count; i++) {
      const float seen = g_probe_seen[0][i];
      if (!bf16) {
        EXPECT_EQ(seen, master[i]) << i;
        EXPECT_EQ(g_probe_seen[1][i], seen * 1.01f) << i;
        EXPECT_EQ(zf[i], g_probe_seen[1][i] * 1.01f) << i;
        continue;
      }
      EXPECT_EQ(seen, tl_bf16_to_f32(tl_f32_to_bf16(master[i]))) << i;
      EXPECT_EQ(y_raw[i], tl_f32_to_bf16(seen * 1.01f)) << i;
      EXPECT_EQ(g_probe_seen[1][i], tl_bf16_to_f32(y_raw[i])) << i;
      EXPECT_EQ(zf[i], tl_bf16_to_f32(tl_f32_to_bf16(g_probe_seen[1][i] * 1.01f))) << i;
    }
    // the master weights are read, never written
    EXPECT_EQ(memcmp(p->data, master.data(), sizeof(float) * count), 0);
    // parameters stored in bf16 (ZeRO-3's gathered units): a bf16 graph's
    // kernels see exactly the values the rounding gave them; an fp32 graph
    // refuses them
    std::vector<uint16_t> half(count);
    for (int64_t i = 0; i < count; i++) half[i] = tl_f32_to_bf16(master[i]);
    tl_buffer* p16 = nullptr;
    ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(uint16_t) * count, &p16), TL_OK);
    memcpy(p16->data, half.data(), sizeof(uint16_t) * count);
    tl_exec_options opt = {};
    opt.begin = 0, opt.end = g->n_forward, opt.params_dtype = TL_BF16;
    tl_exec* ex16 = nullptr;
    if (!bf16) {
      EXPECT_EQ(tl_exec_create_ex(g, be, p16, nullptr, &opt, &ex16), TL_ERR_INVALID);
      EXPECT_NE(std::string(tl_last_error()).find("in bf16 for a bf16 graph"), std::string::npos)
          << tl_last_error();
    } else {
      ASSERT_EQ(tl_exec_create_ex(g, be, p16, nullptr, &opt, &ex16), TL_OK) << tl_last_error();
      g_probe_seen.clear();
      ASSERT_EQ(tl_exec_forward(ex16, 0, g->n_forward), TL_OK) << tl_last_error();
      ASSERT_EQ(g_probe_seen.size(), 2u);
      std::vector<float> xf(count), zf16(count);
      ASSERT_EQ(tl_exec_get_f32(ex16, x, xf.data(), count), TL_OK) << tl_last_error();
      ASSERT_EQ(tl_exec_get_f32(ex16, z, zf16.data(), count), TL_OK) << tl_last_error();
      for (int64_t i = 0; i < count; i++) {
        EXPECT_EQ(g_probe_seen[0][i], tl_bf16_to_f32(half[i])) << i;
        EXPECT_EQ(xf[i], tl_bf16_to_f32(half[i])) << i;
        EXPECT_EQ(zf16[i], zf[i]) << i;  // the run of the fp32 master weights, bit for bit
      }
    }
    tl_exec_destroy(ex16);
    tl_buffer_destroy(p16);
    tl_exec_destroy(ex);
    tl_buffer_destroy(p);
    tl_backend_destroy(be);
    tl_graph_destroy(g);
  }
}

// What a bf16 GPT graph stores in 2 bytes and what stays fp32, and the
// memory plan that follows: activations and their gradients in bf16; the
// loss, the logits it is computed from, their gradients, the saved
// statistics (LayerNorm's mean and rstd, attention's log-sum-exp),
// parameters, their gradients and the inputs in fp32 or int32. The arena shrinks to well under two
// thirds.
TEST(Graph, Bf16PrecisionStoresActivationsInTwoBytes) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g, &io), TL_OK);
  tl_exec_bytes f32 = {}, b16 = {};
  ASSERT_EQ(tl_exec_size(g, 0, g->n_forward, &f32), TL_OK);
  EXPECT_EQ(tl_graph_set_precision(g, TL_F16), TL_ERR_INVALID);
  ASSERT_EQ(tl_graph_set_precision(g, TL_BF16), TL_OK);
  EXPECT_EQ(g->precision, TL_BF16);
  ASSERT_EQ(tl_exec_size(g, 0, g->n_forward, &b16), TL_OK);
  int n_bf16 = 0;
  for (int i = 0; i < g->n_forward; i++) {
    const tl_node* n = &g->nodes[i];
    for (int k = 0; k < n->n_out; k++) {
      const tl_value* v = &g->values[n->out[k]];
      const bool stat = (n->op == TL_OP_LAYERNORM && k > 0) || (n->op == TL_OP_ATTENTION && k > 0);
      const bool loss = n->out[k] == io.losses || n->out[k] == io.logits;
      EXPECT_EQ(v->dtype, stat || loss ? TL_F32 : TL_BF16) << n->name << " output " << k;
      n_bf16 += v->dtype == TL_BF16;
      if (v->grad >= 0) {
        EXPECT_EQ(g->values[v->grad].dtype, v->dtype) << v->name;
      }
    }
  }
  EXPECT_GT(n_bf16, 10);
  for (int v = 0; v < g->n_values; v++) {
    const tl_value* val = &g->values[v];
    if (val->role == TL_ROLE_PARAM || val->role == TL_ROLE_PARAM_GRAD) {
      EXPECT_EQ(val->dtype, TL_F32) << val->name;
    }
    if (val->role == TL_ROLE_INPUT) {
      EXPECT_EQ(val->dtype, TL_I32) << val->name;
    }
  }
  printf("arena: fp32 %zu bytes, bf16 %zu (%.3f)\n", f32.arena, b16.arena,
         (double)b16.arena / (double)f32.arena);
  EXPECT_LT((double)b16.arena, 0.65 * (double)f32.arena);
  tl_graph_destroy(g);
}

// Computing the GELU outputs again in the backward instead of keeping them
// gives the same gradients bit for bit from a smaller arena: the copies run
// just before their first backward reader, no backward node reads the
// originals any more, and the gradient-readiness hook ignores the copies.
TEST(Graph, RematerialisedNodesGiveTheSameGradientsFromLessMemory) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph *g1 = nullptr, *g2 = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g1, &io), TL_OK);
  ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g2, &io), TL_OK);
  std::vector<int> gelus, outs;
  for (int i = 0; i < g2->n_forward; i++)
    if (g2->nodes[i].op == TL_OP_GELU) gelus.push_back(i), outs.push_back(g2->nodes[i].out[0]);
  ASSERT_EQ(gelus.size(), (size_t)c.n_layers);
  for (int i : gelus) ASSERT_EQ(tl_graph_rematerialize(g2, i), TL_OK) << tl_last_error();
  EXPECT_EQ(g2->n_nodes, g1->n_nodes + c.n_layers);
  int copies = 0;
  for (int i = g2->n_forward; i < g2->n_nodes; i++) {
    const tl_node& n = g2->nodes[i];
    for (int k = 0; k < n.n_in; k++)
      for (int v : outs) EXPECT_NE(n.in[k], v) << n.name << " reads a kept GELU output";
    if (!n.again) continue;
    copies++;
    EXPECT_EQ(n.op, TL_OP_GELU);
    // the next node (its first reader) reads what it wrote
    const tl_node& next = g2->nodes[i + 1];
    bool reads = false;
    for (int k = 0; k < next.n_in; k++) reads |= next.in[k] == n.out[0];
    EXPECT_TRUE(reads) << n.name;
    EXPECT_EQ(n.forward_of, next.forward_of);
  }
  EXPECT_EQ(copies, c.n_layers);
  EXPECT_EQ(tl_graph_rematerialize(g2, g2->n_forward), TL_ERR_INVALID);

  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  size_t bytes = sizeof(float) * m.n_params;
  tl_buffer *p = nullptr, *d1 = nullptr, *d2 = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &p), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &d1), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &d2), TL_OK);
  memset(d1->data, 0, bytes);
  memset(d2->data, 0, bytes);
  tl_model_init_params(&m, 0, m.n_params, (float*)p->data);
  tl_exec *x1 = nullptr, *x2 = nullptr;
  ASSERT_EQ(tl_exec_create(g1, be, p, d1, &x1), TL_OK);
  ASSERT_EQ(tl_exec_create(g2, be, p, d2, &x2), TL_OK);
  EXPECT_LT(tl_exec_plan(x2)->arena_bytes, tl_exec_plan(x1)->arena_bytes);
  std::vector<int32_t> tok(16), tgt(16);
  for (int i = 0; i < 16; i++) tok[i] = (i * 7 + 1) % 50, tgt[i] = (i * 3 + 2) % 50;
  int hooks[2] = {0, 0};
  auto count = [](void* user, int) -> tl_status {
    ++*static_cast<int*>(user);
    return TL_OK;
  };
  tl_exec* xs[2] = {x1, x2};
  for (int k = 0; k < 2; k++) {
    ASSERT_EQ(tl_exec_set_input(xs[k], io.tokens, tok.data(), 64), TL_OK);
    ASSERT_EQ(tl_exec_set_input(xs[k], io.targets, tgt.data(), 64), TL_OK);
    tl_exec_set_backward_hook(xs[k], count, &hooks[k]);
    ASSERT_EQ(tl_exec_forward(xs[k], 0, g1->n_forward), TL_OK);
    ASSERT_EQ(tl_exec_backward(xs[k], 0, g1->n_forward, 1.0f / 16), TL_OK) << tl_last_error();
  }
  EXPECT_EQ(memcmp(d1->data, d2->data, bytes), 0) << "the same gradients, bit for bit";
  EXPECT_EQ(hooks[0], hooks[1]) << "copies do not report gradients final";
  tl_exec_destroy(x1);
  tl_exec_destroy(x2);
  tl_buffer_destroy(p);
  tl_buffer_destroy(d1);
  tl_buffer_destroy(d2);
  tl_backend_destroy(be);
  tl_graph_destroy(g1);
  tl_graph_destroy(g2);
}

TEST(Model, InitialisationOfAnySliceEqualsTheWhole) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  std::vector<float> whole(m.n_params), part(1000);
  tl_model_init_params(&m, 0, m.n_params, whole.data());
  tl_model_init_params(&m, 777, 1777, part.data());
  EXPECT_EQ(memcmp(part.data(), whole.data() + 777, 1000 * 4), 0);
  // layernorm weights are one, biases zero, padded wte rows zero
  const tl_param_tensor& ln = m.tensors[tl_model_tensor(&m, "ln1w")];
  EXPECT_EQ(whole[ln.offset], 1.0f);
  const tl_param_tensor& wte = m.tensors[0];
  EXPECT_EQ(whole[wte.offset + 50 * 16], 0.0f);
  EXPECT_NE(whole[wte.offset + 49 * 16], 0.0f);
}

// Recomputation, selective and full, gives the gradients of keeping
// everything bit for bit, from an executor that keeps less across its
// passes each time: selective drops the T x T attention probabilities, full
// keeps each layer's input (and what the head reads) alone. No backward node
// of a recomputed range reads what the range's forward wrote.
TEST(Graph, RecomputationGivesTheSameGradientsAndKeepsLess) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  size_t bytes = sizeof(float) * m.n_params;
  tl_buffer* p = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &p), TL_OK);
  tl_model_init_params(&m, 0, m.n_params, (float*)p->data);
  std::vector<int32_t> tok(16), tgt(16);
  for (int i = 0; i < 16; i++) tok[i] = (i * 7) % 50, tgt[i] = (i * 11 + 3) % 50;
  std::vector<std::vector<float>> grads;
  std::vector<size_t> kept, transient;
  for (tl_recompute rc : {TL_RECOMPUTE_NONE, TL_RECOMPUTE_SELECTIVE, TL_RECOMPUTE_FULL}) {
    tl_graph* g = nullptr;
    tl_model_io io;
    ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g, &io), TL_OK);
    int n_before = g->n_nodes;
    ASSERT_EQ(tl_model_recompute(g, &io, rc), TL_OK) << tl_last_error();
    int copies = 0;
    for (int i = g->n_forward; i < g->n_nodes; i++) {
      const tl_node& n = g->nodes[i];
      copies += n.again;
      if (!n.again) continue;
      EXPECT_NE(std::string(n.name).find(".rc"), std::string::npos) << n.name;
      if (rc == TL_RECOMPUTE_SELECTIVE) {
        EXPECT_EQ(n.op, TL_OP_ATTENTION) << n.name;
      }
    }
    EXPECT_EQ(g->n_nodes - n_before, copies);
    if (rc == TL_RECOMPUTE_SELECTIVE) {
      EXPECT_EQ(copies, c.n_layers);
    }
    if (rc == TL_RECOMPUTE_FULL) {  // a block but its MLP's output matmul and the add after it
      EXPECT_EQ(copies, c.n_layers * 8);
    }
    // the backward of a recomputed range reads no forward value of it
    for (int l = 0; l < io.n_layers && rc != TL_RECOMPUTE_NONE; l++) {
      int b = io.layer_begin[l], e = io.layer_begin[l + 1];
      for (int i = g->n_forward; i < g->n_nodes; i++) {
        const tl_node& n = g->nodes[i];
        if (n.forward_of < b || n.forward_of >= e) continue;
        for (int j = b; j < e; j++) {
          const tl_node& f = g->nodes[j];
          // selective: the attention's own backward (the projection's reads its output, kept)
          if (rc == TL_RECOMPUTE_SELECTIVE && (f.op != TL_OP_ATTENTION || n.forward_of != j))
            continue;
          for (int k = 0; k < f.n_out; k++)
            EXPECT_FALSE(tl_node_reads(&n, f.out[k]))
                << n.name << " reads " << g->values[f.out[k]].name;
        }
      }
    }
    tl_buffer* d = nullptr;
    ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &d), TL_OK);
    tl_exec* x = nullptr;
    ASSERT_EQ(tl_exec_create(g, be, p, d, &x), TL_OK);
    ASSERT_EQ(tl_exec_set_input(x, io.tokens, tok.data(), 64), TL_OK);
    ASSERT_EQ(tl_exec_set_input(x, io.targets, tgt.data(), 64), TL_OK);
    ASSERT_EQ(tl_exec_forward(x, 0, g->n_forward), TL_OK);
    ASSERT_EQ(tl_exec_backward(x, 0, g->n_forward, 1.0f / 16), TL_OK) << tl_last_error();
    const float* gd = (const float*)d->data;
    grads.emplace_back(gd, gd + m.n_params);
    kept.push_back(tl_exec_plan(x)->arena_bytes);
    transient.push_back(tl_exec_plan(x)->transient_bytes);
    tl_exec_destroy(x);
    tl_buffer_destroy(d);
    tl_graph_destroy(g);
  }
  EXPECT_EQ(memcmp(grads[0].data(), grads[1].data(), bytes), 0) << "selective";
  EXPECT_EQ(memcmp(grads[0].data(), grads[2].data(), bytes), 0) << "full";
  EXPECT_LT(kept[1], kept[0]);
  EXPECT_LT(kept[2], kept[1]);
  printf("kept across passes: %zu, %zu, %zu bytes; transient %zu, %zu, %zu\n", kept[0], kept[1],
         kept[2], transient[0], transient[1], transient[2]);
  tl_buffer_destroy(p);
  tl_backend_destroy(be);
}

// The backward split in two passes (input gradients, then weight
// gradients: a zero-bubble pipeline's B and W) gives the gradients of one
// pass bit for bit, with and without recomputation; the input pass writes
// no matmul weight gradient, the weight pass only those (and their biases),
// and the gradient-readiness hook fires in the weight pass only.
TEST(Graph, TheBackwardSplitInTwoPassesGivesTheSameGradients) {
  tl_model m;
  tl_model_config c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  size_t bytes = sizeof(float) * m.n_params;
  tl_buffer* p = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &p), TL_OK);
  tl_model_init_params(&m, 0, m.n_params, (float*)p->data);
  std::vector<int32_t> tok(16), tgt(16);
  for (int i = 0; i < 16; i++) tok[i] = (i * 5) % 50, tgt[i] = (i * 3 + 1) % 50;
  for (tl_recompute rc : {TL_RECOMPUTE_NONE, TL_RECOMPUTE_FULL}) {
    std::vector<std::vector<float>> grads;
    for (bool split : {false, true}) {
      tl_graph* g = nullptr;
      tl_model_io io;
      ASSERT_EQ(tl_model_build(&m, 2, 8, true, &g, &io), TL_OK);
      ASSERT_EQ(tl_model_recompute(g, &io, rc), TL_OK);
      int matmuls = 0;
      for (int i = 0; i < g->n_forward; i++) matmuls += g->nodes[i].op == TL_OP_MATMUL;
      int before = g->n_nodes;
      const double flops = tl_graph_flops(g, 0, g->n_nodes);
      if (split) {
        ASSERT_EQ(tl_graph_split_weight(g), TL_OK) << tl_last_error();
        EXPECT_EQ(tl_graph_split_weight(g), TL_ERR_INVALID);
        EXPECT_EQ(tl_graph_recompute(g, io.layer_begin[0], io.layer_begin[1]), TL_ERR_INVALID);
        // every matmul but the tied LM head gets a weight node; recomputed
        // copies only those read follow them
        int w_nodes = 0;
        for (int i = g->weight_begin; i < g->n_nodes; i++) {
          if (g->nodes[i].again) continue;
          w_nodes++;
          EXPECT_EQ(g->nodes[i].op, TL_OP_MATMUL_BACKWARD) << g->nodes[i].name;
          EXPECT_EQ(g->nodes[i].out[0], -1) << g->nodes[i].name;
        }
        EXPECT_EQ(w_nodes, matmuls - 1);
        EXPECT_DOUBLE_EQ(tl_graph_flops(g, 0, g->n_nodes), flops) << "the split moves FLOPs";
        // a block's passes: the input pass at least its forward (and the
        // recomputed forward with it), the weight pass under it (its
        // matmuls' weight products)
        double fw = 0, in = 0, wt = 0;
        for (int i = 0; i < g->n_nodes; i++) {
          int f = i < g->n_forward ? i : g->nodes[i].forward_of;
          if (f < io.layer_begin[0] || f >= io.layer_begin[1]) continue;
          (i < g->n_forward ? fw : i < g->weight_begin ? in : wt) += g->nodes[i].flops;
        }
        EXPECT_GE(in / fw, rc == TL_RECOMPUTE_FULL ? 1.5 : 1.0);
        EXPECT_LT(in / fw, rc == TL_RECOMPUTE_FULL ? 2.0 : 1.2);
        EXPECT_GT(wt / fw, 0.6);
        EXPECT_LT(wt / fw, 1.0);
        EXPECT_EQ(g->n_nodes, before + matmuls - 1);
        for (int i = g->n_forward; i < g->weight_begin; i++)
          if (g->nodes[i].op == TL_OP_MATMUL_BACKWARD &&
              std::string(g->nodes[i].name) != "lm_head.grad") {
            EXPECT_EQ(g->nodes[i].out[1], -1) << g->nodes[i].name;
          }
      }
      tl_buffer* d = nullptr;
      ASSERT_EQ(tl_buffer_create(tl_cpu(), bytes, &d), TL_OK);
      tl_exec* x = nullptr;
      ASSERT_EQ(tl_exec_create(g, be, p, d, &x), TL_OK);
      ASSERT_EQ(tl_exec_set_input(x, io.tokens, tok.data(), 64), TL_OK);
      ASSERT_EQ(tl_exec_set_input(x, io.targets, tgt.data(), 64), TL_OK);
      ASSERT_EQ(tl_exec_forward(x, 0, g->n_forward), TL_OK);
      std::vector<int> calls;
      tl_exec_set_backward_hook(
          x,
          [](void* u, int f) {
            static_cast<std::vector<int>*>(u)->push_back(f);
            return TL_OK;
          },
          &calls);
      if (split) {
        ASSERT_EQ(tl_exec_backward_input(x, 0, g->n_forward, 1.0f / 16), TL_OK);
        EXPECT_TRUE(calls.empty()) << "the input pass finalises no gradient";
        ASSERT_EQ(tl_exec_backward_weight(x, 0, g->n_forward), TL_OK) << tl_last_error();
        ASSERT_EQ((int)calls.size(), matmuls);
        EXPECT_EQ(calls.back(), 0);
      } else {
        ASSERT_EQ(tl_exec_backward(x, 0, g->n_forward, 1.0f / 16), TL_OK);
        EXPECT_EQ(tl_exec_backward_weight(x, 0, g->n_forward), TL_ERR_INVALID);
      }
      const float* gd = (const float*)d->data;
      grads.emplace_back(gd, gd + m.n_params);
      tl_exec_destroy(x);
      tl_buffer_destroy(d);
      tl_graph_destroy(g);
    }
    EXPECT_EQ(memcmp(grads[0].data(), grads[1].data(), bytes), 0) << "recompute " << rc;
  }
  tl_buffer_destroy(p);
  tl_backend_destroy(be);
}

// The Llama's layout is transformers' LlamaForCausalLM's: the example
// configs of Llama 3's shapes have Meta's parameter counts exactly (the
// vocabulary 128256 needs no padding); the small example is valid too.
TEST(Model, Llama3ShapesHaveTheirPublishedParameterCounts) {
  const struct {
    const char* path;
    int64_t params;
  } shapes[] = {{"examples/llama3_8b.json", 8030261248LL},
                {"examples/llama3_70b.json", 70553706496LL},
                {"examples/llama3_405b.json", 405853388800LL}};
  for (const auto& s : shapes) {
    tl_config c;
    ASSERT_EQ(tl_config_load(s.path, &c), TL_OK) << tl_last_error();
    tl_model m;
    ASSERT_EQ(tl_model_init(&c.model, &m), TL_OK) << tl_last_error();
    EXPECT_EQ(m.n_params, s.params) << s.path;
  }
  tl_config c;
  ASSERT_EQ(tl_config_load("examples/llama_dp2_tp2_pp2.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_config_check_world(&c, 8), TL_OK);
}

TEST(Model, BadSizesAreConfigErrors) {
  tl_model m;
  tl_model_config c = SmallGpt();
  c.n_heads = 3;
  EXPECT_EQ(tl_model_init(&c, &m), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("n_embd=16 is not divisible by model.n_heads=3"),
            std::string::npos);
  c = SmallGpt();
  ASSERT_EQ(tl_model_init(&c, &m), TL_OK);
  tl_graph* g = nullptr;
  tl_model_io io;
  EXPECT_EQ(tl_model_build(&m, 1, 9, true, &g, &io), TL_ERR_CONFIG);
  EXPECT_EQ(g, nullptr);
}

}  // namespace
