// What `trellis plan` reports and refuses: the ranked table as JSON with
// its rejections, --fix keeping the given split and naming an impossible
// one, the schedule's SVG, the exposed data-parallel time with overlap
// off, bad usage and bad input, no split of all devices (plans on fewer),
// every plan over memory naming the fewest nodes that hold one, fused
// attention's price, long sequences split by context parallelism. Plans
// that become configs and train are plan_train_test's.
#include <gtest/gtest.h>
#include <jansson.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

extern "C" {
#include "core/config.h"
#include "kernels/backend.h"
#include "planner/recommend.h"
#include "planner/search.h"
#include "tp/tp.h"
}

#include "tests/planner/plan_cli.h"

TEST(PlanCli, JsonListsPlansAndRejections) {
  PlanRun r =
      Plan(std::string("--model ") + kSmall +
           " --cluster examples/clusters/dgx_a100.json --nodes 1 --batch 64 --top 3 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  json_error_t err;
  json_t* root = json_loads(r.output.c_str(), 0, &err);
  ASSERT_NE(root, nullptr) << err.text << "\n" << r.output;
  json_t* plans = json_object_get(root, "plans");
  ASSERT_TRUE(json_is_array(plans));
  EXPECT_EQ(json_array_size(plans), 3u);
  json_t* first = json_array_get(plans, 0);
  EXPECT_EQ(json_integer_value(json_object_get(first, "dp")) *
                json_integer_value(json_object_get(first, "tp")) *
                json_integer_value(json_object_get(first, "pp")) *
                json_integer_value(json_object_get(first, "cp")),
            8);
  EXPECT_GT(json_real_value(json_object_get(first, "step_s")), 0);
  // the spec's reserve (2 GB) and its allocator's 9% of the tensors
  double tensors = json_number_value(json_object_get(first, "memory_state_bytes")) +
                   json_number_value(json_object_get(first, "memory_activation_bytes"));
  EXPECT_NEAR(json_number_value(json_object_get(first, "memory_bytes")), 2e9 + 1.09 * tensors,
              1e-5 * (2e9 + tensors));
  EXPECT_TRUE(json_is_object(json_object_get(root, "rejected")));
  EXPECT_TRUE(json_is_integer(json_object_get(json_object_get(root, "rejected"), "memory")));
  json_decref(root);
}

TEST(PlanCli, FixKeepsTheGivenSplit) {
  PlanRun r = Plan(std::string("--model ") + kSmall +
                   " --cluster examples/clusters/dgx_a100.json --nodes 1 --batch 64 --json"
                   " --fix dp=2,tp=2,pp=2,micro_batch=4,schedule=gpipe");
  ASSERT_EQ(r.status, 0) << r.output;
  json_t* root = json_loads(r.output.c_str(), 0, nullptr);
  ASSERT_NE(root, nullptr) << r.output;
  json_t* plans = json_object_get(root, "plans");
  ASSERT_GT(json_array_size(plans), 0u);
  for (size_t i = 0; i < json_array_size(plans); i++) {
    json_t* p = json_array_get(plans, i);
    EXPECT_EQ(json_integer_value(json_object_get(p, "tp")), 2);
    EXPECT_EQ(json_integer_value(json_object_get(p, "micro_batches")), 8);
    EXPECT_STREQ(json_string_value(json_object_get(p, "schedule")), "gpipe");
    // the tied embedding's gradient summed over the two stages, part of
    // the pipeline's communication
    const double tied = json_number_value(json_object_get(p, "pp_comm_tied_s"));
    EXPECT_GT(tied, 0);
    EXPECT_LT(tied, json_number_value(json_object_get(p, "pp_comm_s")));
    // the trainer runs tensor parallelism, every ZeRO stage and recomputation
    std::string rc = json_string_value(json_object_get(p, "recompute"));
    EXPECT_TRUE(rc == "none" || rc == "selective" || rc == "full") << rc;
    EXPECT_TRUE(json_is_true(json_object_get(p, "runnable")));
  }
  json_decref(root);
}

TEST(PlanCli, SvgDrawsEveryForwardAndBackwardOfTheWinner) {
  std::string svg = TempPath("plan.svg");
  PlanRun r = Plan(std::string("--model ") + kSmall +
                   " --cluster examples/clusters/dgx_a100.json --nodes 1 --batch 64 --svg " + svg +
                   " --fix dp=2,tp=2,pp=2,micro_batches=8,schedule=1f1b");
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.rfind("<svg ", 0), 0u) << text.substr(0, 200);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  int fwd = 0, bwd = 0;
  for (size_t at = 0; (at = text.find("class=\"", at)) != std::string::npos; at++) {
    fwd += text.compare(at + 7, 4, "fwd\"") == 0;
    bwd += text.compare(at + 7, 4, "bwd\"") == 0;
  }
  EXPECT_EQ(fwd, 2 * 8);  // 2 stages x 8 micro-batches
  EXPECT_EQ(bwd, 2 * 8);
  EXPECT_NE(text.find("devices 7-8"), std::string::npos);  // replica 1, stage 1, tp 2
  EXPECT_NE(text.find("idle 11%"), std::string::npos);     // (p-1)/(m+p-1) = 1/9
}

