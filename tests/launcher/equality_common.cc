// equality_common.cc — see equality_common.h.
#include "tests/launcher/equality_common.h"

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <cstring>

#include "core/env.h"
#include "launcher/data/tokens.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"

int WorldSize() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int WorldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// A token file of random tokens shared by every rank (written by rank 0).
const char* Tokens() {
  static std::string path;
  if (path.empty()) {
    const char* dir = getenv("TEST_TMPDIR");
    path = std::string(dir ? dir : "/tmp") + "/equality_tokens.bin";
    if (WorldRank() == 0) {
      EXPECT_EQ(tl_tokens_write_random(path.c_str(), 20000, 64, 11), TL_OK) << tl_last_error();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return path.c_str();
}

tl_config Base(tl_model_kind kind) {
  tl_config c;
  tl_config_defaults(&c);
  // on emulated GPUs (TRELLIS_EMULATE=cuda) the suite runs the CUDA path:
  // its device, its groups, its order of kernels, copies and collectives
  if (tl_env()->emulate_cuda) c.device.type = TL_DEVICE_CUDA;
  c.model.kind = kind;
  c.model.vocab_size = 64;
  if (kind == TL_MODEL_GPT) {
    // 8 heads and a padded vocabulary of 128: tp up to 8 divides both
    c.model.n_layers = 4, c.model.n_heads = 8, c.model.n_embd = 32, c.model.max_seq_len = 8;
  } else if (kind == TL_MODEL_LLAMA) {
    // grouped-query attention, 2 query heads a key/value head (tp up to
    // 2 divides the key/value heads), an untied head, Llama 3's theta
    c.model.n_layers = 4, c.model.n_heads = 4, c.model.n_kv_heads = 2, c.model.n_embd = 32;
    c.model.ffn_hidden = 48, c.model.max_seq_len = 8, c.model.rope_theta = 500000.0f;
  } else {
    c.model.n_mlp_layers = 4;
    int sizes[5] = {16, 24, 24, 24, 64};
    memcpy(c.model.mlp_sizes, sizes, sizeof sizes);
  }
  c.train.steps = 5, c.train.batch_size = 16, c.train.seq_len = 8;
  // eps 1e-8, as people train: the oracle checks each step from the mesh's
  // state, so AdamW's magnified rounding (g / (|g| + eps) where a gradient
  // is noise) never accumulates into the comparison
  c.train.lr = 1e-3f, c.train.eps = 1e-8f, c.train.warmup_steps = 0, c.train.weight_decay = 0.1f;
  c.train.grad_clip = 1.0f, c.train.sample_tokens = 0;
  snprintf(c.data.train, sizeof c.data.train, "%s", Tokens());
  c.data.val[0] = '\0';
  return c;
}

// Trains `c` on this job (collective), every step checked by the equality
// oracle against the same config on one device (held by rank 0).
Run Train(const tl_config& c) {
  Run r;
  tl_worker w;
  tl_trainer* t = nullptr;
  EXPECT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
  tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
  EXPECT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
  if (!t) return r;
  tl_verify* v = nullptr;
  EXPECT_EQ(tl_verify_create(t, &v), TL_OK) << tl_last_error();
  int n_stages, begin, end;
  tl_trainer_stage(t, &r.stage, &n_stages, &begin, &end);
  r.stage_layers = end - begin;
  for (int s = 0; s < c.train.steps && v; s++) {
    tl_step_stats st;
    // the step's own sends, over the pipeline's links
    int64_t sent = tl_trainer_pp_stats(t).bytes[TL_GROUP_SEND];
    EXPECT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
    r.pp_send_bytes += tl_trainer_pp_stats(t).bytes[TL_GROUP_SEND] - sent;
    r.losses.push_back(st.loss);
    EXPECT_EQ(tl_verify_step(v, &st), TL_OK) << tl_last_error();
  }
  if (v) r.report = *tl_verify_result(v);
  tl_verify_destroy(v);
  tl_trainer_destroy(t);
  tl_worker_finalize(&w);
  return r;
}

const char* KindName(tl_model_kind kind) {
  return kind == TL_MODEL_GPT ? "gpt" : kind == TL_MODEL_LLAMA ? "llama" : "mlp";
}

std::string Describe(const tl_verify_report& v) {
  char buf[512];
  snprintf(buf, sizeof buf,
           "loss %.1e, norm %.1e, gradients %.1e, AdamW %.1e lr (%.2f of its bound), moments "
           "%.1e, %lld flip%s",
           v.loss.value, v.norm.value, v.grad.value, v.update.value, v.update_bound.value,
           v.moment.value, (long long)v.flips, v.flips == 1 ? "" : "s");
  return buf;
}

// Trains `c` on this job and checks every step against one device.
void Report(const tl_config& c, const std::string& what, const std::vector<int>& stage_layers) {
  Run par = Train(c);
  if (!stage_layers.empty()) {  // the cut is the config's, not the balanced one
    EXPECT_EQ(par.stage_layers, stage_layers[par.stage]) << what << ": stage " << par.stage;
  }
  if (WorldRank() != 0) return;
  const tl_verify_report& v = par.report;
  EXPECT_EQ(v.steps, c.train.steps) << what;
  EXPECT_TRUE(v.equal) << what << ": " << v.failure;
  printf("%-40s %s\n", what.c_str(), Describe(v).c_str());
}

std::string ReadAll(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  std::string s;
  if (!f) return s;
  char buf[65536];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  fclose(f);
  return s;
}
