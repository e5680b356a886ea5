// trellis's GPT and MLP against PyTorch at fixed weights and tokens, from
// tests/golden/make_gpt_golden.py (autograd and torch.optim.AdamW, float64)
// and its committed output:
//   - the mean loss within 1e-5 relative;
//   - every element of every gradient within 1e-4 of its tensor's largest
//     (a transposed or permuted gradient fails, as a wrong norm would);
//   - one AdamW step from PyTorch's gradients — trellis's kernel, bias
//     correction and its choice of which tensors decay — within 1e-6 of
//     PyTorch's parameters.
// The GPT's sequence (T = 8) is shorter than its max_seq_len (12): the
// position rows past it have no gradient. Its weights come through the
// llm.c model-file reader, so this also checks that reader's layout.
#include <gtest/gtest.h>
#include <jansson.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "graph/exec.h"
#include "graph/model.h"
#include "launcher/train/checkpoint.h"

namespace {

std::vector<float> ReadFloats(const char* path) {
  std::vector<float> v;
  FILE* f = std::fopen(path, "rb");
  EXPECT_NE(f, nullptr) << path;
  if (!f) return v;
  std::fseek(f, 0, SEEK_END);
  v.resize((size_t)std::ftell(f) / 4);
  std::fseek(f, 0, SEEK_SET);
  EXPECT_EQ(std::fread(v.data(), 4, v.size(), f), v.size()) << path;
  std::fclose(f);
  return v;
}

std::vector<int32_t> Ints(json_t* a) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < json_array_size(a); i++)
    v.push_back((int32_t)json_integer_value(json_array_get(a, i)));
  return v;
}

double Num(json_t* o, const char* k) {
  return json_number_value(json_object_get(o, k));
}

// The model's mean loss and gradient at `params` for the tokens (b rows of
// t), through the graph and executor training runs.
void LossAndGradient(const tl_model& m, const std::vector<float>& params, int b, int t,
                     const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                     double* loss, std::vector<float>* grad) {
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  tl_buffer *p = nullptr, *g = nullptr;
  ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * m.n_params, &p), TL_OK);
  ASSERT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * m.n_params, &g), TL_OK);
  std::copy(params.begin(), params.end(), (float*)p->data);
  tl_graph* graph = nullptr;
  tl_model_io io;
  ASSERT_EQ(tl_model_build(&m, b, t, true, &graph, &io), TL_OK) << tl_last_error();
  tl_exec* x = nullptr;
  ASSERT_EQ(tl_exec_create(graph, be, p, g, &x), TL_OK) << tl_last_error();
  ASSERT_EQ((int)tokens.size(), b * t);
  ASSERT_EQ(tl_exec_set_input(x, io.tokens, tokens.data(), tokens.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_set_input(x, io.targets, targets.data(), targets.size() * 4), TL_OK);
  ASSERT_EQ(tl_exec_forward(x, 0, graph->n_forward), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_exec_backward(x, 0, graph->n_forward, 1.0f / (b * t)), TL_OK) << tl_last_error();
  std::vector<float> losses(b * t);
  ASSERT_EQ(tl_exec_get(x, io.losses, losses.data(), losses.size() * 4), TL_OK);
  *loss = 0;
  for (float l : losses) *loss += l / losses.size();
  grad->assign((const float*)g->data, (const float*)g->data + m.n_params);
  tl_exec_destroy(x);
  tl_graph_destroy(graph);
  tl_buffer_destroy(p);
  tl_buffer_destroy(g);
  tl_backend_destroy(be);
}

// Every element of every tensor's gradient within 1e-4 of the tensor's
// largest |gradient| (PyTorch's); a tensor PyTorch gives no gradient must
// get none.
void ExpectGradientsEqual(const tl_model& m, const std::vector<float>& got, const float* want) {
  for (int k = 0; k < m.n_tensors; k++) {
    const tl_param_tensor& p = m.tensors[k];
    double largest = 0, worst = 0;
    int64_t at = -1;
    for (int64_t i = 0; i < p.numel; i++)
      largest = std::max(largest, (double)std::fabs(want[p.offset + i]));
    for (int64_t i = 0; i < p.numel; i++) {
      double d = std::fabs((double)got[p.offset + i] - want[p.offset + i]);
      if (d > worst) worst = d, at = i;
    }
    EXPECT_LE(worst, 1e-4 * largest + 1e-12)
        << "gradient of " << p.name << ", element " << at << ": " << got[p.offset + at]
        << " against PyTorch's " << want[p.offset + at] << " (largest " << largest << ")";
  }
}

// One AdamW step (step 1) of trellis's kernel from PyTorch's gradients,
// each tensor decayed as trellis decays it, against PyTorch's parameters.
void ExpectAdamwStepEqual(const tl_model& m, const std::vector<float>& params, const float* grads,
                          const float* want, json_t* adamw) {
  tl_backend* be = nullptr;
  ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  std::vector<float> p = params, mo(m.n_params, 0.0f), v(m.n_params, 0.0f);
  for (int k = 0; k < m.n_tensors; k++) {
    const tl_param_tensor& t = m.tensors[k];
    ASSERT_EQ(be->ops->adamw(
                  be->ctx, p.data() + t.offset, grads + t.offset, 1.0f, mo.data() + t.offset,
                  v.data() + t.offset, t.numel, (float)Num(adamw, "lr"), (float)Num(adamw, "beta1"),
                  (float)Num(adamw, "beta2"), (float)Num(adamw, "eps"),
                  t.decay ? (float)Num(adamw, "weight_decay") : 0.0f, (int)Num(adamw, "step")),
              TL_OK);
  }
  for (int k = 0; k < m.n_tensors; k++) {
    const tl_param_tensor& t = m.tensors[k];
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < t.numel; i++) {
      double d = std::fabs((double)p[t.offset + i] - want[t.offset + i]);
      if (d > worst) worst = d, at = i;
    }
    EXPECT_LE(worst, 1e-6) << "AdamW on " << t.name << ", element " << at << ": "
                           << p[t.offset + at] << " against PyTorch's " << want[t.offset + at]
                           << " (from " << params[t.offset + at] << ")";
  }
  tl_backend_destroy(be);
}