TEST(PlanCli, SvgDrawsEveryChunkOfAnInterleavedWinner) {
  std::string svg = TempPath("plan_interleaved.svg");
  PlanRun r = Plan(std::string("--model ") + kSmall +
                   " --cluster examples/clusters/dgx_a100.json --nodes 1 --batch 64 --svg " + svg +
                   " --fix dp=2,tp=2,pp=2,micro_batches=8,schedule=interleaved,virtual_stages=2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("int:2"), std::string::npos) << r.output;
  std::ifstream in(svg);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int fwd = 0, bwd = 0;
  for (size_t at = 0; (at = text.find("class=\"", at)) != std::string::npos; at++) {
    fwd += text.compare(at + 7, 4, "fwd\"") == 0;
    bwd += text.compare(at + 7, 4, "bwd\"") == 0;
  }
  EXPECT_EQ(fwd, 2 * 2 * 8);  // 2 stages x 2 chunks x 8 micro-batches
  EXPECT_EQ(bwd, 2 * 2 * 8);
  EXPECT_NE(text.find("chunk 1"), std::string::npos);
  // a chunk's passes: the ideal 3 x 8 x 2 = 48 ticks, (p-1) x 3 = 3 idle
  EXPECT_NE(text.find("idle 6%"), std::string::npos);  // 3 / 51
}

// --fix overlap=0 prices a published run that overlapped nothing: the same
// split's data-parallel time grows, the rest stays; it never goes to --out,
// which trellis train would run overlapped.
TEST(PlanCli, FixOverlapZeroExposesTheDataParallelTime) {
  auto step = [](const std::string& overlap, double* dp_s) {
    PlanRun r = Plan(std::string("--model ") + kSmall +
                     " --cluster examples/clusters/dgx_a100.json --nodes 2 --batch 64 --json"
                     " --fix dp=16,tp=1,pp=1,micro_batch=2,micro_batches=2,zero=3,bucket_mb=25,"
                     "recompute=none" +
                     overlap);
    EXPECT_EQ(r.status, 0) << r.output;
    json_error_t err;
    json_t* root = json_loads(r.output.c_str(), 0, &err);
    EXPECT_NE(root, nullptr) << err.text << "\n" << r.output;
    if (!root) return 0.0;
    json_t* first = json_array_get(json_object_get(root, "plans"), 0);
    double s = json_real_value(json_object_get(first, "step_s"));
    *dp_s = json_real_value(json_object_get(first, "dp_comm_s"));
    json_decref(root);
    return s;
  };
  double dp_on = 0, dp_off = 0, dp_default = 0;
  double on = step(",overlap=1", &dp_on), off = step(",overlap=0", &dp_off);
  EXPECT_DOUBLE_EQ(step("", &dp_default), on);
  EXPECT_GT(dp_off, dp_on);
  // to the JSON's 6 significant digits (each figure within 5e-6 of itself)
  EXPECT_NEAR(off - dp_off, on - dp_on, 5e-6 * (on + off)) << "only the data-parallel time moves";
  PlanRun r =
      Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " --fix overlap=2");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--fix overlap=2: expected 0 or 1"), std::string::npos) << r.output;
  std::string out = TempPath("plan_no_overlap.json");
  std::remove(out.c_str());
  r = Plan(std::string("--model ") + kSmall + " --cluster examples/clusters/dgx_a100.json" +
           " --nodes 1 --fix overlap=0 --out " + out);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--fix overlap=0 with --out"), std::string::npos) << r.output;
  std::ifstream f(out);
  EXPECT_FALSE(f.good()) << "nothing written";
}

