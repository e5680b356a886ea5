// The cost model against published measured runs (planner/README.md lists
// every row and its source): each run is priced at its published split
// (--fix of everything the run fixed) on the shipped A100 spec, and the
// predicted step time and memory per GPU are compared with what was
// measured. Sources:
//   N21-T1  Narayanan et al. 2021, SC'21, Table 1 (Megatron-LM, PTD-P)
//   N21-T2  Narayanan et al. 2021, Table 2 (PTD-P and DeepSpeed ZeRO-3 rows)
//   K22     Korthikanti et al. 2022, Tables 3 and 5 (full recomputation
//           against selective recomputation with sequence parallelism)
//   S22     Smith et al. 2022 (Megatron-Turing NLG 530B), section 2.4
//   BS22    BigScience BLOOM-176B, train/tr11-176B-ml/chronicles-prequel.md,
//           the topology sweep of 2022-02-25 (Megatron-DeepSpeed, ZeRO-1,
//           iteration 2 of each run; memory as nvidia-smi read it)
// A figure given as TFLOP/s per GPU is turned into seconds per step with the
// FLOP count its paper used (96 B s l h^2 (1 + s/6h + V/16lh), recomputation
// counted).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "planner/cost.h"
#include "planner/search.h"
}

namespace {

enum Rc { kFull, kSelectiveSp };

struct Published {
  const char* source;
  const char* model;  // rows of one model and GPU count form a group
  int h, l, a, vocab;
  int gpus, t, p, mb, batch;
  Rc rc;
  int zero;
  double tflops;   // published TFLOP/s per GPU (96 B s l h^2 ... counting), or 0
  double seconds;  // published seconds per step, or 0
  double mem_gb;   // published memory per GPU (GB), or 0
};

constexpr int kV = 51200, kGpt2 = 50257, kBloom = 250680;

const Published kRuns[] = {
    // N21-T1: micro-batch 1, full recomputation, no ZeRO
    {"N21-T1", "1.7B", 2304, 24, 24, kV, 32, 1, 1, 1, 512, kFull, 0, 137, 0, 0},
    {"N21-T1", "3.6B", 3072, 30, 32, kV, 64, 2, 1, 1, 512, kFull, 0, 138, 0, 0},
    {"N21-T1", "7.5B", 4096, 36, 32, kV, 128, 4, 1, 1, 512, kFull, 0, 142, 0, 0},
    {"N21-T1", "18.4B", 6144, 40, 48, kV, 256, 8, 1, 1, 1024, kFull, 0, 135, 0, 0},
    {"N21-T1", "39.1B", 8192, 48, 64, kV, 512, 8, 2, 1, 1536, kFull, 0, 138, 0, 0},
    {"N21-T1", "76.1B", 10240, 60, 80, kV, 1024, 8, 4, 1, 1792, kFull, 0, 140, 0, 0},
    {"N21-T1", "145.6B", 12288, 80, 96, kV, 1536, 8, 8, 1, 2304, kFull, 0, 148, 0, 0},
    {"N21-T1", "310.1B", 16384, 96, 128, kV, 1920, 8, 16, 1, 2160, kFull, 0, 155, 0, 0},
    {"N21-T1", "529.6B", 20480, 105, 128, kV, 2520, 8, 35, 1, 2520, kFull, 0, 163, 0, 0},
    {"N21-T1", "1008B", 25600, 128, 160, kV, 3072, 8, 64, 1, 3072, kFull, 0, 163, 0, 0},
    // N21-T2: PTD-P at three GPU counts
    {"N21-T2", "174.6B", 12288, 96, 96, kV, 384, 8, 12, 1, 1536, kFull, 0, 153, 0, 0},
    {"N21-T2", "174.6B", 12288, 96, 96, kV, 768, 8, 12, 1, 1536, kFull, 0, 149, 0, 0},
    {"N21-T2", "174.6B", 12288, 96, 96, kV, 1536, 8, 12, 1, 1536, kFull, 0, 141, 0, 0},
    {"N21-T2", "529.6B", 20480, 105, 128, kV, 560, 8, 35, 1, 2240, kFull, 0, 171, 0, 0},
    {"N21-T2", "529.6B", 20480, 105, 128, kV, 1120, 8, 35, 1, 2240, kFull, 0, 167, 0, 0},
    {"N21-T2", "529.6B", 20480, 105, 128, kV, 2240, 8, 35, 1, 2240, kFull, 0, 159, 0, 0},
    // N21-T2: DeepSpeed ZeRO-3 without model parallelism
    {"N21-T2", "174.6B", 12288, 96, 96, kV, 384, 1, 1, 4, 1536, kFull, 3, 144, 0, 0},
    {"N21-T2", "174.6B", 12288, 96, 96, kV, 768, 1, 1, 2, 1536, kFull, 3, 88, 0, 0},
    {"N21-T2", "174.6B", 12288, 96, 96, kV, 1536, 1, 1, 1, 1536, kFull, 3, 44, 0, 0},
    {"N21-T2", "529.6B", 20480, 105, 128, kV, 640, 1, 1, 4, 2560, kFull, 3, 138, 0, 0},
    {"N21-T2", "529.6B", 20480, 105, 128, kV, 1120, 1, 1, 2, 2240, kFull, 3, 98, 0, 0},
    {"N21-T2", "529.6B", 20480, 105, 128, kV, 2240, 1, 1, 1, 2240, kFull, 3, 48, 0, 0},
    // K22: micro-batch 1, dp 1; iteration seconds
    {"K22", "22B", 6144, 48, 64, kV, 8, 8, 1, 1, 4, kFull, 0, 0, 1.42, 0},
    {"K22", "22B", 6144, 48, 64, kV, 8, 8, 1, 1, 4, kSelectiveSp, 0, 0, 1.10, 0},
    {"K22", "175B", 12288, 96, 96, kV, 64, 8, 8, 1, 64, kFull, 0, 0, 18.13, 0},
    {"K22", "175B", 12288, 96, 96, kV, 64, 8, 8, 1, 64, kSelectiveSp, 0, 0, 13.75, 0},
    {"K22", "530B", 20480, 105, 128, kV, 280, 8, 35, 1, 280, kFull, 0, 0, 49.05, 0},
    {"K22", "530B", 20480, 105, 128, kV, 280, 8, 35, 1, 280, kSelectiveSp, 0, 0, 37.83, 0},
    {"K22", "1T", 25600, 128, 160, kV, 512, 8, 64, 1, 512, kFull, 0, 0, 94.42, 0},
    {"K22", "1T", 25600, 128, 160, kV, 512, 8, 64, 1, 512, kSelectiveSp, 0, 0, 71.49, 0},
    // S22: batch 1920, micro-batch 1, full recomputation
    {"S22", "MT-NLG 530B", 20480, 105, 128, kGpt2, 2240, 8, 35, 1, 1920, kFull, 1, 0, 60.1, 0},
    {"S22", "MT-NLG 530B", 20480, 105, 128, kGpt2, 2800, 8, 35, 1, 1920, kFull, 1, 0, 50.2, 0},
    {"S22", "MT-NLG 530B", 20480, 105, 128, kGpt2, 3360, 8, 35, 1, 1920, kFull, 1, 0, 44.4, 0},
    // BS22: 48 nodes, h 14336, 72 layers, 64 heads, ZeRO-1, full recomputation
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 6, 4, 1568, kFull, 1, 0, 113.01, 56},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 6, 4, 2048, kFull, 1, 0, 114.11, 55},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 6, 6, 2016, kFull, 1, 0, 123.57, 66},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 12, 4, 1568, kFull, 1, 0, 92.75, 0},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 12, 4, 2048, kFull, 1, 0, 117.07, 49},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 12, 2, 1568, kFull, 1, 0, 99.93, 0},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 12, 2, 2048, kFull, 1, 0, 128.82, 0},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 8, 4, 2016, kFull, 1, 0, 113.16, 52},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 4, 2, 2016, kFull, 1, 0, 125.52, 53},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 4, 4, 2016, kFull, 1, 0, 114.81, 59},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 2, 1, 2016, kFull, 1, 0, 145.45, 65},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 8, 2, 2, 2016, kFull, 1, 0, 136.13, 76},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 4, 12, 4, 2048, kFull, 1, 0, 111.89, 60},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 4, 12, 2, 2048, kFull, 1, 0, 110.48, 44},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 4, 6, 4, 2048, kFull, 1, 0, 117.11, 75},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 4, 6, 2, 2048, kFull, 1, 0, 111.71, 57},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 2, 12, 2, 2048, kFull, 1, 0, 112.50, 63},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 2, 24, 1, 2048, kFull, 1, 0, 119.53, 44},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 2, 24, 2, 2048, kFull, 1, 0, 122.75, 53},
    {"BS22", "181B", 14336, 72, 64, kBloom, 384, 4, 24, 1, 2048, kFull, 1, 0, 130.60, 0},
    {"BS22", "177B", 12288, 96, 64, kBloom, 384, 1, 48, 1, 2048, kFull, 1, 0, 142.17, 58},
};

