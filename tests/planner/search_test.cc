// The search over 3D splits: it is fast on the largest published model, it
// honours the mesh rules and the fixed choices, it ranks by step time and
// counts what it rejects, and on this machine it keeps to what `trellis
// train` runs today.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

extern "C" {
#include "planner/search.h"
#include "tp/tp.h"
}

namespace {

// max_tp: the graphs' tensor-parallel degrees, as trellis plan builds them
// for a cluster (0: all)
tl_cost_model Gpt(int l, int a, int h, int V, int s, int max_tp = 0) {
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.model.n_layers = l, cfg.model.n_heads = a, cfg.model.n_embd = h;
  cfg.model.vocab_size = V, cfg.model.max_seq_len = s;
  tl_cost_model cm;
  EXPECT_EQ(tl_cost_model_build_tp(&cfg.model, s, TL_F32, max_tp, &cm), TL_OK) << tl_last_error();
  return cm;
}

// examples/clusters/dgx_a100.json cut to `nodes` nodes (0: as shipped).
tl_cluster DgxA100(int nodes = 0) {
  tl_cluster c;
  EXPECT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &c), TL_OK) << tl_last_error();
  if (nodes) c.nodes = nodes;
  return c;
}

// A four-layer MLP of widths sizes[0] -> ... -> sizes[4] (the classes).
struct tl_config Mlp(const int (&sizes)[5]) {
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.model.kind = TL_MODEL_MLP;
  cfg.model.vocab_size = sizes[4];
  cfg.model.n_mlp_layers = 4;
  memcpy(cfg.model.mlp_sizes, sizes, sizeof sizes);
  return cfg;
}

}  // namespace

// The whole space of the trillion-parameter row; the time is printed (a
// figure, not a bound: machines are shared and noisy).
// Graphs read for the degrees within a node only (what trellis plan builds
// when tp may not cross nodes) give the same search as graphs of every
// degree: the same plans, priced the same.
TEST(Search, GraphsWithinANodeSearchAsAllDegrees) {
  tl_cluster c = DgxA100(64);
  tl_cost_model* all = new tl_cost_model(Gpt(48, 64, 8192, 51200, 2048));
  tl_cost_model* node = new tl_cost_model(Gpt(48, 64, 8192, 51200, 2048, c.devices_per_node));
  EXPECT_LT(node->n_shards, all->n_shards);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 1536, TL_BF16);
  tl_search_result a, b;
  ASSERT_EQ(tl_search_run(all, &c, &o, &a), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_search_run(node, &c, &o, &b), TL_OK) << tl_last_error();
  ASSERT_EQ(a.n_plans, b.n_plans);
  EXPECT_EQ(a.n_evaluated, b.n_evaluated);
  for (int i = 0; i < a.n_plans; i++) {
    EXPECT_EQ(a.plans[i].t_step, b.plans[i].t_step) << i;
    EXPECT_EQ(a.plans[i].mem_total, b.plans[i].mem_total) << i;
  }
  tl_search_free(&a), tl_search_free(&b);
  delete all, delete node;
}

