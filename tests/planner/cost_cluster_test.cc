// How a cluster spec's figures enter the cost model's price: each
// collective's messages and bandwidth (the backend's algorithm, the links a
// group spans, each collective's share of them), the attention kernels' and
// the matrix products' efficiencies (one figure, or tables by shape), and the
// memory reserve with the allocator's overhead.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

extern "C" {
#include "planner/cluster.h"
#include "planner/cost.h"
}

#include "tests/planner/cost_fixture.h"

// The reserve: the spec's bytes plus its allocator overhead of the tensors
// (state and activations).
TEST(CostModel, TheReserveAddsTheAllocatorsOverheadOfTheTensors) {
  tl_cost_model cm = Build(kShapes[1]);
  tl_cluster c = A100Nodes(64);
  tl_plan p = Split1F1B(32, 8, 2, 1, 48);
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  EXPECT_EQ(p.mem_reserve, 0);
  c.reserve_bytes = 2e9, c.allocator_overhead = 0.1;
  tl_plan q = p;
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &q);
  EXPECT_EQ(q.mem_state, p.mem_state);
  EXPECT_EQ(q.mem_act, p.mem_act);
  EXPECT_DOUBLE_EQ(q.mem_reserve, 2e9 + 0.1 * (p.mem_state + p.mem_act));
  EXPECT_DOUBLE_EQ(q.mem_total, 2e9 + 1.1 * (p.mem_state + p.mem_act));
  EXPECT_EQ(q.t_step, p.t_step);
}

// Each collective at its own share of the links' bandwidth (a spec's
// collective_bandwidth, which --calibrate measures): ZeRO-1's reduce-scatter
// and all-gather and the pipeline's sends move their bytes at their shares;
// the all-reduce at the links' own; latencies unchanged.
TEST(CostModel, EachCollectiveRunsAtItsOwnShareOfTheLink) {
  tl_cluster c = A100Nodes(4);
  const tl_link link = {100e9, 1e-5, 0, {}, {}, 0};
  const double B = 1e9;
  EXPECT_DOUBLE_EQ(tl_cost_all_gather(&c, B, 8, &link), 7.0 / 8 * B / 100e9 + 7 * 1e-5);
  EXPECT_DOUBLE_EQ(tl_cost_reduce_scatter(&c, B, 8, &link), 7.0 / 8 * B / 100e9 + 7 * 1e-5);
  EXPECT_DOUBLE_EQ(tl_cost_send(&c, B, &link), B / 100e9 + 1e-5);
  c.bw_all_gather = 2, c.bw_reduce_scatter = 0.5, c.bw_send_recv = 4;
  EXPECT_DOUBLE_EQ(tl_cost_all_gather(&c, B, 8, &link), 7.0 / 8 * B / 200e9 + 7 * 1e-5);
  EXPECT_DOUBLE_EQ(tl_cost_reduce_scatter(&c, B, 8, &link), 7.0 / 8 * B / 50e9 + 7 * 1e-5);
  EXPECT_DOUBLE_EQ(tl_cost_send(&c, B, &link), B / 400e9 + 1e-5);
  EXPECT_DOUBLE_EQ(tl_cost_all_reduce(&c, B, 8, &link), 2 * 7.0 / 8 * B / 100e9 + 14 * 1e-5);

  // in a plan: ZeRO-1's data-parallel time is its reduce-scatter and its
  // all-gather, the pipeline's its sends
  tl_cost_model cm = Build(kShapes[1]);
  tl_cluster a = A100Nodes(8);
  tl_plan p = Split1F1B(4, 8, 2, 1, 8);
  p.zero = 1;
  tl_cost_evaluate(&cm, &a, TL_BF16, nullptr, &p);
  tl_cluster b = a;
  b.bw_all_gather = 2, b.bw_reduce_scatter = 0.5, b.bw_send_recv = 4;
  tl_plan q = p;
  tl_cost_evaluate(&cm, &b, TL_BF16, nullptr, &q);
  // at share 1: the reduce-scatter X of bandwidth (fp32 gradients), the
  // all-gather X / 2 (bf16 training gathers the bf16 working parameters),
  // and 3 messages each (dp 4 over tp 8: one member a node)
  const tl_link dp = tl_cost_group_link(&a, 4, 8);
  const double X = (p.t_dp - 6 * dp.latency) / 1.5;
  EXPECT_NEAR(q.t_dp, X / 0.5 + X / 2 / 2 + 6 * dp.latency, 1e-9 * q.t_dp);
  EXPECT_GT(q.t_dp, p.t_dp);  // the reduce-scatter's half share outweighs the gather's double
  // parallel.grad_reduce "bf16" halves the reduce-scatter's bytes too
  tl_plan h = p;
  h.grad_reduce = TL_BF16;
  tl_cost_evaluate(&cm, &a, TL_BF16, nullptr, &h);
  EXPECT_NEAR(h.t_dp, X / 2 + X / 2 + 6 * dp.latency, 1e-9 * h.t_dp);
  // fp32 training gathers fp32 parameters: X each
  tl_plan f = p;
  tl_cost_evaluate(&cm, &a, TL_F32, nullptr, &f);
  EXPECT_NEAR(f.t_dp, X + X + 6 * dp.latency, 1e-9 * f.t_dp);
  // the pipeline's two sends a micro-batch, over the network (dp x tp fills
  // the nodes): their bandwidth term a quarter
  const double Y = (p.t_pp - p.t_tied) / (2 * p.n_micro) - a.inter.latency;
  EXPECT_NEAR(q.t_pp - q.t_tied, 2 * p.n_micro * (Y / 4 + a.inter.latency), 1e-9 * p.t_pp);
  EXPECT_EQ(q.t_compute, p.t_compute);
  EXPECT_EQ(q.t_tp, p.t_tp);  // the tensor-parallel all-reduces: the links' own
  // with sequence parallelism they are reduce-scatters and all-gathers, at
  // those shares (here the reduce-scatter's half outweighs the rest)
  tl_plan sp = p;
  sp.sequence_parallel = true, sp.recompute = TL_RECOMPUTE_SELECTIVE;
  tl_plan sq = sp;
  tl_cost_evaluate(&cm, &a, TL_BF16, nullptr, &sp);
  tl_cost_evaluate(&cm, &b, TL_BF16, nullptr, &sq);
  EXPECT_GT(sq.t_tp, sp.t_tp);
}