double published_seconds(const Published& r) {
  if (r.seconds > 0) return r.seconds;
  double B = r.batch, s = 2048, l = r.l, h = r.h, V = r.vocab;
  double F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
  return F / (r.tflops * 1e12 * r.gpus);
}

struct Priced {
  double t, mem;
  tl_plan plan;
};

bool price(const Published& r, const tl_cost_model& cm, tl_cluster c, Priced* out) {
  c.nodes = (r.gpus + c.devices_per_node - 1) / c.devices_per_node;
  tl_plan p;
  std::memset(&p, 0, sizeof p);
  p.tp = r.t, p.pp = r.p, p.dp = r.gpus / (r.t * r.p);
  p.micro_batch = r.mb, p.n_micro = r.batch / (p.dp * r.mb);
  if (p.dp * r.t * r.p != r.gpus || p.n_micro * p.dp * r.mb != r.batch) {
    ADD_FAILURE() << r.source << " " << r.model << ": the split does not tile the run";
    return false;
  }
  p.schedule = TL_SCHEDULE_1F1B, p.zero = r.zero;
  p.recompute = r.rc == kFull ? TL_RECOMPUTE_FULL : TL_RECOMPUTE_SELECTIVE;
  p.sequence_parallel = r.rc == kSelectiveSp;
  p.dp_bucket_mb = 0;                // the gradients reduced after the backward
  p.grad_reduce = TL_F32;
  p.recompute_whole_forward = true;  // Megatron-LM's full recomputation
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  out->plan = p;
  out->t = p.t_step;
  out->mem = p.mem_total;
  return std::isfinite(p.t_step);
}

}  // namespace