TEST(Search, TheTrillionParameterRowSearchesTheWholeSpace) {
  tl_cluster c = DgxA100();
  ASSERT_EQ(tl_cluster_devices(&c), 3072);
  auto t0 = std::chrono::steady_clock::now();
  // the graphs are built once (one and two blocks, for the degrees within a
  // node, as trellis plan builds them); every plan reuses them
  tl_cost_model cm = Gpt(128, 160, 25600, 51200, 2048, c.devices_per_node);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 3072, TL_BF16);
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("1008B on 3072 GPUs, batch 3072: %lld plans priced, %d fit, in %.1f ms\n",
              (long long)r.n_evaluated, r.n_plans, 1e3 * s);
  for (int k = 0; k < TL_REJECT_COUNT; k++)
    std::printf("  rejected %-10s %lld\n", tl_reject_name((tl_reject_reason)k),
                (long long)r.rejected[k]);
  ASSERT_GT(r.n_plans, 0);
  const tl_plan& w = r.plans[0];
  std::printf(
      "winner: dp %d tp %d pp %d, micro-batch %d x %d, %s (%d chunks a rank), ZeRO-%d, "
      "recompute %d: %.2f s, %.0f GB, %.0f TFLOP/s per GPU\n",
      w.dp, w.tp, w.pp, w.micro_batch, w.n_micro, tl_schedule_kind_name(w.schedule),
      tl_plan_chunks(&w), w.zero, (int)w.recompute, w.t_step, w.mem_total / 1e9,
      w.flops_per_device / 1e12);
  int schedules[4] = {0};
  for (int i = 0; i < r.n_plans; i++) schedules[r.plans[i].schedule]++;
  std::printf("fitting plans: gpipe %d, 1f1b %d, interleaved %d, zero-bubble %d\n", schedules[0],
              schedules[1], schedules[2], schedules[3]);
  EXPECT_GT(schedules[TL_SCHEDULE_INTERLEAVED], 0) << "interleaving is searched";
  EXPECT_GT(r.rejected[TL_REJECT_MEMORY], 0) << "a trillion parameters do not fit everywhere";
  EXPECT_GT(r.rejected[TL_REJECT_TP_NODE], 0);
  for (int i = 0; i < r.n_plans; i++) {
    const tl_plan& p = r.plans[i];
    EXPECT_EQ(p.dp * p.tp * p.pp, 3072);
    EXPECT_EQ(p.dp * p.micro_batch * p.n_micro, 3072);
    EXPECT_EQ(160 % p.tp, 0);
    EXPECT_LE(p.tp, 8);
    EXPECT_LE(p.mem_total, c.device_memory_bytes);
    if (p.schedule == TL_SCHEDULE_INTERLEAVED) {  // the trainer's rules
      EXPECT_GE(p.virtual_stages, 2);
      EXPECT_LE(p.pp * p.virtual_stages, 128);
      EXPECT_EQ(p.n_micro % p.pp, 0);
      EXPECT_LE(p.zero, 1);
    }
    if (i) {
      EXPECT_LE(r.plans[i - 1].t_step, p.t_step) << "ranked by step time";
    }
  }
  tl_search_free(&r);
}

// Communication hides only behind compute that runs beside it: over every
// plan the GPT-3 175B (1024 A100s) and the 1008B (3072) searches keep, the
// data-parallel time a step shows is at least what the link carries (the
// same plan priced with nothing overlapped) less all the compute of the
// step, and at most what it carries.
TEST(Search, NoPlanHidesMoreCommunicationThanItHasComputeFor) {
  struct Row {
    const char* name;
    int l, a, h, nodes, batch;
  } rows[] = {{"175B", 96, 96, 12288, 128, 1536}, {"1008B", 128, 160, 25600, 0, 3072}};
  for (const Row& row : rows) {
    tl_cluster c = DgxA100(row.nodes);
    tl_cost_model* cm = new tl_cost_model(Gpt(row.l, row.a, row.h, 51200, 2048, 8));
    struct tl_search_options o;
    tl_search_options_defaults(&o, row.batch, TL_BF16);
    tl_search_result r;
    ASSERT_EQ(tl_search_run(cm, &c, &o, &r), TL_OK) << tl_last_error();
    ASSERT_GT(r.n_plans, 0) << row.name;
    int below = 0, checked = 0;
    double worst = 0;
    for (int i = 0; i < r.n_plans; i++) {
      const tl_plan& p = r.plans[i];
      tl_plan bare = p;
      bare.no_overlap = true;
      tl_cost_evaluate(cm, &c, TL_BF16, nullptr, &bare);
      const double floor = bare.t_dp - p.t_compute;
      checked++;
      if (p.t_dp < floor - 1e-9 * p.t_step) {
        if (below++ < 3)
          ADD_FAILURE() << row.name << ": dp " << p.dp << " tp " << p.tp << " pp " << p.pp
                        << " ZeRO-" << p.zero << " shows " << p.t_dp << " s of data-parallel "
                        << "communication; the link carries " << bare.t_dp << " s beside "
                        << p.t_compute << " s of compute";
        worst = std::max(worst, floor - p.t_dp);
      }
      EXPECT_LE(p.t_dp, bare.t_dp * (1 + 1e-9)) << row.name << " plan " << i;
    }
    EXPECT_EQ(below, 0) << row.name << ": " << below << " of " << checked
                        << " plans hide more than their compute (worst by " << worst << " s)";
    const tl_plan& w = r.plans[0];
    tl_plan wb = w;
    wb.no_overlap = true;
    tl_cost_evaluate(cm, &c, TL_BF16, nullptr, &wb);
    std::printf(
        "%s: %d plans checked; winner dp %d tp %d pp %d ZeRO-%d, micro-batch %d x %d, %s: "
        "%.2f s, MFU %.1f%%; data-parallel communication %.2f s, %.2f s of it shown\n",
        row.name, checked, w.dp, w.tp, w.pp, w.zero, w.micro_batch, w.n_micro,
        tl_schedule_kind_name(w.schedule), w.t_step, 100 * w.mfu, wb.t_dp, w.t_dp);
    tl_search_free(&r);
    delete cm;
  }
}