TEST(PlanCli, BadUsageAndBadInput) {
  EXPECT_EQ(Plan("--cluster x.json").status, 2);
  PlanRun r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " --fix tq=2");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--fix tq: unknown"), std::string::npos) << r.output;
  r = Plan(std::string("--model ") + kSmall + " --cluster no/such.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("no/such.json"), std::string::npos) << r.output;
  // nothing fits: no file left behind
  std::string out = TempPath("plan_none.json");
  std::remove(out.c_str());
  r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine +
           " --fix dp=2,tp=2 --out " + out);
  EXPECT_EQ(r.status, 1) << r.output;
  std::ifstream f(out);
  EXPECT_FALSE(f.good()) << "no partial output";
  // a file that could not be written at the end is refused at the start:
  // before the search, and before --calibrate measures anything
  const std::string nowhere = TempPath("no_such_dir") + "/p.json";
  for (const std::string flag : {"--out", "--svg"}) {
    r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " " + flag + " " +
             nowhere);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("trellis plan: " + flag + " " + nowhere + ": cannot write into '" +
                            TempPath("no_such_dir") + "': No such file or directory"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("plans priced"), std::string::npos) << r.output;
  }
  r = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine + " --out " +
           TempPath(""));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("a directory; expected a file name"), std::string::npos) << r.output;
  r = Plan("--calibrate " + nowhere + " --ranks 1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--calibrate " + nowhere + ": cannot write into"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("calibrated"), std::string::npos) << r.output;
}