json_t* Golden() {
  json_error_t err;
  json_t* g = json_load_file("tests/golden/tiny_gpt_golden.json", 0, &err);
  EXPECT_NE(g, nullptr) << err.text;
  return g;
}

TEST(Golden, TinyGptLossGradientAndAdamwMatchPyTorch) {
  json_t* golden = Golden();
  ASSERT_NE(golden, nullptr);
  json_t* cfg = json_object_get(golden, "config");
  auto geti = [&](const char* k) { return (int)json_integer_value(json_object_get(cfg, k)); };
  tl_model_config mc = {};
  mc.kind = TL_MODEL_GPT;
  mc.n_layers = geti("n_layers"), mc.n_heads = geti("n_heads"), mc.n_embd = geti("n_embd");
  mc.vocab_size = geti("vocab_size"), mc.padded_vocab_size = geti("padded_vocab_size");
  mc.max_seq_len = geti("max_seq_len");
  const int b = geti("batch"), t = geti("seq_len");
  ASSERT_LT(t, mc.max_seq_len) << "the case is a sequence shorter than the model's longest";
  tl_model m;
  ASSERT_EQ(tl_model_init(&mc, &m), TL_OK) << tl_last_error();
  std::vector<float> params(m.n_params);
  ASSERT_EQ(tl_llmc_model_read("tests/golden/tiny_gpt.bin", &m, params.data()), TL_OK)
      << tl_last_error();
  std::vector<float> ref = ReadFloats("tests/golden/tiny_gpt_grads.bin");
  ASSERT_EQ((int64_t)ref.size(), 2 * m.n_params);

  double loss;
  std::vector<float> grad;
  LossAndGradient(m, params, b, t, Ints(json_object_get(golden, "tokens")),
                  Ints(json_object_get(golden, "targets")), &loss, &grad);
  const double want = Num(golden, "loss");
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << "mean loss";
  printf("gpt loss %.8f (PyTorch %.8f)\n", loss, want);
  ExpectGradientsEqual(m, grad, ref.data());
  // the position rows past the sequence: no gradient, on either side
  const tl_param_tensor* wpe = &m.tensors[1];
  ASSERT_STREQ(wpe->name, "wpe");
  for (int64_t i = (int64_t)t * mc.n_embd; i < wpe->numel; i++) {
    ASSERT_EQ(ref[wpe->offset + i], 0.0f) << i;
    ASSERT_EQ(grad[wpe->offset + i], 0.0f) << "wpe element " << i << " past the sequence";
  }
  ExpectAdamwStepEqual(m, params, ref.data(), ref.data() + m.n_params,
                       json_object_get(golden, "adamw"));
  json_decref(golden);
}

TEST(Golden, TinyMlpLossGradientAndAdamwMatchPyTorch) {
  json_t* golden = Golden();
  ASSERT_NE(golden, nullptr);
  json_t* mj = json_object_get(golden, "mlp");
  json_t* sizes = json_object_get(mj, "sizes");
  tl_model_config mc = {};
  mc.kind = TL_MODEL_MLP;
  mc.n_mlp_layers = (int)json_array_size(sizes) - 1;
  for (int i = 0; i <= mc.n_mlp_layers; i++)
    mc.mlp_sizes[i] = (int)json_integer_value(json_array_get(sizes, i));
  json_t* cfg = json_object_get(golden, "config");
  mc.vocab_size = (int)json_integer_value(json_object_get(cfg, "vocab_size"));
  const int b = (int)json_integer_value(json_object_get(cfg, "batch")),
            t = (int)json_integer_value(json_object_get(cfg, "seq_len"));
  tl_model m;
  ASSERT_EQ(tl_model_init(&mc, &m), TL_OK) << tl_last_error();
  std::vector<float> file = ReadFloats("tests/golden/tiny_mlp.bin");
  ASSERT_EQ((int64_t)file.size(), 3 * m.n_params) << "weights, gradient, after AdamW";
  std::vector<float> params(file.begin(), file.begin() + m.n_params);

  double loss;
  std::vector<float> grad;
  LossAndGradient(m, params, b, t, Ints(json_object_get(mj, "tokens")),
                  Ints(json_object_get(mj, "targets")), &loss, &grad);
  const double want = Num(mj, "loss");
  EXPECT_NEAR(loss, want, 1e-5 * std::fabs(want)) << "mean loss";
  printf("mlp loss %.8f (PyTorch %.8f)\n", loss, want);
  ExpectGradientsEqual(m, grad, file.data() + m.n_params);
  ExpectAdamwStepEqual(m, params, file.data() + m.n_params, file.data() + 2 * m.n_params,
                       json_object_get(golden, "adamw"));
  json_decref(golden);
}

}  // namespace
