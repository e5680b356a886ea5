// trellis's Llama against Hugging Face transformers, through the path a
// user takes: a config whose model.init_from is a directory transformers
// wrote (the architecture from its config.json), trained by trellis's
// trainer, exported as a Hugging Face directory. Every case under
// tests/golden/llama/ (written by make_llama_golden.py; any directory of
// the same files is a case) is held to transformers' own numbers:
//   - step 1's mean loss within 1e-5 relative, and every element of every
//     gradient within 1e-4 of its tensor's largest;
//   - the losses of 3 AdamW steps within 1e-4 relative;
//   - the export of the weights trellis loaded holds transformers' tensors
//     bit for bit under their names and shapes, and a config.json that
//     reads back to the same architecture — so transformers loads it as the
//     model it wrote — and trellis's logits of those weights are
//     transformers' within 1e-5 relative (of the largest);
//   - the export after training reads back to the trained weights bit for
//     bit, and its logits are transformers' after its own 3 AdamW steps
//     within 1e-4 relative.
#include <dirent.h>
#include <gtest/gtest.h>
#include <jansson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "graph/exec.h"
#include "graph/model.h"
#include "launcher/train/hf.h"
#include "launcher/train/inputs.h"
#include "launcher/train/safetensors.h"
#include "launcher/train/trainer.h"

namespace {

const char* kRoot = "tests/golden/llama";

std::vector<std::string> Cases() {
  std::vector<std::string> v;
  DIR* d = opendir(kRoot);
  for (struct dirent* e; d && (e = readdir(d));)
    if (e->d_name[0] != '.') v.push_back(e->d_name);
  if (d) closedir(d);
  std::sort(v.begin(), v.end());
  return v;
}

std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

double Num(json_t* o, const char* k) {
  return json_number_value(json_object_get(o, k));
}

// max |a - b| over max |b|: relative to the tensor's scale
double RelErr(const float* a, const float* b, int64_t n) {
  double most = 0, worst = 0;
  for (int64_t i = 0; i < n; i++) most = std::max(most, (double)std::fabs(b[i]));
  for (int64_t i = 0; i < n; i++) worst = std::max(worst, std::fabs((double)a[i] - b[i]));
  return most > 0 ? worst / most : worst;
}

// A tensor of a safetensors file, as fp32.
std::vector<float> Tensor(const std::string& path, const char* name) {
  tl_st_file f;
  std::vector<float> v;
  EXPECT_EQ(tl_st_open(path.c_str(), &f), TL_OK) << tl_last_error();
  const tl_st_tensor* t = tl_st_find(&f, name);
  EXPECT_NE(t, nullptr) << path << " has no " << name;
  if (t) {
    v.resize(t->numel);
    EXPECT_EQ(tl_st_read(&f, t, 0, t->numel, v.data()), TL_OK) << tl_last_error();
  }
  tl_st_close(&f);
  return v;
}

// Step 1's input tokens: sequence b starts at b * T of the token file.
std::vector<int32_t> FirstBatch(const std::string& path, int b, int t) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(1024);
  std::vector<uint16_t> raw(b * t + 1);
  f.read(reinterpret_cast<char*>(raw.data()), raw.size() * 2);
  std::vector<int32_t> tok;
  for (int s = 0; s < b; s++)
    for (int i = 0; i < t; i++) tok.push_back(raw[s * t + i]);
  return tok;
}

// trellis's logits (b, t, vocab: the padding dropped) of `params`.
std::vector<float> Logits(const tl_model& m, const float* params, const std::vector<int32_t>& tok,
                          int b, int t) {
  std::vector<float> out;
  tl_backend* be = nullptr;
  EXPECT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  tl_buffer *p = nullptr, *g = nullptr;
  EXPECT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * m.n_params, &p), TL_OK);
  EXPECT_EQ(tl_buffer_create(tl_cpu(), sizeof(float) * m.n_params, &g), TL_OK);
  memcpy(p->data, params, sizeof(float) * m.n_params);
  tl_graph* graph = nullptr;
  tl_model_io io;
  EXPECT_EQ(tl_model_build(&m, b, t, false, &graph, &io), TL_OK) << tl_last_error();
  tl_exec* x = nullptr;
  EXPECT_EQ(tl_exec_create(graph, be, p, g, &x), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_exec_set_input(x, io.tokens, tok.data(), tok.size() * 4), TL_OK);
  EXPECT_EQ(tl_exec_forward(x, 0, graph->n_forward), TL_OK) << tl_last_error();
  std::vector<float> padded((size_t)b * t * m.padded_vocab);
  EXPECT_EQ(tl_exec_get(x, io.logits, padded.data(), padded.size() * 4), TL_OK);
  for (int i = 0; i < b * t; i++)
    out.insert(out.end(), padded.begin() + (size_t)i * m.padded_vocab,
               padded.begin() + (size_t)i * m.padded_vocab + m.vocab);
  tl_exec_destroy(x);
  tl_graph_destroy(graph);
  tl_buffer_destroy(p);
  tl_buffer_destroy(g);
  tl_backend_destroy(be);
  return out;
}

