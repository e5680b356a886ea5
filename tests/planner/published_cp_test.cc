// The cost model against the published runs with context parallelism
// (planner/README.md lists them with the other published runs), each priced
// at its published split on the shipped H100 spec (examples/clusters/
// dgx_h100.json), attention at the fused kernels' rate (`--fix
// attention=fused`), bf16 with the ZeRO formulas' state (an fp32 graph
// priced in bf16, as the other published rows). Sources:
//   NV24  NVIDIA's Llama 3 pre-training recipes (NeMo: Megatron-Core and
//         Transformer Engine; bf16, 8192 tokens, micro-batch 1, the
//         distributed optimizer, no recomputation): seconds a step at the
//         published global batch.
//   M24   Meta, "The Llama 3 Herd of Models" (2024), Table 4: Llama 3 405B
//         at 131072 tokens on 16384 H100s, TP 8, CP 16, PP 16, DP 8, 16M
//         tokens a batch, 380 TFLOP/s a GPU.
// The shipped H100 spec's efficiencies are llm-foundry's (PyTorch FSDP, the
// A100 fit's times 0.8); Megatron-Core with Transformer Engine reaches a
// larger share of the same GPU. So the NV24 rows are priced with the spec's
// compute efficiency (and the fused attention's, half of it) times one
// factor, the grid's best for the three rows (in sample, as the A100 specs'
// efficiencies were fitted: published_test.cc), and each row must then be
// within 15%: what is checked is how the model prices the three splits —
// CP 2 alone, with TP 4 x PP 4 interleaved, with TP 8 x PP 9 interleaved —
// against each other, the ring included. The factor must lie between 1 and
// 1.5.
// M24 is priced and printed, not bounded: the paper does not give the
// pipeline schedule's chunks, the recomputation or the FLOP count behind
// its 380 TFLOP/s, and trellis prices the split at 1F1B over 80 GB a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

extern "C" {
#include "planner/cost.h"
}

