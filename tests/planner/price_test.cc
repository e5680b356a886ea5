// A config prices as the plan it was written from: tl_plan_to_config and
// tl_plan_price_config are inverses over what the search plans (mesh,
// schedule, ZeRO, recomputation, sp, interleaving, buckets, the reduction
// dtype, the stage cut); what the cost model does not price is refused,
// naming the field; `trellis train --cluster SPEC` prints the price and
// sets the run's measured step and bytes beside it.
#include <gtest/gtest.h>
#include <jansson.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

extern "C" {
#include "core/config.h"
#include "kernels/backend.h"
#include "planner/recommend.h"
#include "planner/search.h"
#include "tp/tp.h"
}

#include "tests/planner/plan_cli.h"

namespace {

// The plans a search of `base`'s model finds on `c` in `dtype` (tensor
// parallelism up to `tp_max`, 0: any), with `adjust` setting the options
// beyond the defaults; its cost model in *cm.
void Search(const tl_config& base, const tl_cluster& c, tl_dtype dtype, int tp_max,
            const std::function<void(tl_search_options*)>& adjust, tl_cost_model* cm,
            tl_search_result* r) {
  ASSERT_EQ(tl_cost_model_build_tp(&base.model, base.train.seq_len, dtype, tp_max, cm), TL_OK)
      << tl_last_error();
  struct tl_search_options o;
  tl_search_options_defaults(&o, base.train.batch_size, dtype);
  adjust(&o);
  ASSERT_EQ(tl_search_run(cm, &c, &o, r), TL_OK) << tl_last_error();
  ASSERT_GT(r->n_plans, 0);
}

// `want`, a plan of a search on `searched`, written as a config (*cfg) and
// priced back on `priced` (*got): the same step and bytes.
void PriceBack(const tl_plan& want, const tl_config& base, const tl_cluster& searched,
               const tl_cluster& priced, tl_dtype dtype, tl_config* cfg, tl_plan* got) {
  ASSERT_EQ(tl_plan_to_config(&want, &base, base.train.seq_len, &searched, dtype, cfg), TL_OK)
      << tl_last_error();
  ASSERT_EQ(tl_plan_price_config(cfg, &priced, got), TL_OK) << tl_last_error();
  EXPECT_NEAR(got->t_step / want.t_step, 1.0, 1e-9);
  EXPECT_NEAR(got->mem_total / want.mem_total, 1.0, 1e-9);
}

}  // namespace

// The plan is the contract both ways: a plan the search priced, written as
// a config (tl_plan_to_config), prices the same when the config is priced
// (tl_plan_price_config, what `trellis train --cluster` reports) — its step
// time and its parts, and its memory — for every plan of a search over
// meshes, schedules, ZeRO stages, recomputation, sequence parallelism and
// interleaving across two GPU nodes. A field the config carries but the
// pricing reads wrong or drops shows here.
TEST(Plan, AConfigPricesAsThePlanItWasWrittenFrom) {
  struct tl_config base;
  ASSERT_EQ(tl_config_load(kSmall, &base), TL_OK) << tl_last_error();
  base.model.n_layers = 8, base.model.n_heads = 8, base.model.n_embd = 256;
  base.train.batch_size = 32;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &c), TL_OK) << tl_last_error();
  c.nodes = 2;
  tl_cost_model cm;
  tl_search_result r;
  /* the reduction's dtype: a field of the plan the config must carry back */
  Search(
      base, c, TL_BF16, c.devices_per_node, [](tl_search_options* o) { o->grad_reduce = TL_BF16; },
      &cm, &r);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_GT(r.n_plans, 100);
  int seen_sp = 0, seen_zero = 0, seen_inter = 0, seen_rc = 0, seen_nodes = 0;
  /* every 7th plan (each pricing builds its cost model): a few hundred */
  std::printf("%d plans, every 7th priced from its config\n", r.n_plans);
  for (int i = 0; i < r.n_plans; i += 7) {
    const tl_plan& want = r.plans[i];
    SCOPED_TRACE("plan " + std::to_string(i) + ": dp " + std::to_string(want.dp) + " tp " +
                 std::to_string(want.tp) + " pp " + std::to_string(want.pp));
    struct tl_config cfg;
    tl_plan got;
    PriceBack(want, base, c, c, TL_BF16, &cfg, &got);
    if (HasFatalFailure()) break;
    EXPECT_NEAR(got.t_dp, want.t_dp, 1e-9 * want.t_step);
    EXPECT_NEAR(got.t_tp, want.t_tp, 1e-9 * want.t_step);
    EXPECT_NEAR(got.t_opt, want.t_opt, 1e-9 * want.t_step);
    EXPECT_EQ(got.mem_stage, want.mem_stage);
    seen_sp += want.sequence_parallel, seen_zero += want.zero > 0;
    seen_inter += tl_plan_chunks(&want) > 1, seen_rc += want.recompute != TL_RECOMPUTE_NONE;
    seen_nodes += want.dp * want.tp * want.pp > c.devices_per_node;
    if (HasFailure()) break;
  }
  EXPECT_GT(seen_sp, 0);
  EXPECT_GT(seen_zero, 0);
  EXPECT_GT(seen_inter, 0);
  EXPECT_GT(seen_rc, 0);
  EXPECT_GT(seen_nodes, 0);
  tl_search_free(&r);
}