TEST(Search, FixedChoicesAreKept) {
  tl_cluster c = DgxA100(64);
  tl_cost_model cm = Gpt(48, 64, 8192, 51200, 2048);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 1536, TL_BF16);
  o.fix_tp = 8, o.fix_pp = 2;
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  ASSERT_GT(r.n_plans, 0);
  for (int i = 0; i < r.n_plans; i++) {
    EXPECT_EQ(r.plans[i].tp, 8);
    EXPECT_EQ(r.plans[i].pp, 2);
    EXPECT_EQ(r.plans[i].dp, 32);
  }
  tl_search_free(&r);
}

TEST(Search, ThisMachineKeepsToWhatTheTrainerRuns) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/this_machine.json", &c), TL_OK) << tl_last_error();
  tl_cost_model cm = Gpt(4, 4, 128, 256, 64);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 8, TL_F32);
  o.trainer_only = true;
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  ASSERT_GT(r.n_plans, 0);
  // the trainer runs every ZeRO stage and recomputation mode
  EXPECT_EQ(r.rejected[TL_REJECT_TRAINER], 0);
  bool zero_seen[4] = {false, false, false, false}, rc_seen[3] = {false, false, false};
  for (int i = 0; i < r.n_plans; i++) {
    const tl_plan& p = r.plans[i];
    if (p.zero >= 0 && p.zero <= 3) zero_seen[p.zero] = true;
    rc_seen[p.recompute] = true;
    EXPECT_TRUE(p.runnable);
    EXPECT_EQ(p.dp * p.tp * p.pp, 2);
  }
  EXPECT_TRUE(rc_seen[0] && rc_seen[1] && rc_seen[2]);
  // dp = 2 plans come in every ZeRO stage, which the trainer runs
  for (int z = 0; z <= 3; z++) EXPECT_TRUE(zero_seen[z]) << "no ZeRO-" << z << " plan";
  tl_search_free(&r);
}

TEST(Search, MeshRulesAreCountedByReason) {
  tl_cluster c = DgxA100(2);                       // 16 GPUs
  tl_cost_model cm = Gpt(2, 6, 768, 50257, 1024);  // 6 heads: tp 4, 8, 16 break the heads
  struct tl_search_options o;
  tl_search_options_defaults(&o, 6, TL_BF16);  // dp 4, 8, 16 do not divide 6
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_GT(r.rejected[TL_REJECT_TP_HEADS], 0);
  EXPECT_GT(r.rejected[TL_REJECT_PP_LAYERS], 0);
  EXPECT_GT(r.rejected[TL_REJECT_BATCH], 0);
  tl_search_free(&r);
  EXPECT_STREQ(tl_reject_name(TL_REJECT_MEMORY), "memory");
}