namespace {

struct CpRun {
  const char* source;
  const char* model;
  int h, l, heads, kv, ffn, vocab, seq;
  int gpus, tp, pp, cp, v;  // v: the interleaved schedule's chunks a rank (1: 1F1B)
  int batch;                // sequences a step (micro-batch 1)
  tl_recompute rc;
  double seconds;  // published seconds a step, or 0
  double tflops;   // published TFLOP/s a GPU, or 0
};

constexpr int kVocab = 128256;

const CpRun kRuns[] = {
    {"NV24", "Llama 3 8B", 4096, 32, 32, 8, 14336, kVocab, 8192, 8, 1, 1, 2, 1, 128,
     TL_RECOMPUTE_NONE, 12.91, 0},
    {"NV24", "Llama 3 70B", 8192, 80, 64, 8, 28672, kVocab, 8192, 64, 4, 4, 2, 5, 128,
     TL_RECOMPUTE_NONE, 14.72, 0},
    {"NV24", "Llama 3 405B", 16384, 126, 128, 8, 53248, kVocab, 8192, 576, 8, 9, 2, 7, 252,
     TL_RECOMPUTE_NONE, 17.20, 0},
    {"M24", "Llama 3 405B", 16384, 126, 128, 8, 53248, kVocab, 131072, 16384, 8, 16, 16, 1, 128,
     TL_RECOMPUTE_NONE, 0, 380},
};

struct Priced {
  tl_plan p;
  double measured;
};

// Run r priced on cluster c (the cost model built once, by the caller).
Priced PriceRun(const CpRun& r, const tl_cost_model* cm, const tl_cluster& spec, double k) {
  tl_cluster c = spec;
  c.nodes = r.gpus / c.devices_per_node;
  c.efficiency *= k;
  tl_cluster_use_fused_attention(&c);
  tl_plan p;
  std::memset(&p, 0, sizeof p);
  p.tp = r.tp, p.pp = r.pp, p.cp = r.cp, p.dp = r.gpus / (r.tp * r.pp * r.cp);
  p.micro_batch = 1, p.n_micro = r.batch / p.dp;
  p.schedule = r.v > 1 ? TL_SCHEDULE_INTERLEAVED : TL_SCHEDULE_1F1B;
  p.virtual_stages = r.v;
  p.zero = 1;  // the distributed optimizer
  p.recompute = r.rc;
  p.sequence_parallel = r.tp > 1;
  p.dp_bucket_mb = 25;  // the gradients reduced during the backward
  tl_cost_evaluate(cm, &c, TL_BF16, nullptr, &p);
  double measured = r.seconds;
  if (measured <= 0) {  // the published rate over the FLOPs trellis's graphs count
    const double model_flops =
        p.mfu * p.t_step * tl_plan_devices(&p) * tl_cluster_peak(&c, TL_BF16);
    measured = model_flops / (r.tflops * 1e12 * r.gpus);
  }
  return {p, measured};
}

TEST(PublishedContextParallel, NvidiasRunsWithinFifteenPercentAtOneSoftwareFactor) {
  tl_cluster h100;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_h100.json", &h100), TL_OK) << tl_last_error();
  const int n = sizeof kRuns / sizeof kRuns[0];
  tl_cost_model* cm[n];
  for (int i = 0; i < n; i++) {
    const CpRun& r = kRuns[i];
    struct tl_config cfg;
    tl_config_defaults(&cfg);
    tl_model_config m = cfg.model;
    m.kind = TL_MODEL_LLAMA;
    m.n_layers = r.l, m.n_heads = r.heads, m.n_kv_heads = r.kv, m.n_embd = r.h;
    m.ffn_hidden = r.ffn, m.vocab_size = r.vocab, m.max_seq_len = r.seq;
    cm[i] = new tl_cost_model;
    ASSERT_EQ(tl_cost_model_build_cp(&m, r.seq, TL_F32, r.tp, r.cp, cm[i]), TL_OK)
        << tl_last_error();
    ASSERT_EQ(r.gpus % (r.tp * r.pp * r.cp), 0) << r.source << " " << r.model;
    ASSERT_EQ(r.batch % (r.gpus / (r.tp * r.pp * r.cp)), 0) << r.source << " " << r.model;
  }
  // the grid's best factor for the NV24 rows: the least mean |error|
  double best_k = 0, best = HUGE_VAL;
  for (int g = 80; g <= 160; g++) {
    double sum = 0;
    int rows = 0;
    for (int i = 0; i < n; i++) {
      if (std::strcmp(kRuns[i].source, "NV24") != 0) continue;
      Priced x = PriceRun(kRuns[i], cm[i], h100, g / 100.0);
      sum += std::fabs(x.p.t_step / x.measured - 1), rows++;
    }
    if (sum / rows < best) best = sum / rows, best_k = g / 100.0;
  }
  std::printf(
      "the NV24 rows' software factor: %.2f x the spec's efficiencies (mean |error| %.1f%%)\n",
      best_k, 100 * best);
  EXPECT_GE(best_k, 1.0);
  EXPECT_LE(best_k, 1.5);
  std::printf(
      "| source | model | tokens | GPUs | dp x tp x pp x cp | schedule | measured s | predicted "
      "s (spec) | predicted s (x%.2f) | ring shown / carried s | memory GB | error |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      best_k);
  for (int i = 0; i < n; i++) {
    const CpRun& r = kRuns[i];
    const bool nv = std::strcmp(r.source, "NV24") == 0;
    Priced spec = PriceRun(r, cm[i], h100, 1.0), x = PriceRun(r, cm[i], h100, nv ? best_k : 1.0);
    ASSERT_TRUE(std::isfinite(x.p.t_step)) << r.source << " " << r.model;
    const double err = x.p.t_step / x.measured - 1;
    char schedule[32];
    std::snprintf(schedule, sizeof schedule, r.v > 1 ? "interleaved %d" : "1f1b", r.v);
    std::printf(
        "| %s | %s | %d | %d | %d x %d x %d x %d | %s | %.2f | %.2f | %s | %.2f / %.2f | %.1f | "
        "%+.1f%% |\n",
        r.source, r.model, r.seq, r.gpus, x.p.dp, x.p.tp, x.p.pp, x.p.cp, schedule, x.measured,
        spec.p.t_step, nv ? std::to_string(x.p.t_step).substr(0, 5).c_str() : "-", x.p.t_cp,
        x.p.c_cp, x.p.mem_total / 1e9, 100 * (nv ? err : spec.p.t_step / spec.measured - 1));
    if (nv) {
      EXPECT_LE(std::fabs(err), 0.15) << r.source << " " << r.model;
      EXPECT_LT(x.p.t_cp, 0.05 * x.p.t_step) << r.model << ": the ring hides at 8K tokens";
    }
    delete cm[i];
  }
}

}  // namespace
