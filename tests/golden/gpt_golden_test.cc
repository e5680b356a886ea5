// trellis's GPT against PyTorch: the loss and the gradient norm of every
// parameter tensor of a tiny GPT at fixed weights and tokens, computed by
// tests/golden/make_gpt_golden.py (autograd, float64) and committed with it.
// The weights come through the llm.c model-file reader, so this also checks
// that reader's layout.
#include <gtest/gtest.h>
#include <jansson.h>

#include <cmath>
#include <string>
#include <vector>

#include "graph/exec.h"
#include "graph/model.h"
#include "launcher/train/checkpoint.h"

namespace {

TEST(Golden, TinyGptLossAndGradientNormsMatchPyTorch) {
  json_error_t err;
  json_t* golden = json_load_file("tests/golden/tiny_gpt_golden.json", 0, &err);
  ASSERT_NE(golden, nullptr) << err.text;
  json_t* cfg = json_object_get(golden, "config");
  auto geti = [&](const char* k) { return (int)json_integer_value(json_object_get(cfg, k)); };
  tl_model_config mc = {};
  mc.kind = TL_MODEL_GPT;
  mc.n_layers = geti("n_layers"), mc.n_heads = geti("n_heads"), mc.n_embd = geti("n_embd");
  mc.vocab_size = geti("vocab_size"), mc.padded_vocab_size = geti("padded_vocab_size");
  mc.max_seq_len = geti("max_seq_len");
  int b = geti("batch"), t = geti("seq_len");
  tl_model m;
  ASSERT_EQ(tl_model_init(&mc, &m), TL_OK) << tl_last_error();

  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  tl_buffer *params = nullptr, *grads = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * m.n_params, &params), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * m.n_params, &grads), TL_OK);
  ASSERT_EQ(tl_llmc_model_read("tests/golden/tiny_gpt.bin", &m, (float*)params->data), TL_OK)
      << tl_last_error();

  tl_graph* g = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, b, t, true, &g, &io), TL_OK);
  tl_exec* x = nullptr;
  ASSERT_EQ(tl_exec_create(g, be, params, grads, &x), TL_OK);
  std::vector<int32_t> tokens, targets;
  for (size_t i = 0; i < json_array_size(json_object_get(golden, "tokens")); i++) {
    tokens.push_back(json_integer_value(json_array_get(json_object_get(golden, "tokens"), i)));
    targets.push_back(json_integer_value(json_array_get(json_object_get(golden, "targets"), i)));
  }
  ASSERT_EQ((int)tokens.size(), b * t);
  ASSERT_EQ(tl_exec_set_input(x, io.tokens, tokens.data(), tokens.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_set_input(x, io.targets, targets.data(), targets.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_forward(x, 0, g->n_forward), TL_OK);
  ASSERT_EQ(tl_exec_backward(x, 0, g->n_forward, 1.0f / (b * t)), TL_OK);

  std::vector<float> losses(b * t);
  ASSERT_EQ(tl_exec_get(x, io.losses, losses.data(), losses.size() * 4), TL_OK);
  double loss = 0;
  for (float l : losses) loss += l;
  loss /= losses.size();
  double want = json_real_value(json_object_get(golden, "loss"));
  EXPECT_NEAR(loss, want, 1e-4 * std::fabs(want)) << "mean loss";

  json_t* norms = json_object_get(golden, "grad_norms");
  const float* gr = (const float*)grads->data;
  ASSERT_EQ((int)json_object_size(norms), m.n_tensors);
  for (int k = 0; k < m.n_tensors; k++) {
    const tl_param_tensor& p = m.tensors[k];
    double s = 0;
    for (int64_t i = 0; i < p.numel; i++) s += (double)gr[p.offset + i] * gr[p.offset + i];
    double want_norm = json_real_value(json_object_get(norms, p.name));
    ASSERT_GT(want_norm, 0) << p.name;
    EXPECT_NEAR(std::sqrt(s), want_norm, 1e-4 * want_norm) << "gradient norm of " << p.name;
  }
  printf("loss %.8f (PyTorch %.8f)\n", loss, want);
  tl_exec_destroy(x);
  tl_graph_destroy(g);
  tl_buffer_destroy(params);
  tl_buffer_destroy(grads);
  tl_backend_destroy(be);
  json_decref(golden);
}

}  // namespace