// An all-reduce's latency term is the message count of the algorithm the
// backend runs: NCCL's ring on GPUs (2(n-1)), MPICH's recursive halving and
// doubling on CPUs (2 log2 n); the bandwidth term is the ring's on both.
TEST(CostModel, AllReduceLatencyCountsTheBackendsMessages) {
  tl_cluster gpu = {}, cpu = {};
  gpu.device = TL_DEVICE_CUDA, cpu.device = TL_DEVICE_CPU;
  const struct tl_link zero_bytes = {1e30, 1e-3, 0, {}, {}, 0}, no_latency = {1e9, 0, 0, {}, {}, 0};
  for (int n : {2, 4, 8, 16}) {
    EXPECT_NEAR(tl_cost_all_reduce(&gpu, 4, n, &zero_bytes), 2e-3 * (n - 1), 1e-12) << n;
    EXPECT_NEAR(tl_cost_all_reduce(&cpu, 4, n, &zero_bytes), 2e-3 * std::log2(n), 1e-12) << n;
    double bw = 2.0 * (n - 1) / n * 1e6 / 1e9;
    EXPECT_DOUBLE_EQ(tl_cost_all_reduce(&gpu, 1e6, n, &no_latency), bw);
    EXPECT_DOUBLE_EQ(tl_cost_all_reduce(&cpu, 1e6, n, &no_latency), bw);
  }
  EXPECT_NEAR(tl_cost_all_reduce(&cpu, 4, 3, &zero_bytes), 2e-3 * 2, 1e-12);  // ceil(log2 3)
  EXPECT_EQ(tl_cost_all_reduce(&cpu, 1e6, 1, &no_latency), 0);
  // an all-gather: half an all-reduce's bandwidth and half its messages
  for (int n : {2, 4, 8}) {
    EXPECT_NEAR(tl_cost_all_gather(&gpu, 4, n, &zero_bytes), 1e-3 * (n - 1), 1e-12) << n;
    EXPECT_NEAR(tl_cost_all_gather(&cpu, 4, n, &zero_bytes), 1e-3 * std::log2(n), 1e-12) << n;
    EXPECT_DOUBLE_EQ(2 * tl_cost_all_gather(&gpu, 1e6, n, &no_latency),
                     tl_cost_all_reduce(&gpu, 1e6, n, &no_latency));
  }
}

