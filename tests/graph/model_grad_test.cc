// Whole-model gradient checks: the backward pass that autodiff assembles for
// a tiny GPT and a tiny MLP against central finite differences of the
// forward pass, tensor by tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "graph/exec.h"
#include "graph/model.h"

namespace {

struct Harness {
  tl_model m;
  tl_graph* g = nullptr;
  tl_model_io io;
  tl_backend* be = nullptr;
  tl_buffer *params = nullptr, *grads = nullptr;
  tl_exec* x = nullptr;
  int b, t;
  std::vector<int32_t> tokens, targets;

  Harness(const tl_model_config& cfg, int b_, int t_) : b(b_), t(t_) {
    EXPECT_EQ(tl_model_init(&cfg, &m), TL_OK) << tl_last_error();
    EXPECT_EQ(tl_model_build(&m, b, t, true, &g, &io), TL_OK) << tl_last_error();
    EXPECT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
    size_t bytes = sizeof(float) * (size_t)m.n_params;
    EXPECT_EQ(tl_buffer_create(tl_cpu(), bytes, &params), TL_OK);
    EXPECT_EQ(tl_buffer_create(tl_cpu(), bytes, &grads), TL_OK);
    // Weights of order one (not the small training init), so that gradients
    // are large against float rounding in the finite differences.
    tl_rng_uniform(7, 0, 0, (size_t)m.n_params, -0.5f, 0.5f, (float*)params->data);
    for (int k = 0; k < m.n_tensors; k++)
      if (m.tensors[k].init == TL_INIT_ONES)  // layernorm weights near one
        for (int64_t i = 0; i < m.tensors[k].numel; i++)
          ((float*)params->data)[m.tensors[k].offset + i] += 1.0f;
    EXPECT_EQ(tl_exec_create(g, be, params, grads, &x), TL_OK) << tl_last_error();
    int n = b * t;
    tokens.resize(n);
    targets.resize(n);
    for (int i = 0; i < n; i++) {
      tokens[i] = (i * 7 + 3) % m.vocab;
      targets[i] = (i * 5 + 1) % m.vocab;
    }
  }
  ~Harness() {
    tl_exec_destroy(x);
    tl_buffer_destroy(params);
    tl_buffer_destroy(grads);
    tl_backend_destroy(be);
    tl_graph_destroy(g);
  }

  // Mean loss over the batch (the quantity training differentiates).
  double Loss() {
    EXPECT_EQ(tl_exec_set_input(x, io.tokens, tokens.data(), tokens.size() * 4), TL_OK);
    EXPECT_EQ(tl_exec_set_input(x, io.targets, targets.data(), targets.size() * 4), TL_OK);
    EXPECT_EQ(tl_exec_forward(x, 0, g->n_forward), TL_OK) << tl_last_error();
    std::vector<float> losses(tokens.size());
    EXPECT_EQ(tl_exec_get(x, io.losses, losses.data(), losses.size() * 4), TL_OK);
    double s = 0;
    for (float l : losses) s += l;
    return s / losses.size();
  }

