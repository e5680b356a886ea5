// The cost model against published measured runs (planner/README.md lists
// every row and its source): each run is priced at its published split
// (--fix of everything the run fixed) on the shipped spec of the cluster it
// ran on (examples/clusters/dgx_a100.json; jean_zay_a100.json for
// BigScience's, whose nodes have four 100 Gb/s cards, not eight 200 Gb/s;
// dgx_h100.json for LF23's H100 rows, and dgx_a100.json at 40 GB for its
// A100-40GB rows),
// and the predicted step time and memory per GPU are compared with what was
// measured. The A100 efficiencies those specs carry are the grid point that
// prices these runs best, Table 1's aside (TheA100FitIsTheGridsBest).
// Sources:
//   N21-T1  Narayanan et al. 2021, SC'21, Table 1 (Megatron-LM, PTD-P)
//   N21-T2  Narayanan et al. 2021, Table 2 (PTD-P and DeepSpeed ZeRO-3 rows)
//   K22     Korthikanti et al. 2022, Tables 3 and 5 (full recomputation
//           against selective recomputation with sequence parallelism)
//   S22     Smith et al. 2022 (Megatron-Turing NLG 530B), section 2.4
//   BS22    BigScience BLOOM-176B, train/tr11-176B-ml/chronicles-prequel.md,
//           the topology sweep of 2022-02-25 (Megatron-DeepSpeed, ZeRO-1,
//           iteration 2 of each run; memory as nvidia-smi read it)
//   LF23    MosaicML's llm-foundry, scripts/train/benchmarking/README.md:
//           MPT models (GPT-2's block with learned positions, vocabulary
//           50368) under PyTorch FSDP's FULL_SHARD (ZeRO-3 over every GPU,
//           no model parallelism), fused attention, on A100-80GB (-A80),
//           A100-40GB (-A40, up to 16 nodes) and H100-80GB (-H100) nodes;
//           every row of its four bf16 tables: at 2048 tokens (H100 up to
//           512 GPUs, 1B and 3B there under SHARD_GRAD_OP, FSDP's ZeRO-2),
//           and at 512-65536 tokens on 8 GPUs, the step from the published
//           tokens/s. Out of sample but for the three pairs of runs that set
//           kHopperScale.
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

enum Rc { kFull, kSelectiveSp, kNone };

struct Published {
  const char* source;
  const char* model;  // rows of one model and GPU count form a group
  int h, l, a, vocab;
  int gpus, t, p, mb, batch;
  Rc rc;
  int zero;
  double tflops;             // published TFLOP/s per GPU (96 B s l h^2 ... counting), or 0
  double seconds;            // published seconds per step, or 0
  double mem_gb;             // published memory per GPU (GB), or 0
  double tokens_s = 0;       // published tokens per second (all GPUs), or 0
  bool bf16_reduce = false;  // gradients reduced in bf16 (FSDP's "PURE")
  int seq = 2048;            // tokens a sequence
};

constexpr int kMpt = 50368, kV = 51200, kGpt2 = 50257, kBloom = 250680;

const Published kRuns[] = {
#include "tests/planner/published_runs.inc"
};

double published_seconds(const Published& r) {
  if (r.seconds > 0) return r.seconds;
  if (r.tokens_s > 0) return (double)r.batch * r.seq / r.tokens_s;
  double B = r.batch, s = r.seq, l = r.l, h = r.h, V = r.vocab;
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
  p.recompute = r.rc == kFull   ? TL_RECOMPUTE_FULL
                : r.rc == kNone ? TL_RECOMPUTE_NONE
                                : TL_RECOMPUTE_SELECTIVE;
  p.sequence_parallel = r.rc == kSelectiveSp;
  p.dp_bucket_mb = 0;  // the gradients reduced after the backward
  p.grad_reduce = r.bf16_reduce ? TL_BF16 : TL_F32;
  p.recompute_whole_forward = true;  // Megatron-LM's and FSDP's checkpointing
  tl_cost_evaluate(&cm, &c, TL_BF16, nullptr, &p);
  out->plan = p;
  out->t = p.t_step;
  out->mem = p.mem_total;
  return std::isfinite(p.t_step);
}