// A collective whose group spans nodes crosses them through each member's
// own network card (rail-optimised nodes, one card per GPU), so it moves
// bytes at k cards' rate, k the group's members on one node, never above the
// node's own links; a group inside one node stays on them.
TEST(CostModel, CollectivesAcrossNodesUseEveryCardOfTheGroup) {
  tl_cluster c = A100Nodes(4);
  struct {
    int n, stride;
    double bandwidth, latency;
  } cases[] = {
      {8, 1, 300e9, 5e-6},   // tp 8: one node
      {4, 2, 300e9, 5e-6},   // dp 4 over tp 2: one node
      {16, 1, 200e9, 1e-5},  // tp 16: two nodes, 8 cards each
      {32, 1, 200e9, 1e-5},  // dp 32 at tp 1: every card of 4 nodes
      {8, 4, 50e9, 1e-5},    // dp 8 over tp 4: 2 members a node
      {4, 8, 25e9, 1e-5},    // dp 4 over tp 8: one member a node, one card
      {2, 16, 25e9, 1e-5},   // dp 2 over tp 16
  };
  for (const auto& x : cases) {
    struct tl_link l = tl_cost_group_link(&c, x.n, x.stride);
    EXPECT_DOUBLE_EQ(l.bandwidth, x.bandwidth) << x.n << " ranks " << x.stride << " apart";
    EXPECT_DOUBLE_EQ(l.latency, x.latency) << x.n << " ranks " << x.stride << " apart";
  }
  c.intra.bandwidth = 100e9;  // cards faster than the node's own links
  EXPECT_DOUBLE_EQ(tl_cost_group_link(&c, 32, 1).bandwidth, 100e9);

  // a plan's gradient all-reduce runs on that link: dp 32 at tp 1 on 4 nodes
  // at 8 cards' rate, dp 4 at tp 8 at one card's
  tl_cost_model cm = Build(kShapes[1]);
  c = A100Nodes(4);
  for (int tp : {1, 8}) {
    tl_plan p = {};
    p.dp = 32 / tp, p.tp = tp, p.pp = 1, p.micro_batch = 1, p.n_micro = 1;
    p.schedule = TL_SCHEDULE_1F1B, p.recompute = TL_RECOMPUTE_NONE;
    tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
    struct tl_link l = tl_cost_group_link(&c, p.dp, tp);
    EXPECT_DOUBLE_EQ(l.bandwidth, tp == 1 ? 200e9 : 25e9);
    // fp32 gradients of the rank's parameters, all-reduced after the backward
    const tl_cost_shard* sh = &cm.shards[0];
    for (int i = 0; i < cm.n_shards; i++)
      if (cm.shards[i].tp == tp && !cm.shards[i].sp && cm.shards[i].recompute == 0 &&
          !cm.shards[i].split)
        sh = &cm.shards[i];
    const tl_cost_stage_shape& st = sh->stage[TL_COST_STAGE_EMBED | TL_COST_STAGE_HEAD];
    double params = st.params + (cm.n_layers - 1) * st.params_layer;
    EXPECT_NEAR(p.t_dp, tl_cost_all_reduce(&c, params * 4.0, p.dp, &l), 1e-12) << tp;
  }
}