// No split of all of the cluster's devices works: a 4-layer model at batch
// 64 on the shipped 3072-GPU spec (dp <= 64, tp <= 8, pp <= 4). The search
// says which rules, how many devices they allow, and finds the plans on
// fewer devices.
TEST(Search, WhenNoSplitOfAllDevicesWorksItSaysWhyAndSearchesFewer) {
  tl_cluster c = DgxA100();
  tl_cost_model cm = Gpt(4, 16, 1024, 131072, 1024);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 64, TL_BF16);
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_EQ(r.n_plans, 0);
  EXPECT_EQ(r.n_evaluated, 0);
  EXPECT_TRUE(tl_search_mesh_bound(&r));
  char why[1024];
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why, "every dp x tp x pp of the 3072 devices breaks a mesh rule"), nullptr)
      << why;
  EXPECT_NE(strstr(why, "dp must divide the global batch (64 sequences)"), nullptr) << why;
  EXPECT_NE(strstr(why, "pp must be at most the 4 layers"), nullptr) << why;
  EXPECT_NE(strstr(why, "at most 2048 devices of whole nodes (dp 64 x tp 8 x pp 4)"), nullptr)
      << why;
  int dp, tp, pp, cp;
  EXPECT_EQ(tl_search_max_devices(&cm, &c, &o, &dp, &tp, &pp, &cp), 2048);
  EXPECT_EQ(cp, 1);
  tl_search_free(&r);

  tl_search_result f;
  ASSERT_EQ(tl_search_fewer(&cm, &c, &o, 16, &f), TL_OK) << tl_last_error();
  ASSERT_GT(f.n_plans, 0);
  EXPECT_EQ(f.n_counts_fitting, 16);
  bool largest = false;
  for (int i = 0; i < f.n_plans; i++) {
    const tl_plan& p = f.plans[i];
    int d = p.dp * p.tp * p.pp;
    EXPECT_LT(d, 3072);
    EXPECT_TRUE(d <= 8 || d % 8 == 0) << d << " devices are not a part of the cluster";
    EXPECT_EQ(64 % p.dp, 0);
    EXPECT_LE(p.tp, 8);
    EXPECT_LE(p.pp, 4);
    largest |= d == 2048;
    if (i) {
      EXPECT_LE(f.plans[i - 1].t_step, p.t_step) << "fastest first";
    }
  }
  EXPECT_TRUE(largest) << "the most devices the rules allow were searched";
  tl_search_free(&f);
}

// Every split of the cluster's devices is over memory (GPT-3 175B on two
// nodes): more devices hold more of it, and the search over more nodes
// finds the fewest on which a plan fits. Every count below it that a mesh
// fills was searched and has none; the plans are of its devices.
TEST(Search, WhenEveryPlanIsOverMemoryItFindsTheFewestNodesThatHoldIt) {
  tl_cluster c = DgxA100(2);
  tl_cost_model cm = Gpt(96, 96, 12288, 51200, 2048, 8);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 1536, TL_BF16);
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  ASSERT_EQ(r.n_plans, 0);
  EXPECT_FALSE(tl_search_mesh_bound(&r));
  EXPECT_GT(r.rejected[TL_REJECT_MEMORY], 0);
  tl_search_free(&r);

  int nodes = 0, to = 0;
  tl_search_result m;
  ASSERT_EQ(tl_search_more_nodes(&cm, &c, &o, 4096, 128, &nodes, &to, &m), TL_OK)
      << tl_last_error();
  ASSERT_GT(nodes, 2);
  EXPECT_EQ(to, nodes) << "the search stops at the first count with a plan";
  ASSERT_GT(m.n_plans, 0);
  EXPECT_EQ(m.n_counts_fitting, 1);
  std::printf(
      "175B at batch 1536: the fewest DGX A100 nodes that hold it: %d (%d counts "
      "searched, %lld plans)\n",
      nodes, m.n_counts, (long long)m.n_evaluated);
  for (int i = 0; i < m.n_plans; i++) {
    const tl_plan& p = m.plans[i];
    EXPECT_EQ(p.dp * p.tp * p.pp, nodes * 8);
    if (i) {
      EXPECT_LE(m.plans[i - 1].t_step, p.t_step) << "fastest first";
    }
  }
  int searched = 0;
  for (int n = 3; n < nodes; n++) {
    tl_cluster fewer = DgxA100(n);
    ASSERT_EQ(tl_search_run(&cm, &fewer, &o, &r), TL_OK) << tl_last_error();
    EXPECT_EQ(r.n_plans, 0) << n << " nodes hold a plan: not the fewest";
    searched += !tl_search_mesh_bound(&r);
    tl_search_free(&r);
  }
  EXPECT_EQ(m.n_counts, searched + 1) << "the counts a mesh fills, each once";
  tl_search_free(&m);

  // none within the bound on devices, or on counts: nothing found, what
  // was searched said
  const int fewest = nodes;
  ASSERT_EQ(tl_search_more_nodes(&cm, &c, &o, 8 * (fewest - 1), 128, &nodes, &to, &m), TL_OK);
  EXPECT_EQ(nodes, 0);
  EXPECT_EQ(m.n_plans, 0);
  EXPECT_EQ(m.n_counts, searched);
  EXPECT_EQ(to, fewest - 1);
  tl_search_free(&m);
  ASSERT_EQ(tl_search_more_nodes(&cm, &c, &o, 4096, 1, &nodes, &to, &m), TL_OK);
  EXPECT_EQ(nodes, 0);
  EXPECT_EQ(m.n_counts, 1);
  EXPECT_EQ(to, 3);
  tl_search_free(&m);
}