const char* RcName(Rc rc) {
  return rc == kFull ? "full" : rc == kNone ? "none" : "selective+sp";
}

bool IsLF23(const Published& r) {
  return std::strncmp(r.source, "LF23", 4) == 0;
}

// DeepSpeed's ZeRO-3 of 2021: listed, outside the bounds (see below).
bool IsDeepSpeedZero3(const Published& r) {
  return r.zero == 3 && std::strcmp(r.source, "N21-T2") == 0;
}

// The 40 GB A100 nodes: DGX A100's, with the 40960 MiB nvidia-smi reports
// for an A100-SXM4-40GB (MosaicML's nodes have eight 200 Gb/s cards too).
const char* const kA100_40 = "dgx_a100.json with A100-40GB";

// LF23's attention kernels (2023's flash attention in Triton, FlashAttention-
// 1's algorithm) are priced as `trellis plan --fix attention=fused` prices
// a fused kernel: at TL_CLUSTER_FUSED_ATTENTION (half) of the rate the spec
// gives its matrix products, a published figure (planner/cluster.h).

// What the Hopper specs (dgx_h100.json, h200.json) carry of the A100's
// efficiencies (TheHopperScaleIsTheSameRunsRatio).
constexpr double kHopperScale = 0.8;

// The cluster a source's runs ran on.
const char* SpecOf(const Published& r) {
  if (std::strcmp(r.source, "BS22") == 0) return "examples/clusters/jean_zay_a100.json";
  if (std::strcmp(r.source, "LF23-H100") == 0) return "examples/clusters/dgx_h100.json";
  if (std::strcmp(r.source, "LF23-A40") == 0) return kA100_40;
  return "examples/clusters/dgx_a100.json";
}

// The A100 efficiencies: matrix products at eff * F / (F + half) of peak,
// attention kernels at attn; and the allocator's overhead (< 0: the spec's).
struct Fit {
  double eff, half, attn;
  double overhead = -1;
};

struct Pick {
  double best_measured = HUGE_VAL, measured_of_pick = 0, best_pred = HUGE_VAL;
  int rows = 0;
};

struct Stats {
  // per source (DeepSpeed's ZeRO-3 rows apart): the sum of step times'
  // |error|, rows
  std::map<std::string, std::pair<double, int>> per_source;
  // all rows; memory rows; all but DeepSpeed's ZeRO-3; those but LF23
  double sum_t = 0, sum_m = 0, sum_x = 0, sum_a = 0;
  int n_t = 0, n_m = 0, n_x = 0, n_a = 0;
  int n_unpriced = 0; /* rows the cost model could not price (each a failure) */
  // what the fit minimises: the mean |error| of the rows other than
  // Table 1's and LF23's (out of sample) and DeepSpeed's ZeRO-3 (not a
  // runtime trellis prices)
  double sum_fit = 0;
  int n_fit = 0;
  std::map<std::string, Pick> groups;
  // the runs priced above their GPU's memory (every one of them ran), and
  // the fullest against its GPU's memory
  int n_over = 0;
  double fullest = 0;
  std::string fullest_run;
};

class PublishedRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const Published& r : kRuns) {
      char key[96];
      std::snprintf(key, sizeof key, "%d/%d/%d/%d/%d", r.h, r.l, r.a, r.vocab, r.seq);
      if (!models_.count(key)) {
        struct tl_config cfg;
        tl_config_defaults(&cfg);
        cfg.model.n_layers = r.l, cfg.model.n_heads = r.a, cfg.model.n_embd = r.h;
        cfg.model.vocab_size = r.vocab, cfg.model.max_seq_len = r.seq;
        tl_cost_model* cm = new tl_cost_model;
        ASSERT_EQ(tl_cost_model_build(&cfg.model, r.seq, cm), TL_OK) << tl_last_error();
        models_[key] = cm;
      }
      model_of_.push_back(models_[key]);
      const char* spec = SpecOf(r);
      if (!specs_.count(spec)) {
        tl_cluster c;
        const bool a40 = spec == kA100_40;
        ASSERT_EQ(tl_cluster_load(a40 ? "examples/clusters/dgx_a100.json" : spec, &c), TL_OK)
            << tl_last_error();
        if (a40) c.device_memory_bytes = 40960.0 * 1024 * 1024;
        specs_[spec] = c;
      }
    }
  }
  static void TearDownTestSuite() {
    for (auto& m : models_) delete m.second;
    models_.clear();
    model_of_.clear();
  }

  // Every run priced on its cluster's spec, with `fit`'s efficiencies where
  // given; `print`: the table and the summaries.
  static Stats Evaluate(const Fit* fit, bool print) {
    Stats st;
    if (print) {
      std::printf(
          "| source | model | GPUs | dp x tp x pp | mb x m | recompute | ZeRO | "
          "measured s | predicted s | error | measured GB | predicted GB | error |\n");
      std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    }
    for (size_t i = 0; i < sizeof kRuns / sizeof kRuns[0]; i++) {
      const Published& r = kRuns[i];
      tl_cluster c = specs_.at(SpecOf(r));
      if (fit && fit->eff > 0) {
        c.efficiency = fit->eff;
        c.efficiency_half_flops = fit->half;
        c.attention_efficiency = fit->attn;
      }
      if (fit && fit->overhead >= 0) c.allocator_overhead = fit->overhead;
      // LF23's fused attention at its own rate (TL_CLUSTER_FUSED_ATTENTION), where the
      // spec's is the unfused kernels' of the Megatron runs it was fitted on
      if (IsLF23(r)) tl_cluster_use_fused_attention(&c);
      Priced pr{};
      if (!price(r, *model_of_[i], c, &pr)) {
        /* every row is priced: one the cost model cannot price fails here,
         * rather than leaving the bounds to the rows that remain */
        ADD_FAILURE() << r.source << " " << r.model << " on " << r.gpus
                      << " GPUs: the cost model cannot price it (step " << pr.t << " s)";
        st.n_unpriced++;
        continue;
      }
      if (!pr.plan.fits) st.n_over++;
      if (pr.mem / c.device_memory_bytes > st.fullest) {
        st.fullest = pr.mem / c.device_memory_bytes;
        st.fullest_run = std::string(r.source) + " " + r.model + " " + RcName(r.rc) + " on " +
                         std::to_string(r.gpus);
      }
      double meas = published_seconds(r);
      double et = pr.t / meas - 1;
      st.sum_t += std::fabs(et), st.n_t++;
      std::string src = std::string(r.source) + (IsDeepSpeedZero3(r) ? " ZeRO-3" : "");
      st.per_source[src].first += std::fabs(et), st.per_source[src].second++;
      if (!IsDeepSpeedZero3(r)) st.sum_x += std::fabs(et), st.n_x++;
      if (!IsDeepSpeedZero3(r) && !IsLF23(r)) st.sum_a += std::fabs(et), st.n_a++;
      if (!IsDeepSpeedZero3(r) && !IsLF23(r) && std::strcmp(r.source, "N21-T1") != 0)
        st.sum_fit += std::fabs(et), st.n_fit++;
      char mem[64] = "-";
      if (r.mem_gb > 0) {
        double em = pr.mem / 1e9 / r.mem_gb - 1;
        st.sum_m += std::fabs(em), st.n_m++;
        std::snprintf(mem, sizeof mem, "%.0f | %.1f | %+.1f%%", r.mem_gb, pr.mem / 1e9, 100 * em);
      } else {
        std::snprintf(mem, sizeof mem, "- | %.1f | -", pr.mem / 1e9);
      }
      char model[48]; /* the sequence's length where it is not 2048 */
      if (r.seq != 2048)
        std::snprintf(model, sizeof model, "%s, %d tokens", r.model, r.seq);
      else
        std::snprintf(model, sizeof model, "%s", r.model);
      if (print)
        std::printf(
            "| %s | %s | %d | %d x %d x %d | %d x %d | %s | %d | %.2f | %.2f | %+.1f%% | %s |\n",
            r.source, model, r.gpus, pr.plan.dp, r.t, r.p, r.mb, pr.plan.n_micro, RcName(r.rc),
            r.zero, meas, pr.t, 100 * et, mem);
      char g[128];
      std::snprintf(g, sizeof g, "%s %s %d GPUs batch %d", r.source, model, r.gpus, r.batch);
      Pick& pk = st.groups[g];
      pk.rows++;
      pk.best_measured = std::min(pk.best_measured, meas);
      if (pr.t < pk.best_pred) pk.best_pred = pr.t, pk.measured_of_pick = meas;
    }
    if (!print) return st;
    for (auto& s : st.per_source)
      std::printf("%s: step time MAPE %.1f%% over %d rows\n", s.first.c_str(),
                  100 * s.second.first / s.second.second, s.second.second);
    std::printf("all: step time MAPE %.1f%% over %d rows; memory MAPE %.1f%% over %d rows\n",
                100 * st.sum_t / st.n_t, st.n_t, st.n_m ? 100 * st.sum_m / st.n_m : 0.0, st.n_m);
    std::printf("all but DeepSpeed's ZeRO-3: step time MAPE %.1f%% over %d rows\n",
                100 * st.sum_x / st.n_x, st.n_x);
    std::printf("all but DeepSpeed's ZeRO-3 and LF23: step time MAPE %.1f%% over %d rows\n",
                100 * st.sum_a / st.n_a, st.n_a);
    for (auto& g : st.groups)
      if (g.second.rows > 1)
        std::printf("group %s: %d runs, the predicted fastest measures %+.1f%% over the best\n",
                    g.first.c_str(), g.second.rows,
                    100 * (g.second.measured_of_pick / g.second.best_measured - 1));
    return st;
  }

  static std::map<std::string, tl_cost_model*> models_;
  static std::vector<tl_cost_model*> model_of_;  // kRuns[i]'s
  static std::map<std::string, tl_cluster> specs_;
};