// The trellis config a user would write: the weights and architecture from
// the directory transformers wrote, the optimizer golden.json's.
std::string WriteConfig(const std::string& name, const std::string& dir, json_t* golden) {
  char buf[2048];
  snprintf(buf, sizeof buf,
           R"({"model": {"init_from": "%s/hf"},
               "train": {"steps": %d, "batch_size": %d, "seq_len": %d, "lr": %.17g,
                         "lr_schedule": "constant", "warmup_steps": 0, "beta1": %.17g,
                         "beta2": %.17g, "eps": %.17g, "weight_decay": %.17g, "grad_clip": 0,
                         "sample_tokens": 0},
               "data": {"train": "%s/tokens.bin"},
               "device": {"threads": 1}})",
           dir.c_str(), (int)Num(golden, "steps"), (int)Num(golden, "batch"),
           (int)Num(golden, "seq_len"), Num(golden, "lr"), Num(golden, "beta1"),
           Num(golden, "beta2"), Num(golden, "eps"), Num(golden, "weight_decay"), dir.c_str());
  std::string path = TmpDir() + "/" + name + ".json";
  std::ofstream(path) << buf;
  return path;
}

class LlamaGolden : public testing::TestWithParam<std::string> {};

TEST(LlamaGoldenCases, ThereAreCases) {
  EXPECT_GE(Cases().size(), 2u) << "tests/golden/llama/ holds the cases";
}