// With the link's bandwidth by size, the data-parallel collectives move at
// the rate of the buffers they send: a bucket's (parallel.bucket_mb of fp32
// elements), or the whole gradient's without buckets, for every ZeRO stage
// (ZeRO-3's units each at their own size's, or a bucket's). In fp32, where
// ZeRO 1 and 2 gather parameters in buffers of the gradients' size.
TEST(CostModel, DataParallelBuffersMoveAtTheirOwnSizesRate) {
  tl_cost_model cm = Build(kShapes[1]);
  tl_cluster curve = A100Nodes(1);
  curve.intra.n_sizes = 3;
  const double bytes[] = {1 << 20, 64 << 20, 4096.0 * (1 << 20)}, rate[] = {50e9, 200e9, 300e9};
  for (int i = 0; i < 3; i++)
    curve.intra.size_bytes[i] = bytes[i], curve.intra.size_bandwidth[i] = rate[i];
  for (int zero = 0; zero <= 3; zero++)
    for (double mb : {0.0, 4.0, 25.0}) {
      tl_plan p = {};
      p.dp = 8, p.tp = 1, p.pp = 1, p.micro_batch = 1, p.n_micro = 2, p.zero = zero;
      p.schedule = TL_SCHEDULE_1F1B, p.recompute = TL_RECOMPUTE_NONE, p.dp_bucket_mb = mb;
      tl_plan flat_p = p;
      tl_cost_evaluate(&cm, &curve, TL_F32, nullptr, &p);
      // the same plan on a flat link at the buffer's rate
      const tl_cost_shard& sh = cm.shards[0];
      const tl_cost_stage_shape& st = sh.stage[TL_COST_STAGE_EMBED | TL_COST_STAGE_HEAD];
      const double grads = st.params + (cm.n_layers - 1) * st.params_layer;
      const double buffer =
          mb > 0 ? grads * 4.0 / std::ceil(grads * 4.0 / (mb * (1 << 20))) : grads * 4.0;
      tl_cluster flat = A100Nodes(1);
      flat.intra.bandwidth = tl_link_bandwidth_at(&curve.intra, buffer);
      if (zero == 3) {  // units of their own sizes: between the curve's ends
        tl_plan slow = flat_p, fast = flat_p;
        flat.intra.bandwidth = 50e9;
        tl_cost_evaluate(&cm, &flat, TL_F32, nullptr, &slow);
        flat.intra.bandwidth = 300e9;
        tl_cost_evaluate(&cm, &flat, TL_F32, nullptr, &fast);
        EXPECT_LT(p.c_dp, slow.c_dp) << mb;
        EXPECT_GT(p.c_dp, fast.c_dp) << mb;
        continue;
      }
      tl_cost_evaluate(&cm, &flat, TL_F32, nullptr, &flat_p);
      EXPECT_NEAR(p.c_dp, flat_p.c_dp, 1e-9 * flat_p.c_dp) << "ZeRO-" << zero << ", " << mb;
      EXPECT_NEAR(p.t_dp, flat_p.t_dp, 1e-9 * flat_p.t_dp + 1e-15);
      EXPECT_GT(flat.intra.bandwidth, 50e9 - 1);
      EXPECT_LT(flat.intra.bandwidth, 300e9 + 1);
    }
}

// The attention kernels' FLOPs (the graph's TL_OP_ATTENTION nodes: 2 s^2 h
// forward for the causal half, 2.5 times that backward) run at the cluster's
// attention_efficiency, the rest at compute_efficiency; without the key both
// are one rate.
TEST(CostModel, AttentionKernelsRunAtTheirOwnRate) {
  const Shape& x = kShapes[1];
  tl_cost_model cm = Build(x);
  double s = x.s, h = x.h;
  EXPECT_NEAR(cm.shards[0].layer_attn_fwd_flops / (2 * s * s * h), 1.0, 1e-12);
  EXPECT_NEAR(cm.shards[0].layer_attn_flops / (7 * s * s * h), 1.0, 1e-12);
  EXPECT_EQ(cm.shards[0].layer_attn_again_flops, 0);
  // full recomputation runs the attention forward again
  EXPECT_NEAR(cm.shards[TL_RECOMPUTE_FULL].layer_attn_again_flops / (2 * s * s * h), 1.0, 1e-12);

  tl_cluster c = A100Nodes(1);
  tl_plan p = {};
  p.dp = 1, p.tp = 1, p.pp = 1, p.micro_batch = 2, p.n_micro = 3;
  p.schedule = TL_SCHEDULE_1F1B, p.recompute = TL_RECOMPUTE_NONE;
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  const tl_cost_shard& sh = cm.shards[0];
  double all = x.l * sh.layer_flops + sh.embed_flops + sh.head_flops;
  EXPECT_NEAR(p.t_compute / (3 * 2 * all / (312e12 * 0.5)), 1.0, 1e-12);
  c.attention_efficiency = 0.1;
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  double attn = x.l * sh.layer_attn_flops;
  EXPECT_NEAR(p.t_compute / (3 * 2 * ((all - attn) / (312e12 * 0.5) + attn / (312e12 * 0.1))), 1.0,
              1e-12);
  // a table by head dimension and sequence length prices the model's own
  // shape (head dimension 128, 2048 tokens) in place of the one figure:
  // 0.2 at head dimension 64, 0.3 at 256, so 0.25 at 128 (halfway in log2)
  c.attention.n_m = 2, c.attention.n_n = 1, c.attention.n_k = 1;
  c.attention.m[0] = 64, c.attention.m[1] = 256, c.attention.n[0] = 2048, c.attention.k[0] = 1;
  c.attention.eff[0] = 0.2, c.attention.eff[1] = 0.3;
  ASSERT_EQ(x.h / x.a, 128);
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  EXPECT_NEAR(p.t_compute / (3 * 2 * ((all - attn) / (312e12 * 0.5) + attn / (312e12 * 0.25))), 1.0,
              1e-12);
}