std::map<std::string, tl_cost_model*> PublishedRuns::models_;
std::vector<tl_cost_model*> PublishedRuns::model_of_;
std::map<std::string, tl_cluster> PublishedRuns::specs_;

}  // namespace

TEST_F(PublishedRuns, StepTimeAndMemoryAtThePublishedSplits) {
  Stats st = Evaluate(nullptr, true);
  // every row of the table priced, each source's rows all there: no bound
  // below is taken over what happened to survive
  const int n_rows = (int)(sizeof kRuns / sizeof kRuns[0]);
  EXPECT_EQ(n_rows, 263) << "the validation set's rows (planner/README.md lists them)";
  EXPECT_EQ(st.n_unpriced, 0);
  ASSERT_EQ(st.n_t, n_rows) << "rows priced";
  std::map<std::string, int> listed;
  for (const Published& r : kRuns)
    listed[std::string(r.source) + (IsDeepSpeedZero3(r) ? " ZeRO-3" : "")]++;
  for (const auto& l : listed) {
    ASSERT_TRUE(st.per_source.count(l.first)) << l.first;
    EXPECT_EQ(st.per_source.at(l.first).second, l.second) << l.first << ": rows priced";
  }
  EXPECT_EQ(listed.at("N21-T1"), 10);
  EXPECT_EQ(listed.at("N21-T2"), 6);
  EXPECT_EQ(listed.at("N21-T2 ZeRO-3"), 6);
  EXPECT_EQ(listed.at("K22"), 8);
  EXPECT_EQ(listed.at("S22"), 3);
  EXPECT_EQ(listed.at("BS22"), 21);
  EXPECT_EQ(listed.at("LF23-A80"), 61);
  EXPECT_EQ(listed.at("LF23-A40"), 78);
  EXPECT_EQ(listed.at("LF23-H100"), 70);
  // What the model reaches today, each bound the measured figure rounded up
  // by about a point: a change that makes any source worse fails here. The
  // step-time target (8%) is not met by every source; planner/README.md
  // says which rows miss and why. Memory meets its 5% with the allocator's
  // overhead the specs carry (TheAllocatorOverheadIsTheMemoryRowsBest).
  // DeepSpeed's ZeRO-3 of 2021 is listed but not bounded: its parameter
  // gathers ran at about a network card's rate per GPU whatever the group,
  // which no runtime trellis prices is.
  // LF23 is out of sample (but for the three pairs of runs that set the
  // Hopper scale) and bounded where it stands today (planner/README.md:
  // its small models are the model's largest misses, memory-bound work it
  // does not price).
  const std::map<std::string, double> bound = {
      {"N21-T1", 0.045}, {"N21-T2", 0.03},   {"K22", 0.12},       {"S22", 0.20},
      {"BS22", 0.10},    {"LF23-A80", 0.13}, {"LF23-A40", 0.145}, {"LF23-H100", 0.155}};
  for (auto& b : bound) {
    ASSERT_TRUE(st.per_source.count(b.first)) << b.first;
    const auto& s = st.per_source.at(b.first);
    EXPECT_LE(s.first / s.second, b.second) << b.first << ": step time MAPE";
  }
  EXPECT_LE(st.sum_a / st.n_a, 0.085) << "step time MAPE over all runs but ZeRO-3's and LF23's";
  EXPECT_LE(st.sum_x / st.n_x, 0.135) << "step time MAPE over all runs but DeepSpeed's ZeRO-3";
  EXPECT_LE(st.sum_m / st.n_m, 0.05) << "memory MAPE";
  // the planner's pick among a group's measured splits, where the group's
  // rows measure one configuration each way (K22: full recomputation
  // against selective + sequence parallelism; BS22's 2048-sequence sweep)
  for (const char* g :
       {"K22 22B 8 GPUs batch 4", "K22 175B 64 GPUs batch 64", "K22 530B 280 GPUs batch 280",
        "K22 1T 512 GPUs batch 512", "BS22 181B 384 GPUs batch 2048"}) {
    ASSERT_TRUE(st.groups.count(g)) << g;
    EXPECT_LE(st.groups[g].measured_of_pick / st.groups[g].best_measured, 1.05) << g;
  }
}