// The same both ways where the spec is sized down to the mesh (a search of
// 4 devices priced on two nodes of 8), for plans reducing after the
// backward (bucket_mb 0: the config's one bucket), on a CPU spec in fp32
// and in bf16 at its fp32 peak, and with the config's own stage cut: the
// trainer's cut prices as no cut, another cut prices otherwise.
TEST(Plan, AConfigPricesAsThePlanItWasWrittenFromOnFewerDevicesAndCpus) {
  struct tl_config base;
  ASSERT_EQ(tl_config_load(kSmall, &base), TL_OK) << tl_last_error();
  /* 28M parameters: more than one 25 MB bucket of fp32 gradients, so that
   * buckets during the backward and one after it price apart */
  base.model.n_layers = 4, base.model.n_heads = 8, base.model.n_embd = 768;
  base.train.batch_size = 16;
  tl_cluster gpu;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &gpu), TL_OK) << tl_last_error();
  gpu.nodes = 2;
  tl_cluster four = gpu, cpu;
  four.nodes = 1, four.devices_per_node = 4;
  ASSERT_EQ(tl_cluster_load(kThisMachine, &cpu), TL_OK) << tl_last_error();
  struct Case {
    const tl_cluster* searched;
    const tl_cluster* priced;
    tl_dtype dtype;
    double bucket_mb;
  } cases[] = {{&four, &gpu, TL_BF16, 25},
               {&four, &gpu, TL_BF16, 0},
               {&cpu, &cpu, TL_F32, 25},
               {&cpu, &cpu, TL_BF16, 0}};
  int priced = 0, cut = 0;
  for (const Case& k : cases) {
    tl_cluster sc = *k.searched;
    if (sc.device == TL_DEVICE_CPU && sc.peak_bf16 <= 0) sc.peak_bf16 = sc.peak_fp32;
    tl_cost_model cm;
    tl_search_result r;
    const bool cpu_only = sc.device == TL_DEVICE_CPU;
    Search(
        base, sc, k.dtype, 0,
        [&](tl_search_options* o) {
          o->dp_bucket_mb = k.bucket_mb;
          o->trainer_only = cpu_only;
        },
        &cm, &r);
    ASSERT_FALSE(HasFatalFailure());
    const int stride = r.n_plans > 40 ? r.n_plans / 40 : 1; /* about 40 a case */
    for (int i = 0; i < r.n_plans; i += stride) {
      const tl_plan& want = r.plans[i];
      SCOPED_TRACE("bucket " + std::to_string(k.bucket_mb) + ", plan " + std::to_string(i));
      struct tl_config cfg;
      tl_plan got;
      PriceBack(want, base, sc, *k.priced, k.dtype, &cfg, &got);
      ASSERT_FALSE(HasFatalFailure());
      priced++;
      if (want.pp > 1 && tl_plan_chunks(&want) == 1) { /* the cut, given */
        int layers[TL_MAX_STAGES];
        ASSERT_EQ(tl_cost_stage_layers(&cm, want.tp, want.sequence_parallel, want.pp, layers),
                  TL_OK);
        cfg.schedule.n_stage_layers = want.pp;
        for (int s = 0; s < want.pp; s++) cfg.schedule.stage_layers[s] = layers[s];
        tl_plan same, other;
        ASSERT_EQ(tl_plan_price_config(&cfg, k.priced, &same), TL_OK) << tl_last_error();
        EXPECT_DOUBLE_EQ(same.t_step, got.t_step);
        /* one layer moved from the stage with the most to its neighbour */
        int s = 0;
        for (int j = 1; j < want.pp; j++) s = layers[j] > layers[s] ? j : s;
        if (layers[s] > 1) {
          cfg.schedule.stage_layers[s]--;
          cfg.schedule.stage_layers[s == 0 ? 1 : s - 1]++;
          ASSERT_EQ(tl_plan_price_config(&cfg, k.priced, &other), TL_OK) << tl_last_error();
          EXPECT_NE(other.t_step, got.t_step);
          cut++;
        }
      }
      if (HasFailure()) break;
    }
    tl_search_free(&r);
  }
  std::printf("%d configs priced, %d with a cut of their own\n", priced, cut);
  EXPECT_GT(priced, 20);
  EXPECT_GT(cut, 0);
}