// Fitting does not grow evenly with the devices: a 128-layer model whose
// meshes at some counts split the layers or the batch unevenly fits on 96
// H100 nodes, not on 97 to 107, again on 108. The search tries every count
// a mesh fills, fewest first, and finds 96.
TEST(Search, TheFewestNodesAreFoundWhereFittingIsUneven) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_h100.json", &c), TL_OK) << tl_last_error();
  // in bf16, as `trellis plan` builds it on a GPU spec
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.model.n_layers = 128, cfg.model.n_heads = 128, cfg.model.n_embd = 40960;
  cfg.model.vocab_size = 51200, cfg.model.max_seq_len = 2048;
  tl_cost_model cm;
  ASSERT_EQ(tl_cost_model_build_tp(&cfg.model, 2048, TL_BF16, 8, &cm), TL_OK) << tl_last_error();
  struct tl_search_options o;
  tl_search_options_defaults(&o, 3072, TL_BF16);
  int nodes = 0, to = 0;
  tl_search_result m;
  ASSERT_EQ(tl_search_more_nodes(&cm, &c, &o, 4096, 128, &nodes, &to, &m), TL_OK)
      << tl_last_error();
  EXPECT_EQ(nodes, 96);
  ASSERT_GT(m.n_plans, 0);
  EXPECT_EQ(m.plans[0].dp * m.plans[0].tp * m.plans[0].pp, 768);
  tl_search_free(&m);
  tl_search_result r;
  for (int n : {97, 107, 108}) {
    tl_cluster at = c;
    at.nodes = n;
    ASSERT_EQ(tl_search_run(&cm, &at, &o, &r), TL_OK) << tl_last_error();
    EXPECT_EQ(r.n_plans > 0, n == 108) << n << " nodes";
    tl_search_free(&r);
  }
}

// A fixed choice the rules refuse says so, naming the flag that lifts the
// rule; one no split of the devices has says that.
TEST(Search, AFixedChoiceNoSplitSatisfiesIsNamed) {
  tl_cluster c = DgxA100(4);
  tl_cost_model cm = Gpt(24, 16, 2048, 50257, 2048);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 512, TL_BF16);
  o.fix_tp = 16;
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_EQ(r.n_plans, 0);
  char why[1024];
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why, "with tp=16 breaks a mesh rule"), nullptr) << why;
  EXPECT_NE(strstr(why, "tp must stay within a node's 8 devices (--allow-tp-across-nodes"), nullptr)
      << why;
  tl_search_free(&r);
  o.allow_tp_across_nodes = true;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_GT(r.n_plans, 0) << "--allow-tp-across-nodes lifts it";
  tl_search_free(&r);

  // a micro-batch no replica's share makes: named, and no search of fewer
  // devices (the mesh rules are not what fails)
  tl_search_options_defaults(&o, 8, TL_BF16);
  o.fix_micro_batch = 16;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_EQ(r.n_plans, 0);
  EXPECT_FALSE(tl_search_mesh_bound(&r));
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why,
                   "no plan of the dp x tp x pp shapes that keep the mesh rules has "
                   "micro_batch=16"),
            nullptr)
      << why;
  tl_search_free(&r);

  tl_search_options_defaults(&o, 512, TL_BF16);
  o.fix_dp = 5;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_EQ(r.n_meshes, 0);
  EXPECT_TRUE(tl_search_mesh_bound(&r));
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why, "no dp x tp x pp of the cluster's 32 devices has dp=5"), nullptr) << why;
  tl_search_free(&r);

  // a whole mesh fixed on fewer devices than the cluster's: whether it
  // could run there is said too (the search of fewer devices skips it)
  o.fix_dp = 5, o.fix_tp = 2, o.fix_pp = 1;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why,
                   "that mesh of 10 devices breaks a mesh rule too: dp must divide the "
                   "global batch (512 sequences)"),
            nullptr)
      << why;
  tl_search_free(&r);
  o.fix_dp = 2, o.fix_tp = 2, o.fix_pp = 3;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why, "its 12 devices are not whole nodes of 8"), nullptr) << why;
  tl_search_free(&r);
  o.fix_dp = 2, o.fix_tp = 2, o.fix_pp = 4;  // 16 devices, two whole nodes: said no more
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_EQ(strstr(why, "that mesh"), nullptr) << why;
  EXPECT_EQ(strstr(why, "whole nodes"), nullptr) << why;
  tl_search_free(&r);
}