// The efficiencies the A100 specs carry are the best point of a grid over
// the three (matrix products' efficiency 0.55-0.75 by 0.025, its half point
// 1e10-4e10 by 1e10, attention's 0.04-0.16 by 0.02), scored by the mean
// step-time error of every run but Table 1's and ZeRO-3's. The score is
// flat along a ridge (faster matrix products, slower attention: a dozen
// points within 0.1 of a point of each other), so the test asks that no
// grid point beat the shipped one by more than 0.05 points. Refitting after
// a change to the model or the validation set: the printed best goes into
// dgx_a100 and jean_zay_a100, and kHopperScale of its efficiency and
// attention efficiency into dgx_h100 and h200.
TEST_F(PublishedRuns, TheA100FitIsTheGridsBest) {
  const tl_cluster& shipped = specs_.at("examples/clusters/dgx_a100.json");
  Fit best{0, 0, 0};
  double best_score = HUGE_VAL;
  for (int i = 0; i <= 8; i++)
    for (int j = 1; j <= 4; j++)
      for (int k = 0; k <= 6; k++) {
        Fit f{0.55 + 0.025 * i, 1e10 * j, 0.04 + 0.02 * k};
        Stats st = Evaluate(&f, false);
        double score = st.sum_fit / st.n_fit;
        if (score < best_score - 1e-12) best_score = score, best = f;
      }
  Stats st = Evaluate(nullptr, false);
  const double shipped_score = st.sum_fit / st.n_fit;
  std::printf(
      "grid's best: compute_efficiency %.3f, efficiency_half_flops %.0e, "
      "attention_efficiency %.2f: mean |error| %.2f%% over %d runs (shipped %.3f, %.0e, "
      "%.2f: %.2f%%)\n",
      best.eff, best.half, best.attn, 100 * best_score, st.n_fit, shipped.efficiency,
      shipped.efficiency_half_flops, shipped.attention_efficiency, 100 * shipped_score);
  EXPECT_LE(shipped_score, best_score + 0.0005) << "the A100 specs' efficiencies are stale";
  // Jean Zay's A100s as the DGX's; the Hopper GPUs at kHopperScale of them
  // (TheHopperScaleIsTheSameRunsRatio)
  for (const char* spec : {"examples/clusters/jean_zay_a100.json",
                           "examples/clusters/dgx_h100.json", "examples/clusters/h200.json"}) {
    tl_cluster c;
    ASSERT_EQ(tl_cluster_load(spec, &c), TL_OK) << tl_last_error();
    const double scale = std::strstr(spec, "a100") ? 1.0 : kHopperScale;
    EXPECT_NEAR(c.efficiency, scale * shipped.efficiency, 1e-9) << spec;
    EXPECT_EQ(c.efficiency_half_flops, shipped.efficiency_half_flops) << spec;
    EXPECT_NEAR(c.attention_efficiency, scale * shipped.attention_efficiency, 1e-9) << spec;
  }
}