// The issue's case as a person meets it: a 4-layer model at batch 64 on the
// shipped 3072-GPU A100 spec. No split uses every device; trellis plan says
// why, plans fewer devices (by step time, and the most tokens/s per
// device), and --out writes the fastest as a config for its devices.
TEST(PlanCli, NoSplitOfAllDevicesSaysWhyAndPlansFewer) {
  std::string model = TempPath("four_layers.json"), out = TempPath("fewer_plan.json");
  std::ofstream(model) << R"({"model": {"n_layers": 4, "n_heads": 16, "n_embd": 1024,
      "vocab_size": 131072, "max_seq_len": 1024}, "train": {"batch_size": 64, "seq_len": 1024}})";
  std::remove(out.c_str());
  // (without context parallelism: cp 2 with pp 3 would use all 3072)
  PlanRun r = Plan("--model " + model +
                   " --cluster examples/clusters/dgx_a100.json --top 3 --fix cp=1 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no split of all 3072 devices fits: every dp x tp x pp"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("at most 2048 devices of whole nodes (dp 64 x tp 8 x pp 4)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("searched fewer devices:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("devices rank    dp"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("most tokens/s per device ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hwTFLOP/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on fewer devices)"), std::string::npos) << r.output;
  struct tl_config cfg;
  ASSERT_EQ(tl_config_load(out.c_str(), &cfg), TL_OK) << tl_last_error();
  EXPECT_LT(cfg.mesh.dp * cfg.mesh.tp * cfg.mesh.pp, 3072);
  EXPECT_EQ(64 % cfg.mesh.dp, 0);

  // --json carries the reason and the plans on fewer devices
  PlanRun j =
      Plan("--model " + model + " --cluster examples/clusters/dgx_a100.json --fix cp=1 --json");
  ASSERT_EQ(j.status, 0) << j.output;
  json_t* root = PlanJson(j);
  ASSERT_NE(root, nullptr) << j.output;
  EXPECT_NE(std::string(json_string_value(json_object_get(root, "why_none_fits")))
                .find("at most 2048 devices"),
            std::string::npos);
  json_t* fewer = json_object_get(root, "fewer_devices");
  ASSERT_GT(json_array_size(fewer), 0u);
  EXPECT_LT(json_integer_value(json_object_get(json_array_get(fewer, 0), "devices")), 3072);
  json_decref(root);
}

// Every split of the cluster's devices over memory: GPT-3 175B on the
// shipped four H100 nodes. trellis plan names the least hungry plan, then
// the fewest nodes of that kind above them on which one fits and its
// plans; it writes nothing (those nodes were not planned) and exits 1;
// `--nodes` that many plans them. Where a --fix sends it to fewer devices
// first and none fits there either, it searches more too; a whole fixed
// mesh uses its devices and no more; a model no count fits says which
// counts were searched.
TEST(PlanCli, EveryPlanOverMemoryNamesTheFewestNodesThatHoldIt) {
  std::string model = TempPath("gpt3_175b.json"), out = TempPath("more_nodes_plan.json");
  std::ofstream(model) << R"({"model": {"n_layers": 96, "n_heads": 96, "n_embd": 12288,
      "vocab_size": 51200, "max_seq_len": 2048}, "train": {"batch_size": 1536, "seq_len": 2048}})";
  std::remove(out.c_str());
  const std::string base = "--model " + model + " --cluster examples/clusters/dgx_h100.json";
  PlanRun r = Plan(base + " --top 3 --out " + out);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("The least memory any needs is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("searched more nodes: the fewest dgx_h100 nodes above 4 with a plan "
                          "that fits: 5 (40 devices; the spec lists 4; 1 node count searched,"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("\n     40    1 "), std::string::npos) << "a row of 40 devices\n"
                                                                 << r.output;
  EXPECT_NE(r.output.find("(`--nodes 5` plans them, and --out then writes the best)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the fewest nodes above them with a plan that fits: 5 (listed above)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(access(out.c_str(), F_OK), 0) << "nothing written for nodes not planned";

  PlanRun j = Plan(base + " --json");
  EXPECT_EQ(j.status, 1) << j.output;
  json_t* root = PlanJson(j);
  ASSERT_NE(root, nullptr) << j.output;
  json_t* more = json_object_get(root, "more_nodes");
  EXPECT_EQ(json_integer_value(json_object_get(more, "nodes")), 5);
  EXPECT_EQ(json_integer_value(json_object_get(more, "devices")), 40);
  EXPECT_EQ(json_integer_value(json_object_get(more, "nodes_searched_up_to")), 5);
  json_t* first = json_array_get(json_object_get(more, "plans"), 0);
  EXPECT_EQ(json_integer_value(json_object_get(first, "devices")), 40);
  EXPECT_LT(json_number_value(json_object_get(first, "memory_bytes")), 85.52e9);
  json_decref(root);

  PlanRun five = Plan(base + " --nodes 5 --top 1");
  EXPECT_EQ(five.status, 0) << five.output;
  EXPECT_EQ(five.output.find("searched more nodes"), std::string::npos) << five.output;
  // --nodes below the spec's: both counts said
  PlanRun two = Plan(base + " --nodes 2 --top 1");
  EXPECT_EQ(two.status, 1) << two.output;
  EXPECT_NE(two.output.find("above 2 with a plan that fits: 5 (40 devices; --nodes 2, the spec "
                            "lists 4;"),
            std::string::npos)
      << two.output;
  // dp=3: no split of 32 devices has it, none of fewer fits; 48 do
  PlanRun dp3 = Plan(base + " --fix dp=3 --top 1");
  EXPECT_EQ(dp3.status, 1) << dp3.output;
  EXPECT_NE(dp3.output.find("none fits on fewer devices either"), std::string::npos) << dp3.output;
  EXPECT_NE(dp3.output.find("with a plan that fits: 6 (48 devices;"), std::string::npos)
      << dp3.output;

  // a micro-batch no replica's share makes: memory is not the reason, and
  // more nodes are not searched
  PlanRun mb7 = Plan(base + " --fix micro_batch=7");
  EXPECT_EQ(mb7.status, 1) << mb7.output;
  EXPECT_EQ(mb7.output.find("searched more nodes"), std::string::npos) << mb7.output;

  PlanRun fixed = Plan(base + " --fix dp=1,tp=8,pp=4,cp=1");
  EXPECT_EQ(fixed.status, 1) << fixed.output;
  EXPECT_NE(fixed.output.find("The least memory any needs is"), std::string::npos) << fixed.output;
  EXPECT_EQ(fixed.output.find("searched more nodes"), std::string::npos) << fixed.output;

  // 8 layers of 65536 channels at 1M tokens: no count fits; the counts
  // searched are the two a mesh fills up to 64 x 8 x 8 devices
  std::string huge = TempPath("huge.json");
  std::ofstream(huge) << R"({"model": {"n_layers": 8, "n_heads": 128, "n_embd": 65536,
      "vocab_size": 51200, "max_seq_len": 1048576},
      "train": {"batch_size": 64, "seq_len": 1048576}})";
  PlanRun none = Plan("--model " + huge + " --cluster examples/clusters/dgx_a100.json --fix cp=1");
  EXPECT_EQ(none.status, 1) << none.output;
  EXPECT_NE(none.output.find("searched more nodes: no plan fits on 385 to 512 nodes of dgx_a100 "
                             "either (2 node counts a mesh fills,"),
            std::string::npos)
      << none.output;
}