// With a GEMM table every product is priced at its shape's efficiency at
// the plan's micro-batch: a table of one efficiency everywhere prices as a
// flat efficiency does, and a table that halves one shape's rate adds
// exactly that product's time.
TEST(CostModel, AGemmTablePricesEachProductByItsShape) {
  const Shape& x = kShapes[3];
  tl_cost_model cm = Build(x);
  tl_cluster flat = A100Nodes(1);
  flat.efficiency = 0.5;
  tl_cluster table = flat;
  FlatGemmTable(&table, 0.5);
  tl_gemm_table& t = table.gemm;
  tl_plan p = {};
  p.dp = 1, p.tp = 2, p.pp = 2, p.micro_batch = 2, p.n_micro = 4;
  p.schedule = TL_SCHEDULE_1F1B, p.recompute = TL_RECOMPUTE_SELECTIVE;
  tl_plan q = p;
  tl_cost_evaluate(&cm, &flat, TL_BF16, nullptr, &p);
  tl_cost_evaluate(&cm, &table, TL_BF16, nullptr, &q);
  EXPECT_NEAR(q.t_compute / p.t_compute, 1.0, 1e-12);
  EXPECT_NEAR(q.t_step / p.t_step, 1.0, 1e-12);

  // efficiency 0.25 at m = 65536, 0.5 at m = 16, whatever n and k: one
  // product priced by hand
  for (int i = 0; i < 8; i++) t.eff[i] = (i & 4) ? 0.25 : 0.5;
  tl_cost_gemm e = {2048, 768, 768, 1, TL_COST_GEMM_FWD, 1};
  // m = 2048 at micro-batch 4 is 8192: log2(8192/16)/log2(65536/16) = 9/12
  double eff = 0.5 + (0.25 - 0.5) * 9.0 / 12.0;
  double want = 2.0 * 8192 * 768 * 768 / (312e12 * eff) / 4;
  EXPECT_NEAR(tl_cost_gemm_seconds(&table, 312e12, &e, 1, 4, false) / want, 1.0, 1e-12);
  // a whole forward again runs a forward product twice, a copy not at all
  EXPECT_NEAR(tl_cost_gemm_seconds(&table, 312e12, &e, 1, 4, true) / want, 2.0, 1e-12);
  e.pass = TL_COST_GEMM_AGAIN;
  EXPECT_EQ(tl_cost_gemm_seconds(&table, 312e12, &e, 1, 4, true), 0);
  // and a plan's compute is the sum over its products: slower than flat
  tl_cost_evaluate(&cm, &table, TL_BF16, nullptr, &q);
  EXPECT_GT(q.t_compute, p.t_compute * 1.01);
}