// The H100's efficiencies are the A100's times kHopperScale: at 2048 tokens
// LF23 ran three checkpointed configurations on both A100-80GB and
// H100-80GB nodes (70B on 64 and on 32 GPUs, 30B on 8: the same split,
// micro-batch and batch; the 70B pairs in "PURE" bf16 on the A100s, amp
// bf16 on the H100s), and the model with the A100's efficiencies prices
// the H100 runs that much faster, relative to what they measured, than the
// A100 runs (the H100's FLOPs grew 3.2x over the A100's, what the same
// software reached of them less). The pairs are checkpointed models of 30B
// and up, where the memory-bound work the model does not price is the
// smallest share (planner/README.md); it is larger on an H100, and so is
// attention's share at longer sequences, neither of which the scale
// covers. The H200 (the same GH100 tensor cores and clocks, faster memory)
// takes the H100's. The other 35 H100 rows are priced with it, not fitted
// by it.
TEST_F(PublishedRuns, TheHopperScaleIsTheSameRunsRatio) {
  const tl_cluster& a100 = specs_.at("examples/clusters/dgx_a100.json");
  tl_cluster h100 = specs_.at("examples/clusters/dgx_h100.json");
  h100.efficiency = a100.efficiency;
  h100.efficiency_half_flops = a100.efficiency_half_flops;
  double sum = 0;
  int n = 0;
  const size_t n_runs = sizeof kRuns / sizeof kRuns[0];
  for (size_t i = 0; i < n_runs; i++) {
    const Published& h = kRuns[i];
    if (std::strcmp(h.source, "LF23-H100") != 0 || h.rc != kFull || h.seq != 2048) continue;
    for (size_t j = 0; j < n_runs; j++) {
      const Published& a = kRuns[j];
      if (std::strcmp(a.source, "LF23-A80") != 0 || std::strcmp(a.model, h.model) != 0 ||
          a.gpus != h.gpus || a.mb != h.mb || a.batch != h.batch || a.rc != h.rc || a.seq != h.seq)
        continue;
      tl_cluster ca = a100, ch = h100;
      tl_cluster_use_fused_attention(&ca);
      tl_cluster_use_fused_attention(&ch);
      Priced pa{}, ph{};
      ASSERT_TRUE(price(a, *model_of_[j], ca, &pa));
      ASSERT_TRUE(price(h, *model_of_[i], ch, &ph));
      const double ratio = (ph.t / published_seconds(h)) / (pa.t / published_seconds(a));
      std::printf("%s on %d GPUs: A100 %+.1f%%, H100 at the A100's efficiencies %+.1f%%: %.3f\n",
                  h.model, h.gpus, 100 * (pa.t / published_seconds(a) - 1),
                  100 * (ph.t / published_seconds(h) - 1), ratio);
      sum += ratio, n++;
    }
  }
  ASSERT_EQ(n, 3) << "the runs LF23 measured on both GPUs";
  std::printf("the H100 at %.3f of the A100's efficiencies (shipped %.2f)\n", sum / n,
              kHopperScale);
  EXPECT_NEAR(kHopperScale, sum / n, 0.025) << "dgx_h100.json's scale of the A100's is stale";
}