// --fix attention=fused prices a published run's fused (flash) attention:
// at TL_CLUSTER_FUSED_ATTENTION of the products' efficiency, as a spec with
// that attention_efficiency would. Refused with --out (trellis's CUDA
// attention is a fallback kernel), on a CPU cluster, and misspelt.
TEST(PlanCli, AFusedAttentionFixPricesAttentionAtHalfTheProductsRate) {
  std::string model = TempPath("mpt7b.json");
  std::ofstream(model) << R"({"model": {"n_layers": 32, "n_heads": 32, "n_embd": 4096,
      "vocab_size": 50368, "max_seq_len": 2048}, "train": {"batch_size": 96, "seq_len": 2048}})";
  std::ifstream in("examples/clusters/dgx_a100.json");
  std::string spec((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "\"attention_efficiency\": 0.1,";
  size_t at = spec.find(key);
  ASSERT_NE(at, std::string::npos) << "the shipped A100 spec's attention efficiency moved";
  char fused[64];
  std::snprintf(fused, sizeof fused, "\"attention_efficiency\": %.17g,",
                TL_CLUSTER_FUSED_ATTENTION * 0.65);
  ASSERT_NE(spec.find("\"compute_efficiency\": 0.65,"), std::string::npos);
  std::string halved = TempPath("a100_fused.json");
  std::ofstream(halved) << spec.replace(at, key.size(), fused);
  const std::string fix =
      " --nodes 1 --json --fix dp=8,tp=1,pp=1,micro_batch=1,zero=3,recompute=full";
  auto step = [&](const std::string& args) {
    PlanRun r = Plan("--model " + model + args);
    EXPECT_EQ(r.status, 0) << r.output;
    json_t* root = PlanJson(r);
    if (!root) return -1.0;
    double t = json_number_value(
        json_object_get(json_array_get(json_object_get(root, "plans"), 0), "step_s"));
    json_decref(root);
    return t;
  };
  const double with_spec = step(" --cluster examples/clusters/dgx_a100.json" + fix);
  const double with_fused =
      step(" --cluster examples/clusters/dgx_a100.json" + fix + ",attention=fused");
  const double with_halved = step(" --cluster " + halved + fix);
  std::printf("7B, 8 A100s: step %.3f s with the spec's attention, %.3f s fused\n", with_spec,
              with_fused);
  EXPECT_GT(with_fused, 0);
  EXPECT_DOUBLE_EQ(with_fused, with_halved);
  EXPECT_LT(with_fused, 0.95 * with_spec) << "attention is a tenth of the FLOPs at 2048 tokens";
  EXPECT_DOUBLE_EQ(step(" --cluster examples/clusters/dgx_a100.json" + fix + ",attention=spec"),
                   with_spec);

  PlanRun out = Plan("--model " + model +
                     " --cluster examples/clusters/dgx_a100.json --fix attention=fused --out " +
                     TempPath("fused_plan.json"));
  EXPECT_EQ(out.status, 2) << out.output;
  EXPECT_NE(out.output.find("--fix attention=fused with --out"), std::string::npos) << out.output;
  PlanRun cpu = Plan("--model " + model + " --cluster " + kThisMachine + " --fix attention=fused");
  EXPECT_EQ(cpu.status, 2) << cpu.output;
  EXPECT_NE(cpu.output.find("on the CPU cluster"), std::string::npos) << cpu.output;
  PlanRun bad =
      Plan("--model " + model + " --cluster examples/clusters/dgx_a100.json --fix attention=flash");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--fix attention=flash: expected fused"), std::string::npos)
      << bad.output;
}

// A --fix no split can satisfy names the constraint (and the flag that
// lifts it); a fixed split over memory gives its memory, parts and time.
TEST(PlanCli, AnImpossibleFixSaysWhichConstraint) {
  std::string wide = TempPath("sixteen_heads.json");
  std::ofstream(wide) << R"({"model": {"n_layers": 4, "n_heads": 16, "n_embd": 1024,
      "vocab_size": 50257, "max_seq_len": 1024}, "train": {"batch_size": 64, "seq_len": 1024}})";
  PlanRun r =
      Plan("--model " + wide + " --cluster examples/clusters/dgx_a100.json --nodes 2 --fix tp=16");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("tp must stay within a node's 8 devices (--allow-tp-across-nodes"),
            std::string::npos)
      << r.output;
  std::string big = TempPath("twenty_b.json");
  std::ofstream(big) << R"({"model": {"n_layers": 44, "n_heads": 48, "n_embd": 6144,
      "vocab_size": 50257, "max_seq_len": 2048}, "train": {"batch_size": 64, "seq_len": 2048}})";
  PlanRun m = Plan("--model " + big +
                   " --cluster examples/clusters/dgx_a100.json --nodes 1 --fix dp=8,zero=0");
  EXPECT_EQ(m.status, 1) << m.output;
  EXPECT_NE(m.output.find("The least memory any needs is"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("GB over; its step would take"), std::string::npos) << m.output;
  // a schedule's own rules, named where the fixed schedule breaks them
  PlanRun i = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine +
                   " --fix schedule=interleaved,virtual_stages=4,pp=2");
  EXPECT_EQ(i.status, 1) << i.output;
  EXPECT_NE(i.output.find("every chunk a layer (pp x virtual_stages <= the 4 layers)"),
            std::string::npos)
      << i.output;
  EXPECT_EQ(i.output.find("micro_batch x micro_batches"), std::string::npos) << i.output;
  PlanRun v = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine +
                   " --fix virtual_stages=3,schedule=1f1b");
  EXPECT_EQ(v.status, 1) << v.output;
  EXPECT_NE(v.output.find("virtual_stages > 1 is the interleaved schedule's"), std::string::npos)
      << v.output;
  PlanRun z = Plan(std::string("--model ") + kSmall + " --cluster " + kThisMachine +
                   " --fix schedule=zero_bubble,zero=2");
  EXPECT_EQ(z.status, 1) << z.output;
  EXPECT_NE(z.output.find("zero-bubble runs a GPT, with ZeRO 0 or 1"), std::string::npos)
      << z.output;
  // a fixed dimension no mesh of any size can have names the rule it
  // breaks, not the rules of the cluster's own device count
  const std::string a100 =
      std::string("--model ") + kSmall + " --cluster " + "examples/clusters/dgx_a100.json --fix ";
  struct {
    const char *fix, *want;
  } never[] = {
      {"dp=3", "No mesh of any size has dp=3: dp must divide the global batch (8 sequences)"},
      {"tp=3", "No mesh of any size has tp=3: tp must divide the 4 heads"},
      {"pp=5", "no mesh of any size has pp=5: pp must be at most the 4 layers"},
      {"dp=3,tp=3", "no mesh of any size has dp=3, tp=3: tp must divide the 4 heads"},
  };
  for (const auto& k : never) {
    PlanRun n = Plan(a100 + k.fix);
    EXPECT_EQ(n.status, 1) << n.output;
    EXPECT_NE(n.output.find(k.want), std::string::npos) << k.fix << "\n" << n.output;
  }
  PlanRun some = Plan(a100 + "dp=4");
  EXPECT_EQ(some.output.find("of any size"), std::string::npos) << some.output;
}