// Attention and the element-wise kernels compute in fp32 whatever the
// training precision (graph/graph.h), so an fp32 plan prices them at the
// same seconds as a bf16 one: against the spec's bf16 peak, of which its
// fractions are. Only the matrix products run at the fp32 peak.
TEST(CostModel, AttentionAndElementwiseRunAtOneRateInEitherPrecision) {
  const Shape& x = kShapes[1];
  tl_cost_model cm = Build(x);
  tl_cluster c = A100Nodes(1);
  c.attention_efficiency = 0.1;
  // a GEMM table: the products by shape, the rest element-wise alone
  FlatGemmTable(&c, 0.5);
  tl_plan p = {};
  p.dp = 1, p.tp = 1, p.pp = 1, p.micro_batch = 2, p.n_micro = 3;
  p.schedule = TL_SCHEDULE_1F1B, p.recompute = TL_RECOMPUTE_NONE;
  tl_plan q = p;
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  tl_cost_evaluate(&cm, &c, TL_F32, nullptr, &q);
  const tl_cost_shard& sh = cm.shards[0];
  const double all = x.l * sh.layer_flops + sh.embed_flops + sh.head_flops;
  const double attn = x.l * sh.layer_attn_flops;
  double gemm = x.l * tl_cost_gemm_flops(sh.layer_gemms.g, sh.layer_gemms.n, false) +
                tl_cost_gemm_flops(sh.embed_gemms.g, sh.embed_gemms.n, false) +
                tl_cost_gemm_flops(sh.head_gemms.g, sh.head_gemms.n, false);
  ASSERT_GT(gemm, 0);
  // the products at 0.5 of their dtype's peak, attention at 0.1 and the
  // rest at 0.5 of the bf16 peak in both
  auto priced = [&](double gemm_peak) {
    return 3 * 2 *
           (gemm / (gemm_peak * 0.5) + attn / (312e12 * 0.1) +
            (all - attn - gemm) / (312e12 * 0.5));
  };
  EXPECT_NEAR(p.t_compute / priced(312e12), 1.0, 1e-9);
  EXPECT_NEAR(q.t_compute / priced(19.5e12), 1.0, 1e-9);
  // without a bf16 peak (a CPU spec) everything is against the fp32 one
  c.peak_bf16 = 0;
  tl_cost_evaluate(&cm, &c, TL_F32, nullptr, &q);
  EXPECT_NEAR(q.t_compute / (3 * 2 *
                             (gemm / (19.5e12 * 0.5) + attn / (19.5e12 * 0.1) +
                              (all - attn - gemm) / (19.5e12 * 0.5))),
              1.0, 1e-9);
}

// Ranks sharing a node's CPU cores (cores_per_node): the spec's rates are
// each rank's while all compute. A plan on all the rated ranks with no
// bubble is priced as before; on fewer ranks each gets a larger share; a
// pipeline's bubble lends the idle ranks' shares to the busy ones: 8 ranks
// on 2 cores, an 8-stage GPipe of one micro-batch has one stage computing
// at a time, on a whole core, 4 times the shared rate, so its step is 2
// micro-batch times where idle ranks keeping their shares price it at 8;
// and past a few rounds each micro-batch more adds one micro-batch time
// (the steady state, every rank computing; the occupancy extrapolated
// there is the simulation's).
TEST(CostModel, RanksSharingCoresLendTheirShareWhenIdle) {
  tl_cost_model cm = Build(kShapes[3]);
  tl_cluster own = {};
  own.device = TL_DEVICE_CPU, own.nodes = 1, own.devices_per_node = 8;
  own.rated_ranks_per_node = 8;
  own.device_memory_bytes = 1e15, own.peak_fp32 = 30e9, own.efficiency = 0.5;
  own.intra = own.inter = {1e9, 5e-5, 0, {}, {}, 0};
  tl_cluster shared = own;
  shared.cores_per_node = 2;
  auto priced = [&](const tl_cluster& c, tl_plan p) {
    tl_cost_evaluate(&cm, &c, TL_F32, nullptr, &p);
    return p;
  };
  // every rank computing: the rated share, the same price
  tl_plan dp8 = priced(shared, Split1F1B(8, 1, 1, 1, 4));
  EXPECT_DOUBLE_EQ(dp8.t_step, priced(own, Split1F1B(8, 1, 1, 1, 4)).t_step);
  // 2 ranks on the 2 cores: a core each, 4 times the rate
  tl_plan a = priced(own, Split1F1B(2, 1, 1, 1, 4)), b = priced(shared, Split1F1B(2, 1, 1, 1, 4));
  EXPECT_DOUBLE_EQ(b.t_compute, a.t_compute / 4);
  EXPECT_DOUBLE_EQ(b.t_tp + b.t_pp + b.t_bubble, 0);
  // one rank: both cores (the trainer's 2 threads), 8 times
  EXPECT_DOUBLE_EQ(priced(shared, Split1F1B(1, 1, 1, 1, 4)).t_compute,
                   priced(own, Split1F1B(1, 1, 1, 1, 4)).t_compute / 8);

  tl_plan g = Split1F1B(1, 1, 8, 1, 1);
  g.schedule = TL_SCHEDULE_GPIPE;
  tl_plan idle = priced(own, g), lent = priced(shared, g);
  const double micro = idle.t_compute + idle.t_tp + idle.t_pp - idle.t_tied;
  EXPECT_NEAR(idle.t_bubble, 7 * micro, 1e-12 * micro);
  EXPECT_DOUBLE_EQ(lent.t_compute, idle.t_compute);
  EXPECT_NEAR(lent.t_bubble, micro, 1e-9 * micro);  // 8 passes at 4x: 2 micro-batch times

  // the pipeline over two nodes of 4 ranks: each node holds whole stages,
  // whose ranks go idle together: the bubble is idle time, as without cores
  tl_cluster two = own, two_shared = shared;
  two.nodes = two_shared.nodes = 2;
  two.devices_per_node = two.rated_ranks_per_node = 4;
  two_shared.devices_per_node = two_shared.rated_ranks_per_node = 4;
  EXPECT_DOUBLE_EQ(priced(two_shared, g).t_bubble, priced(two, g).t_bubble);

  // a cluster whose ranks each have a core: as if it said nothing
  tl_cluster roomy = shared;
  roomy.cores_per_node = 8;
  EXPECT_DOUBLE_EQ(priced(roomy, g).t_step, idle.t_step);

  // two 4-stage pipelines: at least 2 ranks always compute, the 2 cores are
  // never idle: no bubble
  EXPECT_EQ(priced(shared, Split1F1B(2, 1, 4, 1, 8)).t_bubble, 0);

  // pp 8, 1F1B: from 16 micro-batches on (simulated to 24, then
  // extrapolated), each more adds one micro-batch's time
  double prev = 0, per = 0;
  for (int m = 16; m <= 40; m++) {
    tl_plan p = priced(shared, Split1F1B(1, 1, 8, 1, m));
    EXPECT_GT(p.t_bubble, 0);
    EXPECT_LT(p.t_bubble, priced(own, Split1F1B(1, 1, 8, 1, m)).t_bubble);
    if (m > 16) {
      EXPECT_NEAR(p.t_step - prev, per, 1e-9 * p.t_step) << m;
    }
    prev = p.t_step, per = (p.t_compute + p.t_tp + p.t_pp - p.t_tied) / m;
  }
}