// Every split priced and over memory: the least hungry plan's bytes, its
// parts and its step time say by how much.
TEST(Search, WhenEveryPlanIsOverMemoryTheLeastHungryIsGiven) {
  tl_cluster c = DgxA100(1);
  tl_cost_model cm = Gpt(44, 48, 6144, 50257, 2048);  // about 20B parameters
  struct tl_search_options o;
  tl_search_options_defaults(&o, 64, TL_BF16);
  o.fix_dp = 8;    // dp 8 x tp 1 x pp 1 without ZeRO: 16 bytes a parameter,
  o.fix_zero = 0;  // some 320 GB of state on each device
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  EXPECT_EQ(r.n_plans, 0);
  ASSERT_TRUE(r.has_closest);
  EXPECT_GT(r.closest.mem_total, c.device_memory_bytes);
  EXPECT_EQ(r.closest.dp, 8);
  char why[1024];
  tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  EXPECT_NE(strstr(why, "need more than a device's 85.90 GB"), nullptr) << why;
  EXPECT_NE(strstr(why, "The least memory any needs is"), nullptr) << why;
  EXPECT_NE(strstr(why, "its step would take"), nullptr) << why;
  tl_search_free(&r);
}

// Sequence parallelism is a searched choice: every tensor-parallel mesh is
// priced with and without it (its plans hold less activation memory), `fix_sp`
// pins it, and where only the sequence-parallel plans fit memory the winner
// is one of them.
TEST(Search, SequenceParallelismIsSearchedAndCanBeFixed) {
  tl_cluster c = DgxA100(1);
  tl_cost_model cm = Gpt(8, 16, 2048, 51200, 2048);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 16, TL_BF16);
  o.fix_tp = 8, o.fix_pp = 1, o.fix_micro_batch = 2, o.fix_zero = 0, o.fix_recompute = 0;
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  ASSERT_EQ(r.n_plans, 2) << "one mesh, one micro-batch size: with and without sp";
  const tl_plan a = r.plans[0].sequence_parallel ? r.plans[1] : r.plans[0];  // copies: r is
  const tl_plan b = r.plans[0].sequence_parallel ? r.plans[0] : r.plans[1];  // freed below
  ASSERT_FALSE(a.sequence_parallel);
  ASSERT_TRUE(b.sequence_parallel);
  // LayerNorm and residual regions split by tokens, and each column-parallel
  // matmul's input kept as its shard (gathered again in the backward)
  std::printf(
      "tp 8, 2048 channels, 2 x 2048 tokens: activations %.3g bytes, %.3g with sequence "
      "parallelism (%.0f%% less)\n",
      a.mem_act, b.mem_act, 100 * (1 - b.mem_act / a.mem_act));
  EXPECT_LT(b.mem_act, a.mem_act * 0.7);
  EXPECT_GE(b.mem_state, a.mem_state);  // + the packed LayerNorm gradients
  EXPECT_LT(b.mem_state, a.mem_state * 1.001);
  tl_search_free(&r);

  for (int sp : {0, 1}) {
    o.fix_sp = sp;
    ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
    ASSERT_EQ(r.n_plans, 1);
    EXPECT_EQ(r.plans[0].sequence_parallel, sp == 1);
    tl_search_free(&r);
  }

  // a device just big enough for the sequence-parallel plan's activations
  o.fix_sp = -1;
  c.device_memory_bytes = b.mem_state + c.reserve_bytes + (a.mem_act + b.mem_act) / 2;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  ASSERT_EQ(r.n_plans, 1);
  EXPECT_TRUE(r.plans[0].sequence_parallel);
  EXPECT_EQ(r.rejected[TL_REJECT_MEMORY], 1);
  tl_search_free(&r);
}