// Context parallelism is searched: Llama 3 8B on the shipped four H100
// nodes at 8K tokens splits no sequence, at 32K and 128K the winner does
// (cp > 1). At 128K without it (--fix cp=1) the best plan must recompute
// every block to fit and is slower; --out writes the winner's mesh.cp.
TEST(PlanCli, LongSequencesSplitTheSequenceWhereMemoryNeedsIt) {
  std::string model = TempPath("llama3_8b_long.json"), out = TempPath("long_plan.json");
  std::ofstream(model) << R"({"model": {"kind": "llama", "n_layers": 32, "n_heads": 32,
      "n_kv_heads": 8, "n_embd": 4096, "ffn_hidden": 14336, "vocab_size": 128256,
      "max_seq_len": 131072, "rope_theta": 500000},
      "train": {"batch_size": 64, "seq_len": 131072, "precision": "bf16"}})";
  auto first = [](const PlanRun& r, const char* key) {
    json_t* root = PlanJson(r);
    json_t* p = json_array_get(json_object_get(root, "plans"), 0);
    double v = p ? json_number_value(json_object_get(p, key)) : -1;
    json_decref(root);
    return v;
  };
  const std::string base =
      "--model " + model + " --cluster examples/clusters/dgx_h100.json --top 3 --json";
  PlanRun short_seq = Plan(base + " --seq 8192");
  ASSERT_EQ(short_seq.status, 0) << short_seq.output;
  EXPECT_EQ(first(short_seq, "cp"), 1) << short_seq.output;
  PlanRun mid = Plan(base + " --seq 32768");
  ASSERT_EQ(mid.status, 0) << mid.output;
  EXPECT_GT(first(mid, "cp"), 1) << mid.output;
  std::remove(out.c_str());
  PlanRun lng = Plan(base + " --out " + out);
  ASSERT_EQ(lng.status, 0) << lng.output;
  const double cp = first(lng, "cp");
  EXPECT_GT(cp, 1) << lng.output;
  EXPECT_GT(first(lng, "cp_comm_carried_s"), 0) << lng.output;
  PlanRun whole = Plan(base + " --fix cp=1");
  ASSERT_EQ(whole.status, 0) << whole.output;
  json_t* root = PlanJson(whole);
  json_t* p = json_array_get(json_object_get(root, "plans"), 0);
  ASSERT_NE(p, nullptr) << whole.output;
  EXPECT_STREQ(json_string_value(json_object_get(p, "recompute")), "full") << whole.output;
  EXPECT_GT(json_number_value(json_object_get(p, "step_s")), first(lng, "step_s"));
  json_decref(root);
  struct tl_config cfg;
  ASSERT_EQ(tl_config_load(out.c_str(), &cfg), TL_OK) << tl_last_error();
  EXPECT_EQ(cfg.mesh.cp, (int)cp);
  EXPECT_EQ(cfg.train.seq_len, 131072);
  EXPECT_EQ(cfg.mesh.dp * cfg.mesh.tp * cfg.mesh.pp * cfg.mesh.cp, 32);
  // a degree whose 2 cp chunks do not divide the sequence: refused, named
  PlanRun odd = Plan(base + " --fix cp=3");
  EXPECT_EQ(odd.status, 1) << odd.output;
  EXPECT_NE(odd.output.find("cp=3"), std::string::npos) << odd.output;
}
