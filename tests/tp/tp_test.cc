// Tensor parallelism on the ranks of this job (tp = the job's size):
//  - each rank's shard of the GPT graph (and of MLPs of 2 and 3 layers)
//    computes the single-device losses,
//    and its gradients are the slices of the single-device gradients
//    (LayerNorm gradients under sequence parallelism once summed over the
//    group, as the trainer does), within 1e-5 relative;
//  - Megatron-LM's count: 2 all-reduces forward and 2 backward per layer
//    per micro-batch, none of them under sequence parallelism (all-gather
//    and reduce-scatter instead), read from the group's counters;
//  - the parameter bytes each rank's trainer allocates equal the formula:
//    split weights / tp, LayerNorms whole, wpe and the row-parallel biases
//    whole on rank 0.
#include "tp/tp.h"

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/group_mpi.h"
#include "core/rng.h"
#include "graph/exec.h"
#include "graph/model.h"
#include "graph/op.h"
#include "kernels/backend.h"
#include "launcher/data/tokens.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"

namespace {

const int kB = 2, kT = 16;

tl_model_config Gpt(int layers) {
  tl_config c;
  tl_config_defaults(&c);
  c.model.kind = TL_MODEL_GPT;
  c.model.vocab_size = 100;  // padded to 128
  c.model.n_layers = layers, c.model.n_heads = 4, c.model.n_embd = 32, c.model.max_seq_len = kT;
  return c.model;
}

// An mlp of `layers` layers on the same vocabulary (an odd count splits
// the last layer by outputs: a vocabulary-parallel loss).
tl_model_config Mlp(int layers) {
  tl_config c;
  tl_config_defaults(&c);
  c.model.kind = TL_MODEL_MLP;
  c.model.vocab_size = 128, c.model.n_mlp_layers = layers;
  for (int i = 0; i < layers; i++) c.model.mlp_sizes[i] = 16 + 8 * i;
  c.model.mlp_sizes[layers] = 128;
  return c.model;
}

tl_group* World() {
  static tl_group* g = nullptr;
  if (!g) {
    EXPECT_EQ(tl_group_mpi_create(MPI_COMM_WORLD, "tp", &g), TL_OK);
  }
  return g;
}

struct Pass {
  std::vector<float> losses, grads;
  tl_group_stats fwd, bwd;
};

// One forward and backward of graph g (parameters `params`) on a fixed batch.
Pass RunGraph(const tl_graph* g, const tl_model_io& io, const std::vector<float>& params,
              tl_group* tp) {
  Pass p = {};
  tl_backend* be = nullptr;
  EXPECT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  size_t bytes = sizeof(float) * (size_t)(params.size() > 0 ? params.size() : 1);
  tl_buffer *pb = nullptr, *gb = nullptr;
  EXPECT_EQ(tl_buffer_create(tl_cpu(), bytes, &pb), TL_OK);
  EXPECT_EQ(tl_buffer_create(tl_cpu(), bytes, &gb), TL_OK);
  memcpy(pb->data, params.data(), sizeof(float) * params.size());
  memset(gb->data, 0, bytes);
  tl_exec_options opt = {0,       g->n_forward, nullptr, tp, nullptr, nullptr,
                         nullptr, TL_F32,       nullptr, {}, nullptr};
  tl_exec* x = nullptr;
  EXPECT_EQ(tl_exec_create_ex(g, be, pb, gb, &opt, &x), TL_OK) << tl_last_error();
  std::vector<float> u(kB * kT + 1);
  tl_rng_uniform(5, 0, 0, u.size(), 0.0f, 100.0f, u.data());
  std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
  for (int i = 0; i < kB * kT; i++) tok[i] = (int32_t)u[i], tgt[i] = (int32_t)u[i + 1];
  EXPECT_EQ(tl_exec_set_input(x, io.tokens, tok.data(), tok.size() * 4), TL_OK);
  EXPECT_EQ(tl_exec_set_input(x, io.targets, tgt.data(), tgt.size() * 4), TL_OK);
  if (tp) tl_group_stats_reset(tp);
  EXPECT_EQ(tl_exec_forward(x, 0, g->n_forward), TL_OK) << tl_last_error();
  if (tp) p.fwd = tl_group_stats_get(tp), tl_group_stats_reset(tp);
  EXPECT_EQ(tl_exec_backward(x, 0, g->n_forward, 1.0f / (kB * kT)), TL_OK) << tl_last_error();
  if (tp) p.bwd = tl_group_stats_get(tp);
  p.losses.resize(kB * kT);
  EXPECT_EQ(tl_exec_get(x, io.losses, p.losses.data(), p.losses.size() * 4), TL_OK);
  p.grads.assign((float*)gb->data, (float*)gb->data + params.size());
  tl_exec_destroy(x);
  tl_buffer_destroy(pb);
  tl_buffer_destroy(gb);
  tl_backend_destroy(be);
  return p;
}

// The whole model's pass on one device.
Pass RunWhole(const tl_model& m, const std::vector<float>& params) {
  tl_graph* g = nullptr;
  tl_model_io io;
  EXPECT_EQ(tl_model_build(&m, kB, kT, true, &g, &io), TL_OK) << tl_last_error();
  Pass p = RunGraph(g, io, params, nullptr);
  tl_graph_destroy(g);
  return p;
}

int Rank() {
  return tl_group_rank(World());
}
int Size() {
  return tl_group_size(World());
}

// This rank's shard of m (tp/tp.h), its pass on the rank's parameters.
struct Sharded {
  tl_graph* g = nullptr;
  tl_model_io io;
  tl_tp_shard sh = {};
  Sharded(const tl_model& m, bool sp) {
    EXPECT_EQ(tl_tp_build(&m, kB, kT, Size(), Rank(), sp, 1, 0, TL_RECOMPUTE_NONE, false, &g, &io,
                          &sh, nullptr),
              TL_OK)
        << tl_last_error();
  }
  ~Sharded() {
    tl_graph_destroy(g);
    tl_tp_shard_free(&sh);
  }
};

class ShardGraph : public ::testing::TestWithParam<int> {};

// 0: the gpt; n: an mlp of n layers.
TEST_P(ShardGraph, ComputesTheSingleDeviceLossesAndGradients) {
  const tl_model_config cfg = GetParam() == 0 ? Gpt(2) : Mlp(GetParam());
  tl_model full;
  ASSERT_EQ(tl_model_init(&cfg, &full), TL_OK);
  std::vector<float> whole(full.n_params);
  tl_model_init_params(&full, 0, full.n_params, whole.data());
  Pass ref = RunWhole(full, whole);
  for (bool sp : {false, true}) {
    if (sp && cfg.kind != TL_MODEL_GPT) continue;
    Sharded r(full, sp);
    const tl_tp_shard& sh = r.sh;
    std::vector<float> shard(sh.n_local), want(sh.n_local);
    tl_tp_from_full(&sh, whole.data(), shard.data());
    tl_tp_from_full(&sh, ref.grads.data(), want.data());
    Pass got = RunGraph(r.g, r.io, shard, World());
    for (size_t i = 0; i < ref.losses.size(); i++)
      ASSERT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::fabs(ref.losses[i]))
          << "sp=" << sp << " position " << i;
    // parts over the token rows (sequence parallelism's layer norms): summed
    std::vector<int64_t> offset(r.g->n_values, -1);
    for (int k = 0; k < sh.n_params; k++)
      if (sh.params[k].value >= 0) offset[sh.params[k].value] = sh.params[k].offset;
    std::vector<float> pack(tl_tp_partial_elems(&sh, offset.data()) + 1);
    tl_backend* be = nullptr;
    ASSERT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
    ASSERT_EQ(tl_tp_sync_partial(&sh, World(), be, got.grads.data(), offset.data(), pack.data()),
              TL_OK);
    tl_backend_destroy(be);
    for (int k = 0; k < sh.n_params; k++) {
      const tl_tp_param& t = sh.params[k];
      if (t.numel == 0) continue;
      const float* g = got.grads.data() + t.offset;
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < t.numel; i++) {
        diff = std::fmax(diff, std::fabs(g[i] - want[t.offset + i]));
        scale = std::fmax(scale, std::fabs(want[t.offset + i]));
      }
      EXPECT_LE(diff, 1e-5 * scale)
          << "sp=" << sp << " rank " << Rank() << " " << r.g->values[t.value].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ShardGraph, ::testing::Values(0, 2, 3));

TEST(TensorParallel, MegatronCollectiveCountsPerLayer) {
  const int calls_ar = TL_GROUP_ALL_REDUCE, calls_ag = TL_GROUP_ALL_GATHER,
            calls_rs = TL_GROUP_REDUCE_SCATTER;
  for (bool sp : {false, true}) {
    tl_group_stats fwd[2], bwd[2];
    for (int l = 2; l <= 3; l++) {
      const tl_model_config cfg = Gpt(l);
      tl_model m;
      ASSERT_EQ(tl_model_init(&cfg, &m), TL_OK);
      Sharded r(m, sp);
      std::vector<float> shard(r.sh.n_local);
      tl_tp_init_params(&r.sh, &m, 0, r.sh.n_local, shard.data());
      Pass p = RunGraph(r.g, r.io, shard, World());
      fwd[l - 2] = p.fwd, bwd[l - 2] = p.bwd;
      // beyond the layers: the embedding's sum (forward), the LM head's input
      // (backward), the cross-entropy's max and sum (forward, all-reduces)
      if (!sp) {
        EXPECT_EQ(p.fwd.calls[calls_ar], 2 * l + 3);
        EXPECT_EQ(p.bwd.calls[calls_ar], 2 * l + 1);
        EXPECT_EQ(p.fwd.calls[calls_ag] + p.fwd.calls[calls_rs], 0);
        EXPECT_EQ(p.bwd.calls[calls_ag] + p.bwd.calls[calls_rs], 0);
      } else {
        EXPECT_EQ(p.fwd.calls[calls_ar], 2);
        EXPECT_EQ(p.bwd.calls[calls_ar], 0);
        EXPECT_EQ(p.fwd.calls[calls_ag], 2 * l + 1);
        EXPECT_EQ(p.fwd.calls[calls_rs], 2 * l + 1);
        // the reduce-scatters' backward, and each gathered matmul input
        // gathered again for its weight gradient (the shard is what is kept)
        EXPECT_EQ(p.bwd.calls[calls_ag], 2 * (2 * l + 1));
        EXPECT_EQ(p.bwd.calls[calls_rs], 2 * l + 1);
      }
    }
    // what one more layer adds: Megatron's 2 + 2 all-reduces, or under
    // sequence parallelism 2 all-gathers and 2 reduce-scatters each way
    int per_layer_fwd = sp ? (int)(fwd[1].calls[calls_ag] - fwd[0].calls[calls_ag])
                           : (int)(fwd[1].calls[calls_ar] - fwd[0].calls[calls_ar]);
    int per_layer_bwd = sp ? (int)(bwd[1].calls[calls_rs] - bwd[0].calls[calls_rs])
                           : (int)(bwd[1].calls[calls_ar] - bwd[0].calls[calls_ar]);
    EXPECT_EQ(per_layer_fwd, 2) << "sp=" << sp;
    EXPECT_EQ(per_layer_bwd, 2) << "sp=" << sp;
    if (Rank() == 0)
      printf("tp=%d%s: per layer and micro-batch %d forward and %d backward %s\n", Size(),
             sp ? " sp" : "", per_layer_fwd, per_layer_bwd,
             sp ? "all-gathers / reduce-scatters (each way)" : "all-reduces");
  }
}

const char* Tokens() {
  static std::string path;
  if (path.empty()) {
    const char* dir = getenv("TEST_TMPDIR");
    path = std::string(dir ? dir : "/tmp") + "/tp_tokens.bin";
    if (Rank() == 0) {
      std::vector<uint16_t> tok(4000);
      for (size_t i = 0; i < tok.size(); i++) tok[i] = (uint16_t)(i * 7 % 100);
      EXPECT_EQ(tl_tokens_write(path.c_str(), tok.data(), (int64_t)tok.size()), TL_OK);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  return path.c_str();
}

TEST(TensorParallel, ParameterBytesPerRankFollowTheFormula) {
  tl_config c;
  tl_config_defaults(&c);
  c.model = Gpt(3);
  c.mesh.dp = 1, c.mesh.tp = Size(), c.mesh.pp = 1;
  c.train.batch_size = 2, c.train.seq_len = kT, c.train.steps = 1, c.train.sample_tokens = 0;
  snprintf(c.data.train, sizeof c.data.train, "%s", Tokens());
  c.data.val[0] = '\0';
  tl_worker w;
  ASSERT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
  tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
  // the formula, from the config alone
  int64_t L = 3, C = 32, Vp = 128, T = kT, tp = Size();
  int64_t split = Vp * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C);
  int64_t whole = L * 4 * C + 2 * C;  // ln1, ln2 (weight, bias) per layer; lnf
  int64_t once = T * C + L * 2 * C;   // wpe, attprojb, fcprojb
  int64_t want = 4 * (split / tp + whole + (w.coord[TL_AXIS_TP] == 0 ? once : 0));
  EXPECT_EQ(tl_trainer_param_bytes(t), want) << "tp rank " << w.coord[TL_AXIS_TP];
  if (Rank() == 0)
    printf("tp=%d: rank 0 holds %lld parameter bytes (the whole model: %lld)\n", Size(),
           (long long)tl_trainer_param_bytes(t), (long long)(4 * (split + whole + once)));
  tl_trainer_destroy(t);
  tl_worker_finalize(&w);
}

// A checkpoint gathers the shards (weights and both AdamW moments) into the
// whole model, so a run can continue on another mesh: 2 steps on this
// tensor-parallel job, a checkpoint, 2 more; the checkpoint resumed on one
// device takes the same 2 steps.
TEST(TensorParallel, CheckpointResumesOnOneDeviceAsTheMeshWouldContinue) {
  tl_config c;
  tl_config_defaults(&c);
  c.model = Gpt(2);
  c.mesh.dp = 1, c.mesh.tp = Size(), c.mesh.pp = 1;
  c.parallel.sequence_parallel = true;
  c.train.batch_size = 2, c.train.seq_len = kT, c.train.steps = 4, c.train.sample_tokens = 0;
  c.train.eps = 1e-3f;
  snprintf(c.data.train, sizeof c.data.train, "%s", Tokens());
  c.data.val[0] = '\0';
  std::string path =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/tp_resume.ckpt";
  tl_worker w;
  ASSERT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
  tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
  tl_trainer* t = nullptr;
  ASSERT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
  std::vector<double> losses;
  tl_step_stats st;
  for (int i = 0; i < 4; i++) {
    if (i == 2) {
      ASSERT_EQ(tl_trainer_save(t, path.c_str()), TL_OK) << tl_last_error();
    }
    ASSERT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
    losses.push_back(st.loss);
  }
  std::vector<float> mesh(tl_trainer_model(t)->n_params);
  ASSERT_EQ(tl_trainer_gather(t, mesh.data(), 0), TL_OK);
  tl_trainer_destroy(t);
  tl_worker_finalize(&w);
  if (Rank() != 0) return;
  tl_config one = c;
  one.mesh.tp = 1;
  one.parallel.sequence_parallel = false;
  snprintf(one.checkpoint.resume, sizeof one.checkpoint.resume, "%s", path.c_str());
  ASSERT_EQ(tl_trainer_create(&one, nullptr, &t), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_trainer_steps_done(t), 2);
  for (int i = 2; i < 4; i++) {
    ASSERT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
    EXPECT_NEAR(st.loss, losses[i], 1e-5 * losses[i]) << "step " << i + 1;
  }
  std::vector<float> single(mesh.size());
  ASSERT_EQ(tl_trainer_gather(t, single.data(), 0), TL_OK);
  tl_param_diff d;
  tl_model_compare(tl_trainer_model(t), mesh.data(), single.data(), &d);
  EXPECT_LE(d.worst, 1e-5) << tl_trainer_model(t)->tensors[d.worst_tensor].name;
  tl_trainer_destroy(t);
}

}  // namespace

namespace {

// A model the GPT and MLP builders know nothing of, built from the graph's
// ops alone: an embedding with a position table, a pre-norm residual MLP
// block, a final norm and an untied output layer with a bias. No tp code is
// written for it: the pass finds its splits.
struct Custom {
  static const int C = 16;
  const int V; /* vocabulary: 64 splits 2 and 4 ways, 65 neither */
  tl_graph* g = nullptr;
  tl_model_io io = {};
  std::vector<float> params;
  int64_t n = 0;
  // a parameter of `shape` drawn from the RNG (or filled with `fill`)
  int Param(const char* name, std::vector<int64_t> shape, float std, float fill = 0) {
    int v;
    EXPECT_EQ(tl_graph_param(g, name, n, (int)shape.size(), shape.data(), &v), TL_OK);
    int64_t e = tl_value_numel(&g->values[v]);
    params.resize(n + e, fill);
    if (std > 0) tl_rng_normal(77, (uint32_t)v, 0, (size_t)e, 0.0f, std, params.data() + n);
    n += e;
    return v;
  }
  int Node(int op, const char* name, std::vector<int> in, std::vector<int> attr,
           int* out = nullptr) {
    int a[TL_NODE_MAX_ATTRS] = {0};
    for (size_t i = 0; i < attr.size(); i++) a[i] = attr[i];
    int o[TL_NODE_MAX_IO];
    EXPECT_EQ(tl_graph_node(g, op, name, (int)in.size(), in.data(), a, TL_NODE_MAX_ATTRS, o), TL_OK)
        << tl_last_error();
    if (out)
      for (int k = 0; k < 3; k++) out[k] = o[k];
    return o[0];
  }
  explicit Custom(int vocab) : V(vocab) {
    EXPECT_EQ(tl_graph_create(&g), TL_OK);
    int64_t ts[2] = {kB, kT}, ns = kB * kT;
    EXPECT_EQ(tl_graph_input(g, "tokens", TL_I32, 2, ts, &io.tokens), TL_OK);
    EXPECT_EQ(tl_graph_input(g, "targets", TL_I32, 1, &ns, &io.targets), TL_OK);
    int emb = Param("emb", {V, C}, 0.1f), pos = Param("pos", {kT, C}, 0.1f);
    int x = Node(TL_OP_EMBEDDING, "embed", {io.tokens, emb, pos}, {0});
    int n1[3];
    Node(TL_OP_LAYERNORM, "norm1", {x, Param("g1", {C}, 0, 1), Param("c1", {C}, 0)}, {}, n1);
    int u = Node(TL_OP_MATMUL, "up",
                 {n1[0], Param("w_up", {4 * C, C}, 0.2f), Param("b_up", {4 * C}, 0.05f)}, {0, 1});
    u = Node(TL_OP_GELU, "act", {u}, {});
    int d = Node(TL_OP_MATMUL, "down",
                 {u, Param("w_down", {C, 4 * C}, 0.1f), Param("b_down", {C}, 0.05f)}, {0, 1});
    x = Node(TL_OP_ADD, "residual", {x, d}, {});
    int n2[3];
    Node(TL_OP_LAYERNORM, "norm2", {x, Param("g2", {C}, 0, 1), Param("c2", {C}, 0)}, {}, n2);
    io.logits = Node(TL_OP_MATMUL, "out",
                     {n2[0], Param("w_out", {V, C}, 0.2f), Param("b_out", {V}, 0.05f)}, {0, 1});
    io.losses = Node(TL_OP_CROSSENTROPY, "loss", {io.logits, io.targets}, {V});
    EXPECT_EQ(tl_graph_set_loss(g, io.losses), TL_OK);
  }
  ~Custom() { tl_graph_destroy(g); }
};

// Trains graph g (forward only; differentiated here, sharded when sh) for
// `steps` AdamW steps from `params`: the losses of each step, the final
// parameters.
std::vector<double> TrainGraph(tl_graph* g, const tl_model_io& io, std::vector<float>* params,
                               const tl_tp_shard* sh, int steps, int vocab) {
  std::vector<double> losses;
  tl_backend* be = nullptr;
  EXPECT_EQ(tl_backend_create(tl_cpu(), &be), TL_OK);
  size_t bytes = sizeof(float) * params->size();
  tl_buffer *pb, *gb, *m, *v;
  for (tl_buffer** b : {&pb, &gb, &m, &v}) {
    EXPECT_EQ(tl_buffer_create(tl_cpu(), bytes, b), TL_OK);
    memset((*b)->data, 0, bytes);
  }
  memcpy(pb->data, params->data(), bytes);
  tl_exec_options opt = {0,       g->n_forward, nullptr, sh ? World() : nullptr,
                         nullptr, nullptr,      nullptr, TL_F32,
                         nullptr, {},           nullptr};
  tl_exec* x = nullptr;
  EXPECT_EQ(tl_exec_create_ex(g, be, pb, gb, &opt, &x), TL_OK) << tl_last_error();
  std::vector<int64_t> offset(g->n_values, -1);
  for (int k = 0; sh && k < sh->n_params; k++)
    if (sh->params[k].value >= 0) offset[sh->params[k].value] = sh->params[k].offset;
  std::vector<float> pack(sh ? tl_tp_partial_elems(sh, offset.data()) + 1 : 1);
  for (int s = 0; s < steps; s++) {
    std::vector<float> u(kB * kT + 1);
    tl_rng_uniform(100 + s, 0, 0, u.size(), 0.0f, (float)vocab, u.data());
    std::vector<int32_t> tok(kB * kT), tgt(kB * kT);
    for (int i = 0; i < kB * kT; i++) tok[i] = (int32_t)u[i], tgt[i] = (int32_t)u[i + 1];
    memset(gb->data, 0, bytes);
    EXPECT_EQ(tl_exec_set_input(x, io.tokens, tok.data(), tok.size() * 4), TL_OK);
    EXPECT_EQ(tl_exec_set_input(x, io.targets, tgt.data(), tgt.size() * 4), TL_OK);
    EXPECT_EQ(tl_exec_forward(x, 0, g->n_forward), TL_OK) << tl_last_error();
    EXPECT_EQ(tl_exec_backward(x, 0, g->n_forward, 1.0f / (kB * kT)), TL_OK) << tl_last_error();
    if (sh) {
      EXPECT_EQ(tl_tp_sync_partial(sh, World(), be, (float*)gb->data, offset.data(), pack.data()),
                TL_OK);
    }
    std::vector<float> l(kB * kT);
    EXPECT_EQ(tl_exec_get(x, io.losses, l.data(), l.size() * 4), TL_OK);
    double sum = 0;
    for (float e : l) sum += e;
    losses.push_back(sum / l.size());
    EXPECT_EQ(be->ops->adamw(be->ctx, (float*)pb->data, (float*)gb->data, 1.0f, (float*)m->data,
                             (float*)v->data, (int64_t)params->size(), 1e-2f, 0.9f, 0.95f, 1e-3f,
                             0.0f, s + 1),
              TL_OK);
  }
  memcpy(params->data(), pb->data, bytes);
  tl_exec_destroy(x);
  for (tl_buffer* b : {pb, gb, m, v}) tl_buffer_destroy(b);
  tl_backend_destroy(be);
  return losses;
}

}  // namespace

// The one law for a model built from ops alone: its tensor-parallel run on
// this job (with and without sequence parallelism) trains as one device
// does, step by step, to the same parameters. With a vocabulary of 64 it is
// split (its linear layers column- then row-parallel, its loss
// vocabulary-parallel), not merely run whole on every rank; with 65, which
// neither 2 nor 4 divides, the embedding, the output layer and the loss run
// whole on every rank — under sequence parallelism on token rows sliced
// from the whole and gathered back — and the run is still the same run.
TEST(TensorParallel, AModelBuiltFromOpsAloneTrainsAsOneDeviceDoes) {
  const int steps = 4;
  for (int vocab : {64, 65}) {
    Custom ref(vocab);
    std::vector<float> whole = ref.params;
    tl_graph* one = nullptr;
    tl_tp_shard one_sh;
    ASSERT_EQ(tl_tp_shard_graph(ref.g, 1, 0, false, &one, &one_sh), TL_OK);
    ASSERT_EQ(tl_tp_backward(one, &one_sh), TL_OK);
    tl_model_io one_io = ref.io;
    one_io.tokens = one_sh.value_map[ref.io.tokens];
    one_io.targets = one_sh.value_map[ref.io.targets];
    one_io.losses = one_sh.value_map[ref.io.losses];
    std::vector<double> want = TrainGraph(one, one_io, &whole, nullptr, steps, vocab);
    tl_graph_destroy(one);
    tl_tp_shard_free(&one_sh);
    for (bool sp : {false, true}) {
      Custom c(vocab);
      tl_graph* g = nullptr;
      tl_tp_shard sh;
      ASSERT_EQ(tl_tp_shard_graph(c.g, Size(), Rank(), sp, &g, &sh), TL_OK) << tl_last_error();
      ASSERT_EQ(tl_tp_backward(g, &sh), TL_OK) << tl_last_error();
      const bool splits = vocab % Size() == 0;
      EXPECT_EQ(sh.n_linear, 3);
      EXPECT_EQ(sh.n_linear_split, splits ? 3 : 2) << "the up and down layers always split";
      EXPECT_EQ(sh.loss_split, splits);
      if (splits) {
        EXPECT_LT(sh.n_local * 3, sh.n_full * 2) << "a shard, not a copy";
      }
      tl_model_io io = c.io;
      io.tokens = sh.value_map[c.io.tokens], io.targets = sh.value_map[c.io.targets];
      io.losses = sh.value_map[c.io.losses];
      std::vector<float> local(sh.n_local), start = c.params;
      tl_tp_from_full(&sh, start.data(), local.data());
      std::vector<double> got = TrainGraph(g, io, &local, &sh, steps, vocab);
      for (int s = 0; s < steps; s++)
        EXPECT_NEAR(got[s], want[s], 1e-5 * std::fabs(want[s]))
            << "vocab " << vocab << (sp ? " sp" : "") << " step " << s + 1;
      std::vector<float> expect(sh.n_local);
      tl_tp_from_full(&sh, whole.data(), expect.data());
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < sh.n_local; i++) {
        worst = std::fmax(worst, std::fabs(local[i] - expect[i]));
        scale = std::fmax(scale, std::fabs(expect[i]));
      }
      EXPECT_LE(worst, 1e-5 * scale)
          << "vocab " << vocab << (sp ? " sp" : "") << ": parameters after " << steps << " steps";
      if (Rank() == 0)
        printf(
            "a model of ops alone, vocabulary %d, tp=%d%s: %d of 3 linear layers split, losses "
            "equal, parameters %.1e apart\n",
            vocab, Size(), sp ? " sp" : "", sh.n_linear_split, worst / scale);
      tl_graph_destroy(g);
      tl_tp_shard_free(&sh);
    }
  }
}