// An MLP is planned from its own graph: tensor-parallel degrees its layout
// cannot split are rejected as tp_split, it has neither sequence
// parallelism nor recomputation, and stages follow its (unequal) layers.
TEST(Search, AnMlpIsPlannedFromItsOwnLayers) {
  const int sizes[5] = {64, 96, 2048, 2048, 256};  // 96: tp 64 does not divide it
  struct tl_config cfg = Mlp(sizes);
  tl_cost_model cm;
  ASSERT_EQ(tl_cost_model_build(&cfg.model, 128, &cm), TL_OK) << tl_last_error();
  EXPECT_EQ(cm.kind, TL_MODEL_MLP);
  EXPECT_EQ(cm.n_layers, 4);
  EXPECT_TRUE(tl_cost_has_shard(&cm, 1));
  EXPECT_TRUE(tl_cost_has_shard(&cm, 8));    // 2048 and 96 split 8 ways
  EXPECT_FALSE(tl_cost_has_shard(&cm, 64));  // 96 does not
  // each layer costs its own matrix product (2 x in x out per token, plus
  // the bias and GELU), and the cut balances the unequal layers: 3 + 1
  const tl_cost_shard& s = cm.shards[0];
  for (int l = 0; l < 4; l++)
    EXPECT_NEAR(s.mlp_layer[l].fwd_flops / (2.0 * 128 * sizes[l] * sizes[l + 1]), 1.0, 0.15) << l;
  int layers[2];
  ASSERT_EQ(tl_cost_stage_layers(&cm, 1, false, 2, layers), TL_OK);
  EXPECT_EQ(layers[0], 3);
  EXPECT_EQ(layers[1], 1);

  tl_cluster c = DgxA100(8);
  struct tl_search_options o;
  tl_search_options_defaults(&o, 64, TL_BF16);
  o.allow_tp_across_nodes = true;
  tl_search_result r;
  ASSERT_EQ(tl_search_run(&cm, &c, &o, &r), TL_OK) << tl_last_error();
  ASSERT_GT(r.n_plans, 0);
  EXPECT_GT(r.rejected[TL_REJECT_TP_SPLIT], 0) << "tp = 64";
  EXPECT_EQ(r.rejected[TL_REJECT_TP_HEADS], 0);
  for (int i = 0; i < r.n_plans; i++) {
    EXPECT_FALSE(r.plans[i].sequence_parallel);
    EXPECT_FALSE(r.plans[i].recompute);
    EXPECT_NE(r.plans[i].tp, 64);
    EXPECT_GT(r.plans[i].t_step, 0);
  }
  tl_search_free(&r);
  EXPECT_STREQ(tl_reject_name(TL_REJECT_TP_SPLIT), "tp_split");
}

// An MLP's pipeline sends: each stage its activation ahead and its gradient
// behind, each the size of its own boundary (an end stage's two on its one
// boundary), the stage that pays the most setting the micro-batch. Widths
// 64 -> 64 -> 2048 -> 64 -> 64 on four stages: the middle two send 64 one
// way and 2048 the other, not 2048 both ways.
TEST(Search, AnMlpStagePaysEachBoundaryItsOwnWidth) {
  struct tl_config cfg = Mlp({64, 64, 2048, 64, 64});
  tl_cost_model cm;
  ASSERT_EQ(tl_cost_model_build(&cfg.model, 128, &cm), TL_OK) << tl_last_error();
  tl_cluster c = DgxA100(1);
  c.intra.bandwidth = 1e6; /* the sends outweigh everything else */
  tl_plan p;
  memset(&p, 0, sizeof p);
  p.dp = 1, p.tp = 1, p.pp = 4, p.micro_batch = 1, p.n_micro = 4;
  p.schedule = TL_SCHEDULE_1F1B;
  p.grad_reduce = TL_F32;
  const int layers[4] = {1, 1, 1, 1};
  tl_cost_evaluate(&cm, &c, TL_BF16, layers, &p);
  const tl_cost_shard& s = cm.shards[0];
  const double narrow = tl_cost_send(&c, s.mlp_layer[0].out_elems * 2.0, &c.intra);
  const double wide = tl_cost_send(&c, s.mlp_layer[1].out_elems * 2.0, &c.intra);
  ASSERT_GT(wide, 10 * narrow);
  EXPECT_NEAR(p.t_pp, p.n_micro * (narrow + wide), 1e-9 * p.t_pp);
}