// What the cost model does not price is refused, naming the field.
TEST(Plan, PricingAConfigRefusesWhatTheCostModelDoesNotPrice) {
  struct tl_config cfg;
  ASSERT_EQ(tl_config_load(kSmall, &cfg), TL_OK) << tl_last_error();
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load(kThisMachine, &c), TL_OK) << tl_last_error();
  tl_plan p;
  struct tl_config det = cfg;
  det.mesh.dp = 2, det.parallel.deterministic = true;
  EXPECT_EQ(tl_plan_price_config(&det, &c, &p), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("parallel.deterministic = true"), std::string::npos)
      << tl_last_error();
  struct tl_config mlp = cfg;
  mlp.model.kind = TL_MODEL_MLP, mlp.parallel.recompute = TL_RECOMPUTE_FULL;
  EXPECT_EQ(tl_plan_price_config(&mlp, &c, &p), TL_ERR_CONFIG);
  EXPECT_NE(std::string(tl_last_error()).find("parallel.recompute = \"full\""), std::string::npos)
      << tl_last_error();
}

// mesh.order lays the ranks out, and so decides which groups cross nodes:
// on two nodes of 8, dp 2 x tp 8 in the default order (tp innermost) keeps
// each tensor-parallel group in a node and sends the data-parallel
// all-reduce across; dp innermost does the opposite, the tensor-parallel
// collectives crossing at the bandwidth of 4 cards a node. Priced so, and
// a plan's order is what its config is written with.
TEST(Plan, MeshOrderDecidesWhichGroupsCrossNodes) {
  struct tl_config cfg;
  ASSERT_EQ(tl_config_load(kSmall, &cfg), TL_OK) << tl_last_error();
  cfg.model.n_layers = 4, cfg.model.n_heads = 8, cfg.model.n_embd = 512;
  cfg.mesh.dp = 2, cfg.mesh.tp = 8, cfg.train.batch_size = 16;
  cfg.device.type = TL_DEVICE_CUDA, cfg.train.precision = TL_PRECISION_BF16;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &c), TL_OK) << tl_last_error();
  tl_plan tp_in, dp_in, pp_in;
  ASSERT_EQ(tl_plan_price_config(&cfg, &c, &tp_in), TL_OK) << tl_last_error();
  struct tl_config dp_first = cfg;
  dp_first.mesh.order[0] = TL_AXIS_DP, dp_first.mesh.order[1] = TL_AXIS_TP;
  dp_first.mesh.order[2] = TL_AXIS_CP, dp_first.mesh.order[3] = TL_AXIS_PP;
  ASSERT_EQ(tl_plan_price_config(&dp_first, &c, &dp_in), TL_OK) << tl_last_error();
  std::printf(
      "dp 2 x tp 8 on 2 nodes: tp innermost t_tp %.3f ms, t_dp %.3f ms; dp innermost "
      "t_tp %.3f ms, t_dp %.3f ms\n",
      tp_in.t_tp * 1e3, tp_in.t_dp * 1e3, dp_in.t_tp * 1e3, dp_in.t_dp * 1e3);
  EXPECT_GT(dp_in.t_tp, 2 * tp_in.t_tp) << "tensor-parallel groups across nodes";
  EXPECT_LT(dp_in.t_dp, tp_in.t_dp) << "the data-parallel pairs inside a node";
  EXPECT_EQ(dp_in.mem_total, tp_in.mem_total) << "the layout moves no bytes";
  // the strides behind it: each axis's neighbours, ranks apart
  int st, sd, sp;
  tl_cost_axis_strides(&dp_in, &st, &sd, &sp);
  EXPECT_EQ(st, 2);
  EXPECT_EQ(sd, 1);
  EXPECT_EQ(sp, 16);
  tl_cost_axis_strides(&tp_in, &st, &sd, &sp);
  EXPECT_EQ(st, 1);
  EXPECT_EQ(sd, 8);
  // pipeline stages inside a node, tp outermost: stride dp x pp for tp
  struct tl_config pp_first = cfg;
  pp_first.mesh.dp = 1, pp_first.mesh.tp = 8, pp_first.mesh.pp = 2;
  pp_first.mesh.order[0] = TL_AXIS_PP, pp_first.mesh.order[1] = TL_AXIS_DP;
  pp_first.mesh.order[2] = TL_AXIS_TP, pp_first.mesh.order[3] = TL_AXIS_CP;
  ASSERT_EQ(tl_plan_price_config(&pp_first, &c, &pp_in), TL_OK) << tl_last_error();
  tl_cost_axis_strides(&pp_in, &st, &sd, &sp);
  EXPECT_EQ(sp, 1);
  EXPECT_EQ(st, 2);
  // the pipeline's links, boundary by boundary: the node's while a pair of
  // neighbouring stages stays in one, the network's where it does not; a
  // stage pays its two boundaries' sends
  tl_plan pipe = tp_in;
  pipe.dp = 1, pipe.tp = 2, pipe.pp = 4;
  pipe.virtual_stages = 1;
  memset(pipe.order, 0, sizeof pipe.order);
  const double bytes = 8e6, intra = tl_cost_send(&c, bytes, &c.intra),
               inter = tl_cost_send(&c, bytes, &c.inter);
  for (int s = 0; s < 3; s++)
    EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, s), &c.intra) << "8 ranks, one node: " << s;
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), 2 * intra);
  pipe.tp = 4; /* stages of 4 ranks: 0 and 1 on the first node, 2 and 3 on the second */
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 0), &c.intra);
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 1), &c.inter) << "stages 1 and 2 on two nodes";
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 2), &c.intra);
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), inter + intra)
      << "the stages beside the node's edge send once across it";
  /* interleaved, 2 chunks a rank: every boundary carries 2 sends of a
   * micro-batch, the wrap (the last stage's chunk to the first's, across the
   * nodes) 1; stages 1 and 2 pay 2 x (intra + inter), stage 0 and 3 2 x
   * intra + 1 x inter */
  const auto schedule = pipe.schedule;
  pipe.schedule = TL_SCHEDULE_INTERLEAVED, pipe.virtual_stages = 2;
  ASSERT_EQ(tl_plan_chunks(&pipe), 2);
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 3), &c.inter) << "ranks 12-15 to 0-3";
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), 2 * (inter + intra));
  pipe.tp = 2;
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 3), &c.intra) << "ranks 6-7 to 0-1";
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), 4 * intra);
  /* two stages a node apart, 4 chunks a rank: a micro-batch crosses the
   * boundary 4 times each way and the wrap 3, one stage's sends in all:
   * 7, not 8 */
  pipe.tp = 8, pipe.pp = 2, pipe.virtual_stages = 4;
  ASSERT_EQ(tl_plan_chunks(&pipe), 4);
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), 7 * inter);
  pipe.schedule = schedule, pipe.virtual_stages = 1;
  pipe.tp = 8, pipe.pp = 2;
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 0), &c.inter) << "stages a node apart";
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), 2 * inter);
  pipe.order[0] = TL_AXIS_PP, pipe.order[1] = TL_AXIS_DP, pipe.order[2] = TL_AXIS_TP;
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 0), &c.intra)
      << "pp innermost: neighbours side by side";
  pipe.order[1] = TL_AXIS_PP;
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 0), &c.inter)
      << "not a permutation: the default order";
  // a pipeline of 8 two-rank stages over two nodes: one boundary of seven
  // crosses, and its stages pay the network's send once, not twice
  memset(pipe.order, 0, sizeof pipe.order);
  pipe.tp = 2, pipe.pp = 8;
  int crossing = 0;
  for (int s = 0; s < 7; s++) crossing += tl_cost_pp_boundary_link(&c, &pipe, s) == &c.inter;
  EXPECT_EQ(crossing, 1);
  EXPECT_EQ(tl_cost_pp_boundary_link(&c, &pipe, 3), &c.inter);
  EXPECT_DOUBLE_EQ(tl_cost_pp_sends(&c, &pipe, bytes), inter + intra);
  EXPECT_LT(inter + intra, 2 * inter);
  // a config written from a plan carries the plan's order; a search's plan
  // (no order) is written in the default one, whatever the base config's
  struct tl_config back;
  ASSERT_EQ(tl_plan_to_config(&dp_in, &cfg, cfg.train.seq_len, &c, TL_BF16, &back), TL_OK);
  EXPECT_EQ(back.mesh.order[0], TL_AXIS_DP);
  EXPECT_EQ(back.mesh.order[1], TL_AXIS_TP);
  tl_plan none = tp_in;
  memset(none.order, 0, sizeof none.order);
  ASSERT_EQ(tl_plan_to_config(&none, &dp_first, cfg.train.seq_len, &c, TL_BF16, &back), TL_OK);
  EXPECT_EQ(back.mesh.order[0], TL_AXIS_TP);
  EXPECT_EQ(back.mesh.order[1], TL_AXIS_CP);  // cp, of size 1, just outside tp
  EXPECT_EQ(back.mesh.order[2], TL_AXIS_DP);
  EXPECT_EQ(back.mesh.order[3], TL_AXIS_PP);
}