TEST(PublishedRuns, StepTimeAndMemoryAtThePublishedSplits) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &c), TL_OK) << tl_last_error();
  std::map<std::string, tl_cost_model*> models;
  std::printf("| source | model | GPUs | dp x tp x pp | mb x m | recompute | ZeRO | "
              "measured s | predicted s | error | measured GB | predicted GB | error |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  // per source (ZeRO-3 rows apart), the mean |error| of step times
  std::map<std::string, std::pair<double, int>> per_source;
  double sum_t = 0, sum_m = 0, sum_x = 0;
  int n_t = 0, n_m = 0, n_x = 0;
  struct Pick {
    double best_measured = HUGE_VAL, measured_of_pick = 0, best_pred = HUGE_VAL;
    int rows = 0;
  };
  std::map<std::string, Pick> groups;
  for (const Published& r : kRuns) {
    char key[96];
    std::snprintf(key, sizeof key, "%d/%d/%d/%d", r.h, r.l, r.a, r.vocab);
    if (!models.count(key)) {
      struct tl_config cfg;
      tl_config_defaults(&cfg);
      cfg.model.n_layers = r.l, cfg.model.n_heads = r.a, cfg.model.n_embd = r.h;
      cfg.model.vocab_size = r.vocab, cfg.model.max_seq_len = 2048;
      tl_cost_model* cm = new tl_cost_model;
      ASSERT_EQ(tl_cost_model_build(&cfg.model, 2048, cm), TL_OK) << tl_last_error();
      models[key] = cm;
    }
    Priced pr{};
    if (!price(r, *models[key], c, &pr)) continue;
    double meas = published_seconds(r);
    double et = pr.t / meas - 1;
    sum_t += std::fabs(et), n_t++;
    std::string src = std::string(r.source) + (r.zero == 3 ? " ZeRO-3" : "");
    per_source[src].first += std::fabs(et), per_source[src].second++;
    if (r.zero != 3) sum_x += std::fabs(et), n_x++;
    char mem[64] = "-";
    if (r.mem_gb > 0) {
      double em = pr.mem / 1e9 / r.mem_gb - 1;
      sum_m += std::fabs(em), n_m++;
      std::snprintf(mem, sizeof mem, "%.0f | %.1f | %+.1f%%", r.mem_gb, pr.mem / 1e9, 100 * em);
    } else {
      std::snprintf(mem, sizeof mem, "- | %.1f | -", pr.mem / 1e9);
    }
    std::printf("| %s | %s | %d | %d x %d x %d | %d x %d | %s | %d | %.2f | %.2f | %+.1f%% | %s |\n",
                r.source, r.model, r.gpus, pr.plan.dp, r.t, r.p, r.mb, pr.plan.n_micro,
                r.rc == kFull ? "full" : "selective+sp", r.zero, meas, pr.t, 100 * et, mem);
    char g[96];
    std::snprintf(g, sizeof g, "%s %s %d GPUs batch %d", r.source, r.model, r.gpus, r.batch);
    Pick& pk = groups[g];
    pk.rows++;
    pk.best_measured = std::min(pk.best_measured, meas);
    if (pr.t < pk.best_pred) pk.best_pred = pr.t, pk.measured_of_pick = meas;
  }
  for (auto& m : models) delete m.second;
  for (auto& s : per_source)
    std::printf("%s: step time MAPE %.1f%% over %d rows\n", s.first.c_str(),
                100 * s.second.first / s.second.second, s.second.second);
  double mape_t = sum_t / n_t, mape_m = n_m ? sum_m / n_m : 0;
  std::printf("all: step time MAPE %.1f%% over %d rows; memory MAPE %.1f%% over %d rows\n",
              100 * mape_t, n_t, 100 * mape_m, n_m);
  std::printf("all but DeepSpeed's ZeRO-3: step time MAPE %.1f%% over %d rows\n",
              100 * sum_x / n_x, n_x);
  for (auto& g : groups)
    if (g.second.rows > 1)
      std::printf("group %s: %d runs, the predicted fastest measures %+.1f%% over the best\n",
                  g.first.c_str(), g.second.rows,
                  100 * (g.second.measured_of_pick / g.second.best_measured - 1));
  // What the model reaches today, each bound the measured figure rounded up
  // by about a point: a change that makes any source worse fails here. The
  // targets (8% on step time, 5% on memory) are not met; planner/README.md
  // says which rows miss and why. DeepSpeed's ZeRO-3 of 2021 is listed but
  // not bounded: its parameter gathers ran at about a network card's rate
  // per GPU whatever the group, which no runtime trellis prices is.
  const std::map<std::string, double> bound = {
      {"N21-T1", 0.06}, {"N21-T2", 0.045}, {"K22", 0.14}, {"S22", 0.16}, {"BS22", 0.11}};
  for (auto& b : bound) {
    ASSERT_TRUE(per_source.count(b.first)) << b.first;
    const auto& s = per_source.at(b.first);
    EXPECT_LE(s.first / s.second, b.second) << b.first << ": step time MAPE";
  }
  EXPECT_LE(sum_x / n_x, 0.095) << "step time MAPE over all runs but ZeRO-3's";
  EXPECT_LE(mape_m, 0.11) << "memory MAPE";
  // the planner's pick among a group's measured splits, where the group's
  // rows measure one configuration each way (K22: full recomputation
  // against selective + sequence parallelism; BS22's 2048-sequence sweep)
  for (const char* g : {"K22 22B 8 GPUs batch 4", "K22 175B 64 GPUs batch 64",
                        "K22 530B 280 GPUs batch 280", "K22 1T 512 GPUs batch 512",
                        "BS22 181B 384 GPUs batch 2048"}) {
    ASSERT_TRUE(groups.count(g)) << g;
    EXPECT_LE(groups[g].measured_of_pick / groups[g].best_measured, 1.05) << g;
  }
}