// A spec that measured how fast a computing rank runs while only some
// compute ("shared_core_speed") is priced at those speeds, not the cores'
// ideal share, on the ranks it was measured on.
TEST(CostModel, MeasuredSharedSpeedReplacesTheIdealShare) {
  tl_cost_model cm = Build(kShapes[3]);
  tl_cluster ideal = {};
  ideal.device = TL_DEVICE_CPU, ideal.nodes = 1, ideal.devices_per_node = 8;
  ideal.rated_ranks_per_node = 8, ideal.cores_per_node = 2;
  ideal.device_memory_bytes = 1e15, ideal.peak_fp32 = 30e9, ideal.efficiency = 0.5;
  ideal.intra = ideal.inter = {1e9, 5e-5, 0, {}, {}, 0};
  tl_cluster measured = ideal;
  const double speeds[8] = {2.5, 2, 1.5, 1.25, 1.1, 1.05, 1.02, 1};
  measured.n_shared_speed = 8;
  for (int i = 0; i < 8; i++) measured.shared_speed[i] = speeds[i];
  auto priced = [&](const tl_cluster& c, tl_plan p) {
    tl_cost_evaluate(&cm, &c, TL_F32, nullptr, &p);
    return p;
  };
  // all computing: the rates measured, either way
  EXPECT_DOUBLE_EQ(priced(measured, Split1F1B(8, 1, 1, 1, 4)).t_step,
                   priced(ideal, Split1F1B(8, 1, 1, 1, 4)).t_step);
  // an 8-stage GPipe of one micro-batch: one stage computes at a time, at
  // 2.5x the rate (not the cores' 4x): 8 passes take 3.2 micro-batch times
  tl_plan g = Split1F1B(1, 1, 8, 1, 1);
  g.schedule = TL_SCHEDULE_GPIPE;
  tl_plan a = priced(ideal, g), b = priced(measured, g);
  const double micro = b.t_compute + b.t_tp + b.t_pp - b.t_tied;
  EXPECT_DOUBLE_EQ(b.t_compute, a.t_compute);
  EXPECT_NEAR(a.t_bubble, micro, 1e-9 * micro);
  EXPECT_NEAR(b.t_bubble, 2.2 * micro, 1e-9 * micro);
  // two 4-stage pipelines of 1 micro-batch: one stage of each computes at a
  // time, 2 ranks: 2x; its 4 stages one after another at 2x: 2 micro-batch
  // times
  tl_plan two = Split1F1B(2, 1, 4, 1, 1);
  two.schedule = TL_SCHEDULE_GPIPE;
  tl_plan t = priced(measured, two);
  const double tm = t.t_compute + t.t_tp + t.t_pp - t.t_tied;
  EXPECT_NEAR(t.t_compute + t.t_tp + t.t_pp - t.t_tied + t.t_bubble, 2 * tm, 1e-9 * tm);
  // a plan on fewer ranks than were measured: the ideal share
  tl_cluster part = measured, part_ideal = ideal;
  part.devices_per_node = part_ideal.devices_per_node = 4;
  tl_plan four = Split1F1B(1, 1, 4, 1, 1);
  four.schedule = TL_SCHEDULE_GPIPE;
  EXPECT_DOUBLE_EQ(priced(part, four).t_step, priced(part_ideal, four).t_step);
}