// The allocator overhead the A100 specs carry (the fraction of the tensors'
// bytes a caching allocator holds on top) is the best of 0-0.30 by 0.01 for
// the memory rows (BigScience's, nvidia-smi's reading of PyTorch processes),
// with the 2 GB reserve, among the figures at which every published run
// fits its GPU (each of them ran: the fullest, LF23's 1B without
// checkpointing on 32 A100-40GB and K22's 1T with selective recomputation,
// both over at 0.10, bound the overhead from above). Without it every
// memory row is 4-19% low (10.2%).
TEST_F(PublishedRuns, TheAllocatorOverheadIsTheMemoryRowsBest) {
  const tl_cluster& shipped = specs_.at("examples/clusters/dgx_a100.json");
  double best = -1, best_score = HUGE_VAL, unconstrained = -1, unconstrained_score = HUGE_VAL;
  for (int i = 0; i <= 30; i++) {
    Fit f{0, 0, 0, 0.01 * i};
    Stats st = Evaluate(&f, false);
    ASSERT_GT(st.n_m, 10);
    double score = st.sum_m / st.n_m;
    if (score < unconstrained_score - 1e-12)
      unconstrained_score = score, unconstrained = f.overhead;
    if (st.n_over == 0 && score < best_score - 1e-12) best_score = score, best = f.overhead;
  }
  ASSERT_GE(best, 0) << "no overhead lets every published run fit";
  std::printf(
      "allocator overhead: the memory rows' best %.2f (MAPE %.2f%%); with every run "
      "fitting its GPU %.2f (%.2f%%)\n",
      unconstrained, 100 * unconstrained_score, best, 100 * best_score);
  Fit none{0, 0, 0, 0};
  Stats bare = Evaluate(&none, false), st = Evaluate(nullptr, false);
  std::printf(
      "shipped %.2f: memory MAPE %.2f%% over %d rows, the fullest run (%s) at %.1f%% "
      "of its GPU; without an overhead %.2f%%\n",
      shipped.allocator_overhead, 100 * st.sum_m / st.n_m, st.n_m, st.fullest_run.c_str(),
      100 * st.fullest, 100 * bare.sum_m / bare.n_m);
  EXPECT_EQ(st.n_over, 0) << "a published run is priced above its GPU's memory";
  EXPECT_LE(st.sum_m / st.n_m, best_score + 0.0005)
      << "the A100 specs' allocator_overhead is stale";
  for (const char* spec : {"examples/clusters/jean_zay_a100.json",
                           "examples/clusters/dgx_h100.json", "examples/clusters/h200.json"}) {
    tl_cluster c;
    ASSERT_EQ(tl_cluster_load(spec, &c), TL_OK) << tl_last_error();
    EXPECT_EQ(c.allocator_overhead, shipped.allocator_overhead) << spec;
  }
}