TEST_P(LlamaGolden, TrainsAndExportsAsTransformersComputes) {
  const std::string name = GetParam(), dir = std::string(kRoot) + "/" + name;
  json_error_t err;
  json_t* golden = json_load_file((dir + "/golden.json").c_str(), 0, &err);
  ASSERT_NE(golden, nullptr) << dir << "/golden.json: " << err.text;
  const int b = (int)Num(golden, "batch"), t = (int)Num(golden, "seq_len");
  const int steps = (int)Num(golden, "steps");
  json_t* want_losses = json_object_get(golden, "losses");
  ASSERT_EQ((int)json_array_size(want_losses), steps);

  // 1. the config: the architecture from config.json
  tl_config cfg;
  const std::string path = WriteConfig(name, dir, golden);
  ASSERT_EQ(tl_hf_config_load(path.c_str(), &cfg), TL_OK) << tl_last_error();
  ASSERT_EQ(cfg.model.kind, TL_MODEL_LLAMA);
  ASSERT_EQ(tl_inputs_check(&cfg), TL_OK) << tl_last_error();

  // 2. step 1: the loss and every gradient
  tl_trainer* tr = nullptr;
  ASSERT_EQ(tl_trainer_create(&cfg, nullptr, &tr), TL_OK) << tl_last_error();
  const tl_model m = *tl_trainer_model(tr);
  const int64_t n = m.n_params;
  tl_step_stats st;
  ASSERT_EQ(tl_trainer_step(tr, &st), TL_OK) << tl_last_error();
  const double l0 = json_number_value(json_array_get(want_losses, 0));
  EXPECT_NEAR(st.loss, l0, 1e-5 * std::fabs(l0)) << "step 1's loss";
  std::vector<float> grads(n);
  ASSERT_EQ(tl_trainer_gather_grads(tr, grads.data()), TL_OK) << tl_last_error();
  std::vector<tl_hf_tensor> hf(tl_hf_tensors(&m, nullptr));
  tl_hf_tensors(&m, hf.data());
  double worst_grad = 0;
  for (const tl_hf_tensor& h : hf) {
    std::vector<float> want = Tensor(dir + "/grads.safetensors", h.name);
    ASSERT_EQ((int64_t)want.size(), h.numel) << h.name;
    double e = RelErr(grads.data() + h.full, want.data(), h.numel);
    EXPECT_LE(e, 1e-4) << "the gradient of " << h.name;
    worst_grad = std::max(worst_grad, e);
  }
  // 3. the next steps' losses
  std::vector<double> losses = {st.loss};
  for (int s = 1; s < steps; s++) {
    ASSERT_EQ(tl_trainer_step(tr, &st), TL_OK) << tl_last_error();
    const double want = json_number_value(json_array_get(want_losses, s));
    EXPECT_NEAR(st.loss, want, 1e-4 * std::fabs(want)) << "step " << s + 1 << "'s loss";
    losses.push_back(st.loss);
  }
  // 4. the export after training reads back to the trained weights, and
  // gives transformers' logits after its own 3 steps
  std::vector<float> trained(3 * n), back(n);
  ASSERT_EQ(tl_trainer_gather(tr, trained.data(), 0), TL_OK) << tl_last_error();
  const std::string out = TmpDir() + "/" + name + "_trained";
  ASSERT_EQ(tl_trainer_export(tr, out.c_str()), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_hf_model_read(out.c_str(), &m, back.data()), TL_OK) << tl_last_error();
  EXPECT_EQ(memcmp(back.data(), trained.data(), sizeof(float) * n), 0)
      << "the export holds the trained weights";
  const std::vector<int32_t> tok = FirstBatch(dir + "/tokens.bin", b, t);
  std::vector<float> after = Logits(m, back.data(), tok, b, t);
  std::vector<float> want_after = Tensor(dir + "/logits.safetensors", "after");
  ASSERT_EQ(after.size(), want_after.size());
  const double e_after = RelErr(after.data(), want_after.data(), (int64_t)after.size());
  EXPECT_LE(e_after, 1e-4) << "logits after 3 steps, from the export";
  tl_trainer_destroy(tr);

  // 5. the export of the weights as loaded: transformers' tensors, bit for
  // bit, and a config.json of the same architecture
  tl_config c0 = cfg;
  c0.train.steps = 0;
  ASSERT_EQ(tl_trainer_create(&c0, nullptr, &tr), TL_OK) << tl_last_error();
  const std::string fresh = TmpDir() + "/" + name + "_loaded";
  ASSERT_EQ(tl_trainer_export(tr, fresh.c_str()), TL_OK) << tl_last_error();
  tl_trainer_destroy(tr);
  tl_st_file src, mine;
  ASSERT_EQ(tl_st_open((dir + "/hf/model.safetensors").c_str(), &src), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_st_open((fresh + "/model.safetensors").c_str(), &mine), TL_OK) << tl_last_error();
  EXPECT_EQ(src.n_tensors, mine.n_tensors) << "the same tensors";
  for (int i = 0; i < src.n_tensors; i++) {
    const tl_st_tensor* a = &src.tensors[i];
    const tl_st_tensor* x = tl_st_find(&mine, a->name);
    ASSERT_NE(x, nullptr) << "the export has no " << a->name;
    ASSERT_EQ(x->n_dims, a->n_dims) << a->name;
    for (int d = 0; d < a->n_dims; d++) EXPECT_EQ(x->shape[d], a->shape[d]) << a->name;
    std::vector<float> va(a->numel), vx(a->numel);
    ASSERT_EQ(tl_st_read(&src, a, 0, a->numel, va.data()), TL_OK);
    ASSERT_EQ(tl_st_read(&mine, x, 0, x->numel, vx.data()), TL_OK);
    EXPECT_EQ(memcmp(va.data(), vx.data(), sizeof(float) * va.size()), 0) << a->name;
  }
  tl_st_close(&src);
  tl_st_close(&mine);
  // its config.json is the same architecture: a config that starts from
  // the export resolves to the model trained above
  json_t* over = json_load_file(path.c_str(), 0, &err);
  json_object_set_new(json_object_get(over, "model"), "init_from", json_string(fresh.c_str()));
  const std::string again = TmpDir() + "/" + name + "_again.json";
  json_dump_file(over, again.c_str(), 0);
  json_decref(over);
  tl_config re;
  ASSERT_EQ(tl_hf_config_load(again.c_str(), &re), TL_OK) << tl_last_error();
  const tl_model_config &a = re.model, &w = cfg.model;
  EXPECT_EQ(a.kind, w.kind);
  EXPECT_EQ(a.n_layers, w.n_layers);
  EXPECT_EQ(a.n_heads, w.n_heads);
  EXPECT_EQ(tl_config_kv_heads(&a), tl_config_kv_heads(&w));
  EXPECT_EQ(a.n_embd, w.n_embd);
  EXPECT_EQ(tl_config_ffn_hidden(&a), tl_config_ffn_hidden(&w));
  EXPECT_EQ(a.vocab_size, w.vocab_size);
  EXPECT_EQ(a.max_seq_len, w.max_seq_len);
  EXPECT_EQ(a.rope_theta, w.rope_theta);
  EXPECT_EQ(a.rope_scaling.factor, w.rope_scaling.factor);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, w.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, w.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            w.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.norm_eps, w.norm_eps);
  EXPECT_EQ(a.tie_embeddings, w.tie_embeddings);
  // trellis's logits of the loaded weights are transformers'
  std::vector<float> loaded(n);
  ASSERT_EQ(tl_hf_model_read(fresh.c_str(), &m, loaded.data()), TL_OK);
  std::vector<float> before = Logits(m, loaded.data(), tok, b, t);
  std::vector<float> want_before = Tensor(dir + "/logits.safetensors", "before");
  ASSERT_EQ(before.size(), want_before.size());
  const double e_before = RelErr(before.data(), want_before.data(), (int64_t)before.size());
  EXPECT_LE(e_before, 1e-5) << "logits of the loaded weights";
  printf("%s: losses", name.c_str());
  for (size_t s = 0; s < losses.size(); s++)
    printf(" %.7f (transformers %.7f)", losses[s],
           json_number_value(json_array_get(want_losses, s)));
  printf(
      "\n  gradients within %.2g of each tensor's largest; logits within %.2g before "
      "training, %.2g after\n",
      worst_grad, e_before, e_after);
  json_decref(golden);
}

INSTANTIATE_TEST_SUITE_P(Cases, LlamaGolden, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