// The tied embedding's gradient is summed over the pipeline's first and
// last stages once a step (pp/runtime.c's tl_pp_sync_shared), in fp32 and
// exposed: each tensor-parallel rank's rows of it, between two ranks a
// pipeline apart (here 32 ranks, four nodes: one card each); under ZeRO 2
// and 3 in pieces, each rank's shard of it (the trainer's
// sync_tied_pieces): a data-parallel degree of the bytes.
TEST(CostModel, TheTiedEmbeddingIsSummedOverThePipelinesEndsOnceAStep) {
  tl_cost_model cm = Build(kShapes[1]);  // V 51200, h 8192
  tl_cluster c = A100Nodes(8);
  tl_plan p = Split1F1B(4, 8, 2, 1, 8);
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  const double rows = 51200.0 / 8 * 8192, bytes = 4 * rows;
  const double whole = bytes / c.inter.bandwidth + 2 * c.inter.latency;
  EXPECT_NEAR(p.t_tied, whole, 1e-9 * whole);
  EXPECT_GT(p.t_pp, p.t_tied) << "beside the micro-batches' sends";
  tl_plan more = Split1F1B(4, 8, 2, 1, 16);
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &more);
  EXPECT_DOUBLE_EQ(more.t_tied, p.t_tied) << "once a step";
  tl_plan z2 = p;
  z2.zero = 2;
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &z2);
  const double shard = bytes / 4 / c.inter.bandwidth + 2 * c.inter.latency;
  EXPECT_NEAR(z2.t_tied, shard, 1e-9 * shard);
  // the two stages on one node: NVLink
  tl_plan near = Split1F1B(1, 4, 2, 1, 8);
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &near);
  const double inside = 4 * 51200.0 / 4 * 8192 / c.intra.bandwidth + 2 * c.intra.latency;
  EXPECT_NEAR(near.t_tied, inside, 1e-9 * inside);
  // a mesh.order with the pipeline inside the data axis (tp innermost,
  // then pp, dp outermost): stage 0's ranks 0, 1, 6, 7 and the last
  // stage's 4, 5, 10, 11 on nodes of 8 — two pairs cross nodes, so the sum
  // waits on a network card
  tl_plan inner = Split1F1B(2, 2, 3, 1, 8);
  inner.order[0] = TL_AXIS_TP, inner.order[1] = TL_AXIS_CP;
  inner.order[2] = TL_AXIS_PP, inner.order[3] = TL_AXIS_DP;
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &inner);
  const double crossing = 4 * 51200.0 / 2 * 8192 / c.inter.bandwidth + 2 * c.inter.latency;
  EXPECT_NEAR(inner.t_tied, crossing, 1e-9 * crossing);
  // no pipeline: nothing to sum
  tl_plan one = Split1F1B(4, 8, 1, 1, 8);
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &one);
  EXPECT_EQ(one.t_tied, 0);
}
