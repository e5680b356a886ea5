// cost_fixture.h — what the cost model's tests price: a few GPT shapes
// (Table 1's smallest and largest, GPT-3-like, GPT-2 124M), DGX A100 nodes
// as a cluster built in code, and a cost model of a shape.
#ifndef TL_TESTS_PLANNER_COST_FIXTURE_H
#define TL_TESTS_PLANNER_COST_FIXTURE_H

#include <gtest/gtest.h>

extern "C" {
#include "core/config.h"
#include "planner/cost.h"
}

namespace {

struct Shape {
  const char* name;
  int l, a, h, V, s;
};

// GPT-3-like and the smallest and largest Table 1 rows.
const Shape kShapes[] = {
    {"table1_1.7B", 24, 24, 2304, 51200, 2048},
    {"table1_39.1B", 48, 64, 8192, 51200, 2048},
    {"table1_1008B", 128, 160, 25600, 51200, 2048},
    {"gpt2_124M", 12, 12, 768, 50257, 1024},
};

// `nodes` DGX A100 nodes (8 GPUs, NVLink inside, InfiniBand between), as
// the tests below price them; no memory reserve.
tl_cluster A100Nodes(int nodes) {
  tl_cluster c = {};
  c.device = TL_DEVICE_CUDA, c.nodes = nodes, c.devices_per_node = 8;
  c.device_memory_bytes = 80e9, c.reserve_bytes = 0;
  c.peak_bf16 = 312e12, c.peak_fp32 = 19.5e12, c.efficiency = 0.5;
  c.intra = {300e9, 5e-6, 0, {}, {}, 0}, c.inter = {25e9, 1e-5, 0, {}, {}, 0};
  return c;
}

// A GEMM table of one efficiency at every (m, n, k) from 16 to 65536: the
// products priced by the table, as a flat efficiency would price them.
inline void FlatGemmTable(tl_cluster* c, double eff) {
  tl_gemm_table& t = c->gemm;
  t.n_m = t.n_n = t.n_k = 2;
  t.m[0] = t.n[0] = t.k[0] = 16, t.m[1] = t.n[1] = t.k[1] = 65536;
  for (int i = 0; i < 8; i++) t.eff[i] = eff;
}

tl_cost_model Build(const Shape& x) {
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.model.n_layers = x.l;
  cfg.model.n_heads = x.a;
  cfg.model.n_embd = x.h;
  cfg.model.vocab_size = x.V;
  cfg.model.max_seq_len = x.s;
  tl_cost_model cm;
  EXPECT_EQ(tl_cost_model_build(&cfg.model, x.s, &cm), TL_OK) << tl_last_error();
  return cm;
}

// A dp x tp x pp split under 1F1B at micro-batch mb, m micro-batches (no
// ZeRO, no recomputation), for tl_cost_evaluate to price.
tl_plan Split1F1B(int dp, int tp, int pp, int mb, int m) {
  tl_plan p = {};
  p.dp = dp, p.tp = tp, p.pp = pp, p.micro_batch = mb, p.n_micro = m;
  p.schedule = TL_SCHEDULE_1F1B;
  return p;
}

}  // namespace

#endif