// `trellis train --cluster SPEC` prices the run before any rank starts and
// sets the measured step and bytes beside the price at the end; a spec
// that cannot price the run stops it, naming the spec and why.
TEST(PlanCli, TrainSetsTheMeasuredBesideThePrice) {
  std::string tokens = WriteTokens("priced", "The config never lies", 400);
  std::string cfg_path = TempPath("priced.json");
  std::ofstream(cfg_path) << R"({"model": {"kind": "gpt", "n_layers": 2, "n_heads": 4,
      "n_embd": 64, "vocab_size": 256, "max_seq_len": 64},
      "train": {"steps": 3, "batch_size": 4, "seq_len": 64, "sample_tokens": 0},
      "data": {"train": ")"
                          << tokens << "\"}}";
  struct tl_config cfg;
  ASSERT_EQ(tl_config_load(cfg_path.c_str(), &cfg), TL_OK) << tl_last_error();
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load(kThisMachine, &c), TL_OK) << tl_last_error();
  tl_plan p;
  ASSERT_EQ(tl_plan_price_config(&cfg, &c, &p), TL_OK) << tl_last_error();
  char step[64], bytes[64];
  std::snprintf(step, sizeof step, "priced on this_machine (--cluster): %.1f ms a step",
                p.t_step * 1e3);
  std::snprintf(bytes, sizeof bytes, "priced on this_machine: %.2f MB on the fullest rank",
                (p.mem_state + p.mem_act) / 1e6);
  std::string metrics = TempPath("priced.jsonl");
  PlanRun t = Shell("launcher/trellis train " + cfg_path + " --cluster " + kThisMachine +
                    " --metrics " + metrics);
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find(step), std::string::npos) << step << "\n" << t.output;
  EXPECT_NE(t.output.find("ms a step; measured "), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("median"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("over the 2 steps after the first"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find(bytes), std::string::npos) << bytes << "\n" << t.output;
  // the allocator's peak is what the plan prices for one rank's state and
  // activations (PredictedBytesMatchTheAllocatorsPeak): within 10%
  size_t at = t.output.find("allocator peaked at ");
  ASSERT_NE(at, std::string::npos) << t.output;
  double peak_mb = std::atof(t.output.c_str() + at + 20);
  EXPECT_NEAR(peak_mb / ((p.mem_state + p.mem_act) / 1e6), 1.0, 0.10) << t.output;
  // --metrics ends with the same figures, a line for scripts
  std::ifstream m(metrics);
  std::string line, last;
  while (std::getline(m, line)) last = line;
  json_t* rec = json_loads(last.c_str(), 0, nullptr);
  ASSERT_NE(rec, nullptr) << last;
  EXPECT_EQ(json_integer_value(json_object_get(rec, "step")), 3);
  json_t* pr = json_object_get(rec, "priced");
  json_t* me = json_object_get(rec, "measured");
  EXPECT_STREQ(json_string_value(json_object_get(pr, "cluster")), "this_machine");
  EXPECT_NEAR(json_number_value(json_object_get(pr, "step_ms")), p.t_step * 1e3,
              1e-9 * p.t_step * 1e3);
  EXPECT_GT(json_number_value(json_object_get(me, "median_ms")), 0);
  EXPECT_NEAR(json_number_value(json_object_get(me, "peak_bytes")) / 1e6, peak_mb, 0.01);
  json_decref(rec);

  PlanRun missing = Shell("launcher/trellis train " + cfg_path + " --cluster no_such_spec.json");
  EXPECT_EQ(missing.status, 2) << missing.output;
  EXPECT_NE(missing.output.find("trellis train: --cluster: "), std::string::npos) << missing.output;
  EXPECT_NE(missing.output.find("cannot open cluster file no_such_spec.json"), std::string::npos)
      << missing.output;
  EXPECT_EQ(missing.output.find("step 1/"), std::string::npos) << missing.output;
  PlanRun bare = Shell("launcher/trellis train " + cfg_path + " --cluster");
  EXPECT_EQ(bare.status, 2) << bare.output;
  EXPECT_NE(bare.output.find("trellis train: --cluster: expected a value (--cluster SPEC.json)"),
            std::string::npos)
      << bare.output;
  PlanRun gpu =
      Shell("launcher/trellis train " + cfg_path + " --cluster examples/clusters/dgx_a100.json");
  EXPECT_EQ(gpu.status, 2) << gpu.output;
  EXPECT_NE(gpu.output.find("cluster dgx_a100 is a cuda cluster; the config trains on cpu "
                            "(device.type)"),
            std::string::npos)
      << gpu.output;
  std::string four = TempPath("priced_four.json");
  std::ofstream(four) << R"({"model": {"kind": "gpt", "n_layers": 2, "n_heads": 4,
      "n_embd": 64, "vocab_size": 256, "max_seq_len": 64}, "mesh": {"dp": 4},
      "train": {"steps": 3, "batch_size": 4, "seq_len": 64, "sample_tokens": 0},
      "data": {"train": ")"
                      << tokens << "\"}}";
  PlanRun wide = Shell("launcher/trellis train " + four + " --cluster " + kThisMachine);
  EXPECT_EQ(wide.status, 2) << wide.output;
  EXPECT_NE(wide.output.find("the mesh's 4 ranks (dp 4 x tp 1 x pp 1) are more than the 2 "
                             "devices of cluster this_machine"),
            std::string::npos)
      << wide.output;
  EXPECT_EQ(wide.output.find("starting"), std::string::npos) << "no rank starts\n" << wide.output;
  // a job of 2 ranks: rank 0 prices it again and every rank's peak counts
  std::string two = TempPath("priced_two.json");
  std::ofstream(two) << R"({"model": {"kind": "gpt", "n_layers": 2, "n_heads": 4,
      "n_embd": 64, "vocab_size": 256, "max_seq_len": 64}, "mesh": {"dp": 2},
      "train": {"steps": 3, "batch_size": 4, "seq_len": 64, "sample_tokens": 0},
      "data": {"train": ")"
                     << tokens << "\"}}";
  ASSERT_EQ(tl_config_load(two.c_str(), &cfg), TL_OK) << tl_last_error();
  ASSERT_EQ(tl_plan_price_config(&cfg, &c, &p), TL_OK) << tl_last_error();
  std::snprintf(step, sizeof step, "priced on this_machine (--cluster): %.1f ms a step",
                p.t_step * 1e3);
  std::string job_metrics = TempPath("priced_two.jsonl");
  PlanRun job = Shell("launcher/trellis train " + two + " --cluster " + kThisMachine +
                      " --metrics " + job_metrics);
  ASSERT_EQ(job.status, 0) << job.output;
  EXPECT_NE(job.output.find(step), std::string::npos) << step << "\n" << job.output;
  EXPECT_NE(job.output.find("over the 2 steps after the first"), std::string::npos) << job.output;
  EXPECT_NE(job.output.find("allocator peaked at "), std::string::npos) << job.output;
  // the data-parallel time the plan shows, beside what the least waiting rank waited on it
  char dp[160];
  std::snprintf(dp, sizeof dp,
                "priced on this_machine: data-parallel communication shows %.1f ms a step (%.1f "
                "ms on the link); the rank that waited least on it waited ",
                p.t_dp * 1e3, p.c_dp * 1e3);
  EXPECT_NE(job.output.find(dp), std::string::npos) << dp << "\n" << job.output;
  std::ifstream jm(job_metrics);
  for (last.clear(); std::getline(jm, line);) last = line;
  rec = json_loads(last.c_str(), 0, nullptr);
  ASSERT_NE(rec, nullptr) << last;
  EXPECT_NEAR(json_number_value(json_object_get(json_object_get(rec, "priced"), "dp_ms")),
              p.t_dp * 1e3, 1e-9 + 1e-9 * p.t_dp * 1e3);
  json_t* waited = json_object_get(json_object_get(rec, "measured"), "dp_wait_median_ms");
  EXPECT_TRUE(json_is_number(waited)) << last;
  EXPECT_GT(json_number_value(waited), 0) << last;
  json_decref(rec);
}

// Context parallelism priced from a config: the ring's transfers on the cp
// group's link (the node's while the group stays in one, the network's when
// mesh.order puts it across nodes), every hop's bytes as the ring moves
// them; the split sequence's activations about halved at cp 2.
TEST(Price, ContextParallelRingOnItsGroupsLink) {
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.model.kind = TL_MODEL_LLAMA;
  cfg.model.n_layers = 4, cfg.model.n_heads = 8, cfg.model.n_kv_heads = 2;
  cfg.model.n_embd = 512, cfg.model.ffn_hidden = 1408, cfg.model.vocab_size = 4096;
  cfg.model.max_seq_len = 4096;
  cfg.train.seq_len = 4096, cfg.train.batch_size = 4;
  cfg.mesh.dp = 2, cfg.mesh.tp = 4, cfg.mesh.cp = 2;
  cfg.schedule.micro_batches = 2;
  cfg.device.type = TL_DEVICE_CUDA, cfg.train.precision = TL_PRECISION_BF16;
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_h100.json", &c), TL_OK) << tl_last_error();
  tl_plan inside, across, whole;
  ASSERT_EQ(tl_plan_price_config(&cfg, &c, &inside), TL_OK) << tl_last_error();
  EXPECT_EQ(inside.cp, 2);
  EXPECT_EQ(tl_cost_axis_stride(&inside, TL_AXIS_CP), 4);
  // by hand: a rank's key/value block of its 2048 rows, 2 key/value heads
  // of 64 over tp 4: k and v a hop in bf16, 1 hop forward and 1 backward;
  // their gradients in fp32, 2 hops backward; per layer, 4 layers, 2
  // micro-batches
  const double block = 1 * 2048 * 64 * 2 / 4;
  const double hop = tl_cost_send(&c, 2 * block * 2, &c.intra),
               dhop = tl_cost_send(&c, 2 * block * 4, &c.intra);
  EXPECT_NEAR(inside.c_cp, 2 * 4 * (2 * hop + 2 * dhop), 1e-12);
  EXPECT_GT(inside.t_cp, 0);
  EXPECT_LE(inside.t_cp, inside.c_cp) << "what shows is part of what moves";
  struct tl_config far = cfg;  // cp outermost: its pairs a node apart
  far.mesh.order[0] = TL_AXIS_TP, far.mesh.order[1] = TL_AXIS_DP;
  far.mesh.order[2] = TL_AXIS_PP, far.mesh.order[3] = TL_AXIS_CP;
  ASSERT_EQ(tl_plan_price_config(&far, &c, &across), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_cost_axis_stride(&across, TL_AXIS_CP), 8);
  EXPECT_NEAR(across.c_cp,
              2 * 4 *
                  (2 * tl_cost_send(&c, 4 * block, &c.inter) +
                   2 * tl_cost_send(&c, 8 * block, &c.inter)),
              1e-12);
  EXPECT_GT(across.t_cp, inside.t_cp);
  // the data group, dp x cp: two of its four ranks on a node in either
  // layout (2 cards' rate across the network); all four with dp and cp
  // innermost
  EXPECT_DOUBLE_EQ(tl_cost_data_link(&c, &inside).bandwidth, 2 * c.inter.bandwidth);
  EXPECT_DOUBLE_EQ(tl_cost_data_link(&c, &across).bandwidth, 2 * c.inter.bandwidth);
  tl_plan data_in = inside;
  data_in.order[0] = TL_AXIS_DP, data_in.order[1] = TL_AXIS_CP;
  data_in.order[2] = TL_AXIS_TP, data_in.order[3] = TL_AXIS_PP;
  EXPECT_DOUBLE_EQ(tl_cost_data_link(&c, &data_in).bandwidth, c.intra.bandwidth);
  // the same tokens a rank without the split: twice the activations
  struct tl_config one = cfg;
  one.mesh.cp = 1;
  ASSERT_EQ(tl_plan_price_config(&one, &c, &whole), TL_OK) << tl_last_error();
  EXPECT_EQ(whole.t_cp, 0);
  EXPECT_GT(whole.mem_act, 1.8 * inside.mem_act);
  EXPECT_LT(whole.mem_act, 2.2 * inside.mem_act);
}