// The Llama family (the cost model reads a Llama's own graph: RMSNorm,
// RoPE, grouped-query attention, SwiGLU, an untied head). Every published
// bf16 run of a Llama whose split trellis runs, priced as above at its
// published split on the shipped spec of its cluster, the attention at the
// fused kernels' rate (`--fix attention=fused`: these runs used PyTorch's
// SDPA flash attention), the step from the published tokens/s, each within
// 15%. Source:
//   TT24  torchtitan, docs/performance.md (2024): FSDP2 (ZeRO-3 over every
//         GPU, no model parallelism) on 64 A100-80GB, bf16 parameters with
//         fp32 gradient reduction, Llama 2 at 4096 tokens and Llama 3 at
//         8192, global batch = local batch x 64; WPS is tokens/s per GPU.
// Its "selective layer" and "selective op" rows (activation checkpointing
// of every other block, and of every other matrix product's output) are a
// recomputation trellis does not run, and are not priced; nor are the
// H100 rows of torchtitan's benchmarks/llama3_h100_202412_torchtitan.md
// (the same op-level checkpointing, or Float8) and the published Llama 3
// recipes of NVIDIA's NeMo and Megatron-Bridge (FP8, or context
// parallelism at 8192 tokens).
struct PublishedLlama {
  const char* source;
  const char* model;
  int h, l, heads, kv, ffn, vocab, seq;
  int gpus, mb, batch;
  Rc rc;
  double tokens_s_gpu;  // published tokens/s per GPU
};

const PublishedLlama kLlamaRuns[] = {
    {"TT24", "Llama 2 13B", 5120, 40, 40, 40, 13824, 32000, 4096, 64, 2, 128, kNone, 2162},
    {"TT24", "Llama 2 70B", 8192, 80, 64, 8, 28672, 32000, 4096, 64, 2, 128, kFull, 353},
    {"TT24", "Llama 3 70B", 8192, 80, 64, 8, 28672, 128256, 8192, 64, 1, 64, kFull, 331},
};

TEST(PublishedLlama, EveryRunTrellisCanSplitIsPricedWithinFifteenPercent) {
  tl_cluster a100;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &a100), TL_OK) << tl_last_error();
  tl_cluster_use_fused_attention(&a100);
  std::printf(
      "| source | model | GPUs | dp x tp x pp | mb x m | recompute | ZeRO | measured "
      "tokens/s/GPU | predicted | step error |\n|---|---|---|---|---|---|---|---|---|---|\n");
  double sum = 0;
  int n = 0;
  for (const PublishedLlama& r : kLlamaRuns) {
    struct tl_config cfg;
    tl_config_defaults(&cfg);
    tl_model_config& m = cfg.model;
    m.kind = TL_MODEL_LLAMA;
    m.n_layers = r.l, m.n_heads = r.heads, m.n_kv_heads = r.kv, m.n_embd = r.h;
    m.ffn_hidden = r.ffn, m.vocab_size = r.vocab, m.max_seq_len = r.seq;
    tl_cost_model cm;
    /* an fp32 graph priced in bf16: the published runtimes' state by the
     * ZeRO formulas, as the GPT rows are priced */
    ASSERT_EQ(tl_cost_model_build(&m, r.seq, &cm), TL_OK) << tl_last_error();
    Published p = {r.source,
                   r.model,
                   r.h,
                   r.l,
                   r.heads,
                   r.vocab,
                   r.gpus,
                   1,
                   1,
                   r.mb,
                   r.batch,
                   r.rc,
                   3,
                   0,
                   0,
                   0,
                   r.tokens_s_gpu * r.gpus,
                   false,
                   r.seq};
    Priced out{};
    ASSERT_TRUE(price(p, cm, a100, &out)) << r.model;
    const double measured = published_seconds(p), err = out.t / measured - 1;
    std::printf("| %s | %s | %d | %d x 1 x 1 | %d x %d | %s | 3 | %.0f | %.0f | %+.1f%% |\n",
                r.source, r.model, r.gpus, out.plan.dp, r.mb, out.plan.n_micro, RcName(r.rc),
                r.tokens_s_gpu, (double)r.batch * r.seq / out.t / r.gpus, 100 * err);
    EXPECT_LE(std::fabs(err), 0.15) << r.source << " " << r.model;
    EXPECT_TRUE(out.plan.fits) << r.model << " ran on 80 GB: priced at " << out.mem / 1e9 << " GB";
    sum += std::fabs(err), n++;
  }
  ASSERT_EQ(n, 3) << "every published Llama row trellis can split";
  std::printf("Llama rows: step-time MAPE %.1f%% over %d\n", 100 * sum / n, n);
}