  void Backward() {
    memset(grads->data, 0, grads->bytes);
    Loss();
    ASSERT_EQ(tl_exec_backward(x, 0, g->n_forward, 1.0f / (b * t)), TL_OK) << tl_last_error();
  }
};

// Checks up to 24 elements per tensor; returns the worst relative error.
void CheckGradients(Harness& h, double tol) {
  h.Backward();
  std::vector<float> analytic((float*)h.grads->data, (float*)h.grads->data + h.m.n_params);
  float* p = (float*)h.params->data;
  for (int k = 0; k < h.m.n_tensors; k++) {
    const tl_param_tensor& t = h.m.tensors[k];
    double max_diff = 0, max_ref = 0;
    int64_t step = t.numel > 24 ? t.numel / 24 : 1;
    for (int64_t i = 0; i < t.numel; i += step) {
      int64_t j = t.offset + i;
      if (t.init == TL_INIT_NORMAL && i >= t.init_rows * (t.numel / t.shape[0])) continue;
      float orig = p[j];
      const float eps = 1e-2f;
      p[j] = orig + eps;
      double lp = h.Loss();
      p[j] = orig - eps;
      double lm = h.Loss();
      p[j] = orig;
      double fd = (lp - lm) / (2.0 * eps);
      max_diff = std::fmax(max_diff, std::fabs(fd - analytic[j]));
      max_ref = std::fmax(max_ref, std::fabs(fd));
    }
    ASSERT_GT(max_ref, 1e-6) << t.name << " has no gradient at all";
    EXPECT_LT(max_diff / max_ref, tol) << "tensor " << t.name << ": max |analytic - fd| "
                                       << max_diff << " against max |fd| " << max_ref;
  }
}

TEST(ModelGradient, TinyGptMatchesFiniteDifferences) {
  tl_model_config c = {};
  c.kind = TL_MODEL_GPT;
  c.n_layers = 2, c.n_heads = 2, c.n_embd = 8, c.vocab_size = 11, c.padded_vocab_size = 16;
  c.max_seq_len = 6, c.seed = 1;
  Harness h(c, 2, 5);
  CheckGradients(h, 2e-2);
}

TEST(ModelGradient, TinyMlpMatchesFiniteDifferences) {
  tl_model_config c = {};
  c.kind = TL_MODEL_MLP;
  c.vocab_size = 11, c.n_mlp_layers = 3, c.seed = 1;
  c.mlp_sizes[0] = 6, c.mlp_sizes[1] = 10, c.mlp_sizes[2] = 7, c.mlp_sizes[3] = 11;
  Harness h(c, 2, 3);
  CheckGradients(h, 2e-2);
}

TEST(ModelGradient, GradientsAccumulateAcrossBackwardCalls) {
  tl_model_config c = {};
  c.kind = TL_MODEL_GPT;
  c.n_layers = 1, c.n_heads = 2, c.n_embd = 8, c.vocab_size = 11, c.max_seq_len = 4, c.seed = 1;
  Harness h(c, 1, 4);
  h.Backward();
  std::vector<float> once((float*)h.grads->data, (float*)h.grads->data + h.m.n_params);
  h.Loss();
  ASSERT_EQ(tl_exec_backward(h.x, 0, h.g->n_forward, 1.0f / 4), TL_OK);
  const float* twice = (const float*)h.grads->data;
  for (int64_t i = 0; i < h.m.n_params; i++) ASSERT_FLOAT_EQ(twice[i], 2 * once[i]) << i;
}

// An executor told which gradients hold nothing yet (tl_exec_options.
// grads_fresh) writes each the first time a node writes it — a linear
// layer's weight by its product, any other zeroed just before — into a
// buffer of garbage: the gradients of a zeroed buffer, and after the marks
// are used up the next backward adds again.
void ExpectFreshGradientsWritten(const tl_model_config& c, int b, int t) {
  Harness h(c, b, t);
  h.Backward();
  std::vector<float> want((float*)h.grads->data, (float*)h.grads->data + h.m.n_params);
  bool* fresh = new bool[h.g->n_values]();
  for (int v = 0; v < h.g->n_values; v++) fresh[v] = h.g->values[v].role == TL_ROLE_PARAM;
  struct tl_exec_options opt = {};
  opt.begin = 0, opt.end = h.g->n_forward, opt.grads_fresh = fresh;
  tl_exec* x = nullptr;
  ASSERT_EQ(tl_exec_create_ex(h.g, h.be, h.params, h.grads, &opt, &x), TL_OK) << tl_last_error();
  float* g = (float*)h.grads->data;
  for (int64_t i = 0; i < h.m.n_params; i++) g[i] = 1e3f + (float)(i % 7);
  for (int pass = 1; pass <= 2; pass++) {
    ASSERT_EQ(tl_exec_set_input(x, h.io.tokens, h.tokens.data(), h.tokens.size() * 4), TL_OK);
    ASSERT_EQ(tl_exec_set_input(x, h.io.targets, h.targets.data(), h.targets.size() * 4), TL_OK);
    ASSERT_EQ(tl_exec_forward(x, 0, h.g->n_forward), TL_OK) << tl_last_error();
    ASSERT_EQ(tl_exec_backward(x, 0, h.g->n_forward, 1.0f / (b * t)), TL_OK) << tl_last_error();
    for (int k = 0; k < h.m.n_tensors; k++) {
      const tl_param_tensor& p = h.m.tensors[k];
      for (int64_t i = p.offset; i < p.offset + p.numel; i++)
        ASSERT_FLOAT_EQ(g[i], pass * want[i])
            << p.name << " element " << i - p.offset << " after backward " << pass;
    }
  }
  for (int v = 0; v < h.g->n_values; v++)
    EXPECT_FALSE(fresh[v] && h.g->values[v].role == TL_ROLE_PARAM) << "value " << v;
  tl_exec_destroy(x);
  delete[] fresh;
}

TEST(ModelGradient, FreshGradientsAreWrittenNotAdded) {
  tl_model_config gpt = {};  // the tied head writes wte's, the embedding adds
  gpt.kind = TL_MODEL_GPT;
  gpt.n_layers = 2, gpt.n_heads = 2, gpt.n_embd = 8, gpt.vocab_size = 11;
  gpt.max_seq_len = 6, gpt.seed = 1;
  ExpectFreshGradientsWritten(gpt, 2, 5);
  tl_model_config llama = {};  // untied: the embedding's table zeroed, then scattered
  llama.kind = TL_MODEL_LLAMA;
  llama.n_layers = 2, llama.n_heads = 2, llama.n_kv_heads = 1, llama.n_embd = 8;
  llama.ffn_hidden = 12, llama.vocab_size = 11, llama.max_seq_len = 6, llama.seed = 1;
  llama.rope_theta = 10000, llama.norm_eps = 1e-5f;
  ExpectFreshGradientsWritten(llama, 2, 5);
  tl_model_config mlp = {};
  mlp.kind = TL_MODEL_MLP;
  mlp.vocab_size = 11, mlp.n_mlp_layers = 3, mlp.seed = 1;
  mlp.mlp_sizes[0] = 6, mlp.mlp_sizes[1] = 10, mlp.mlp_sizes[2] = 7, mlp.mlp_sizes[3] = 11;
  ExpectFreshGradientsWritten(mlp, 2, 3);
}

}  // namespace
