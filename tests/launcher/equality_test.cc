// The one law: a parallel run is the same run. On the ranks of this job,
// every data x pipeline mesh of it trains an MLP and a GPT for 5 steps with
// GPipe and 1F1B and 1, 2 or 4 micro-batches, and every mesh with tensor
// parallelism trains the GPT (tp alone with and without sequence
// parallelism; every dp x tp x pp factorisation with both schedules, with
// sequence parallelism under 1F1B and without under GPipe) and the MLP
// (its layers in column-/row-parallel pairs) on each of them, with AdamW's
// eps at 1e-8; the equality oracle (launcher/train/verify.h, what --verify
// runs) must find every step equal to the single-device run of the same
// config: starting weights bit for bit, losses and gradient norms within
// 1e-5, gradients within 1e-4 of their tensor's largest, the optimizer's
// update as AdamW replayed from the mesh's state, every copy of a
// parameter the same bits.
//
// The job's rank count picks the meshes (dp * tp * pp = ranks); with
// TL_EQUALITY_FULL=1 every tensor-parallel mesh also runs every combination
// of model, schedule, sequence parallelism and micro-batches. CI runs it
// on 2, 4 and 8 ranks, which covers every mesh of up to 8 ranks whose axes
// are powers of two (the single-device run is the reference of each).
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "launcher/data/tokens.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"
#include "launcher/train/verify.h"
#include "tests/launcher/equality_common.h"

namespace {

void CheckEqual(tl_model_kind kind, int dp, int pp, tl_schedule_kind sched, int micro,
                const std::vector<int>& stage_layers = {}, int tp = 1, bool sp = false,
                int zero = 0, double bucket_mb = 0, tl_recompute rc = TL_RECOMPUTE_NONE,
                tl_precision precision = TL_PRECISION_FP32,
                tl_precision grad_reduce = TL_PRECISION_FP32) {
  tl_config c = Base(kind);
  c.train.precision = precision;
  c.parallel.grad_reduce = grad_reduce;
  c.schedule.n_stage_layers = (int)stage_layers.size();
  for (size_t i = 0; i < stage_layers.size(); i++) c.schedule.stage_layers[i] = stage_layers[i];
  c.mesh.dp = dp, c.mesh.pp = pp, c.mesh.tp = tp;
  c.parallel.sequence_parallel = sp;
  c.parallel.zero = zero;
  c.parallel.recompute = rc;
  c.schedule.kind = sched, c.schedule.micro_batches = micro;
  // small buckets with 2 micro-batches: all-reduces start during the
  // backward pass (overlap); otherwise one bucket at the end
  c.parallel.bucket_mb = bucket_mb > 0 ? bucket_mb : micro == 2 ? 0.002 : 25;
  std::string what = std::string(KindName(kind)) + " dp=" + std::to_string(dp) +
                     " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) + (sp ? " sp" : "") +
                     " " + tl_schedule_kind_name(sched) + " micro=" + std::to_string(micro) +
                     (zero ? " zero=" + std::to_string(zero) : "") +
                     (bucket_mb > 0 ? " bucket_mb=" + std::to_string(bucket_mb) : "") +
                     (rc == TL_RECOMPUTE_SELECTIVE ? " recompute=selective"
                      : rc == TL_RECOMPUTE_FULL    ? " recompute=full"
                                                   : "") +
                     (precision == TL_PRECISION_BF16 ? " bf16" : "") +
                     (grad_reduce == TL_PRECISION_BF16 ? " grad_reduce=bf16" : "");
  for (size_t i = 0; i < stage_layers.size(); i++)
    what += (i ? "+" : " stage layers ") + std::to_string(stage_layers[i]);
  Report(c, what, stage_layers);
}

// The interleaved schedule: v chunks per pipeline rank of a GPT of
// `layers` layers (or the MLP's 4), balanced by FLOPs (uneven chunks where
// the layers do not divide) unless `chunk_layers` cuts it (chunk c of
// stage s is entry c * pp + s).
void CheckInterleaved(tl_model_kind kind, int dp, int tp, int pp, int v, int micro, int layers,
                      bool sp = false, int zero = 0, tl_recompute rc = TL_RECOMPUTE_NONE,
                      const std::vector<int>& chunk_layers = {}) {
  tl_config c = Base(kind);
  if (kind != TL_MODEL_MLP) c.model.n_layers = layers;
  c.mesh.dp = dp, c.mesh.pp = pp, c.mesh.tp = tp;
  c.parallel.sequence_parallel = sp;
  c.parallel.zero = zero;
  c.parallel.recompute = rc;
  c.schedule.kind = TL_SCHEDULE_INTERLEAVED, c.schedule.virtual_stages = v;
  c.schedule.micro_batches = micro;
  c.schedule.n_stage_layers = (int)chunk_layers.size();
  for (size_t i = 0; i < chunk_layers.size(); i++) c.schedule.stage_layers[i] = chunk_layers[i];
  c.parallel.bucket_mb = 0.002;  // buckets start in each chunk's last backward
  std::string what =
      std::string(KindName(kind)) + " L=" + std::to_string(kind != TL_MODEL_MLP ? layers : 4) +
      " dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
      (sp ? " sp" : "") + " interleaved v=" + std::to_string(v) +
      " micro=" + std::to_string(micro) + (zero ? " zero=" + std::to_string(zero) : "") +
      (rc == TL_RECOMPUTE_SELECTIVE ? " recompute=selective"
       : rc == TL_RECOMPUTE_FULL    ? " recompute=full"
                                    : "");
  for (size_t i = 0; i < chunk_layers.size(); i++)
    what += (i ? "+" : " chunk layers ") + std::to_string(chunk_layers[i]);
  Report(c, what, {});
}

TEST(Equality, EveryMeshOfThisJobEqualsTheSingleDeviceRun) {
  int n = WorldSize();
  for (int dp : {1, 2, 4})
    for (int pp : {1, 2, 4}) {
      if (dp * pp != n) continue;
      for (tl_model_kind kind : {TL_MODEL_MLP, TL_MODEL_GPT})
        for (tl_schedule_kind sched : {TL_SCHEDULE_GPIPE, TL_SCHEDULE_1F1B})
          for (int micro : {1, 2, 4}) CheckEqual(kind, dp, pp, sched, micro);
      // stages cut by the config instead of by FLOPs, unevenly
      if (pp == 2) CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_1F1B, 2, {3, 1});
    }
}

TEST(Equality, EveryTensorParallelMeshOfThisJobEqualsTheSingleDeviceRun) {
  int n = WorldSize();
  // TL_EQUALITY_FULL=1 (bazel test --test_env=TL_EQUALITY_FULL=1): every
  // combination of model, schedule, sequence parallelism and 1, 2 or 4
  // micro-batches on every mesh, instead of CI's cover of each
  const char* full = getenv("TL_EQUALITY_FULL");
  for (int tp : {2, 4, 8})
    for (int dp : {1, 2, 4})
      for (int pp : {1, 2, 4}) {
        if (dp * tp * pp != n) continue;
        if (full && full[0] == '1') {
          for (tl_model_kind kind : {TL_MODEL_MLP, TL_MODEL_GPT})
            for (tl_schedule_kind sched : {TL_SCHEDULE_GPIPE, TL_SCHEDULE_1F1B})
              for (bool sp : {false, true})
                for (int micro : {1, 2, 4})
                  if ((pp > 1 || sched == TL_SCHEDULE_1F1B) && (!sp || kind == TL_MODEL_GPT))
                    CheckEqual(kind, dp, pp, sched, micro, {}, tp, sp);
          continue;
        }
        if (dp == 1 && pp == 1) {  // tp alone, with and without sequence parallelism
          CheckEqual(TL_MODEL_GPT, 1, 1, TL_SCHEDULE_1F1B, 2, {}, tp, false);
          CheckEqual(TL_MODEL_GPT, 1, 1, TL_SCHEDULE_1F1B, 2, {}, tp, true);
        } else if (pp == 1) {
          CheckEqual(TL_MODEL_GPT, dp, 1, TL_SCHEDULE_1F1B, 2, {}, tp, true);
        } else {
          CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_GPIPE, 2, {}, tp, false);
          CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_1F1B, 2, {}, tp, true);
        }
        // the MLP's column-/row-parallel pairs
        CheckEqual(TL_MODEL_MLP, dp, pp, TL_SCHEDULE_1F1B, 2, {}, tp, false);
      }
}

// ZeRO-1, 2 and 3: every mesh of this job with data parallelism (tp 1
// and 2, pp 1, 2 and 4), both models and both schedules, each stage run
// with 2 micro-batches and buckets of a few hundred elements (many
// reduce-scatters, started during the backward, buckets cut through
// tensors, ZeRO-2's two bucket buffers taking many turns, ZeRO-3's units
// gathered ahead) and, on 2 and 4 ranks, with one micro-batch and one
// bucket per stage part;
// the tied embedding, sequence parallelism's LayerNorms and the global
// norm all run on shards. Every step
// must be the single-device run's (the oracle, as above); a single device
// with ZeRO (a group of one) too.
TEST(Equality, EveryZeroStageOnEveryDataParallelMeshEqualsTheSingleDeviceRun) {
  int n = WorldSize();
  if (n == 2) {  // a group of one shards nothing and must still be the run
    for (int zero : {1, 2, 3})
      CheckEqual(TL_MODEL_GPT, 1, 2, TL_SCHEDULE_1F1B, 2, {}, 1, false, zero);
    // the MLP's 3208 parameters in 3 buckets, then 1: ZeRO-2's two bucket
    // buffers meet a bucket of the last pass in the slot of the next
    for (int zero : {2, 3})
      for (double mb : {0.0042, 1.0})
        for (int micro : {2, 4})
          CheckEqual(TL_MODEL_MLP, 2, 1, TL_SCHEDULE_1F1B, micro, {}, 1, false, zero, mb);
  }
  for (int zero : {1, 2, 3})
    for (int tp : {1, 2})
      for (int dp : {2, 4})
        for (int pp : {1, 2, 4}) {
          if (dp * tp * pp != n) continue;
          for (tl_model_kind kind : {TL_MODEL_MLP, TL_MODEL_GPT})
            for (tl_schedule_kind sched : {TL_SCHEDULE_GPIPE, TL_SCHEDULE_1F1B}) {
              bool sp = tp > 1 && kind == TL_MODEL_GPT && sched == TL_SCHEDULE_1F1B;
              CheckEqual(kind, dp, pp, sched, 2, {}, tp, sp, zero);
            }
          if (n <= 4)  // one micro-batch, one bucket a part (CI time: not on 8 ranks)
            CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_1F1B, 1, {}, tp, false, zero);
        }
  // the tied embedding over a pipeline, written (and under ZeRO-3 read) in
  // pieces on both its stages, cut alike, its shards summed over them (a
  // vocabulary of 4000: pieces of a bucket's rows hold less than its
  // gradient); in bf16 too, and beside tensor parallelism's vocabulary split
  for (int zero : {2, 3})
    for (int tp : {1, 2})
      for (tl_precision precision : {TL_PRECISION_FP32, TL_PRECISION_BF16}) {
        const int dp = 2, pp = 2;
        if (dp * tp * pp != n || (tp > 1 && precision == TL_PRECISION_BF16)) continue;
        tl_config c = Base(TL_MODEL_GPT);
        c.model.vocab_size = 4000;
        c.mesh.dp = dp, c.mesh.tp = tp, c.mesh.pp = pp;
        c.parallel.zero = zero, c.parallel.bucket_mb = 0.02;
        c.schedule.micro_batches = 2;
        c.train.precision = precision;
        Report(c,
               "gpt V=4000 dp=2 tp=" + std::to_string(tp) + " pp=2 zero=" + std::to_string(zero) +
                   (precision == TL_PRECISION_BF16 ? " bf16" : "") +
                   ": the tied embedding in pieces on both stages",
               {});
      }
  // ZeRO-2 writing a stage's largest matrix in pieces, where staging it
  // would cost what sharding saves: an MLP of two layers, the last the
  // vocabulary's (the shipped MLP example's shape; its linear layers have
  // biases), on dp 2 and on dp 2 x pp 2 (the embedding's table in pieces
  // on the first stage, the last layer's weight on the second), fp32 and
  // bf16
  for (int pp : {1, 2})
    for (tl_precision precision : {TL_PRECISION_FP32, TL_PRECISION_BF16}) {
      if (2 * pp != n) continue;
      tl_config c = Base(TL_MODEL_MLP);
      c.model.n_mlp_layers = 2;
      const int sizes[3] = {32, 48, 64};
      memcpy(c.model.mlp_sizes, sizes, sizeof sizes);
      c.mesh.dp = 2, c.mesh.pp = pp;
      c.parallel.zero = 2;
      c.schedule.micro_batches = 2;
      c.train.precision = precision;
      Report(c,
             "mlp 32-48-64 dp=2 pp=" + std::to_string(pp) + " zero=2" +
                 (precision == TL_PRECISION_BF16 ? " bf16" : "") +
                 ": each stage's largest matrix in pieces",
             {});
    }
}

// Recomputation (the reference keeps every activation): each mode on dp x
// pp and dp x tp x pp meshes (sequence parallelism too, whose gathers full
// recomputation re-runs), both schedules, with ZeRO where it meets the
// recomputed nodes' parameter gathers (ZeRO-3); the MLP's full mode.
TEST(Equality, EveryRecomputationModeEqualsTheSingleDeviceRunThatKeepsEverything) {
  int n = WorldSize();
  for (tl_recompute rc : {TL_RECOMPUTE_SELECTIVE, TL_RECOMPUTE_FULL})
    for (int tp : {1, 2})
      for (int pp : {1, 2}) {
        int dp = n / tp / pp;
        if (dp < 1 || dp * tp * pp != n) continue;
        // CI time: 8 ranks run full recomputation on dp x tp x pp only
        if (n == 8 && (pp == 1 || tp == 1 || rc != TL_RECOMPUTE_FULL)) continue;
        bool sp = tp > 1 && rc == TL_RECOMPUTE_FULL;
        CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_1F1B, 2, {}, tp, sp, 0, 0, rc);
        if (n <= 4)
          CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_GPIPE, 2, {}, tp, false, dp > 1 ? 3 : 0, 0,
                     rc);
      }
  if (n == 2)
    CheckEqual(TL_MODEL_MLP, 1, 2, TL_SCHEDULE_1F1B, 2, {}, 1, false, 0, 0, TL_RECOMPUTE_FULL);
}

// Zero-bubble (every backward split into its input and weight passes, the
// weight passes run where 1F1B would idle) on dp x pp and dp x tp x pp
// meshes, with sequence parallelism, ZeRO-1, recomputation and 4
// micro-batches, for the GPT and the MLP.
TEST(Equality, ZeroBubbleEqualsTheSingleDeviceRun) {
  int n = WorldSize();
  for (int tp : {1, 2})
    for (int pp : {2, 4}) {
      int dp = n / tp / pp;
      if (dp < 1 || dp * tp * pp != n) continue;
      if (n == 8 && (tp != 2 || pp != 2)) continue;  // CI time: 8 ranks run 2 x 2 x 2 only
      const tl_schedule_kind zb = TL_SCHEDULE_ZERO_BUBBLE;
      CheckEqual(TL_MODEL_GPT, dp, pp, zb, 4, {}, tp, tp > 1, 0);
      if (n == 8) continue;  // CI time: one run a mesh on 8 ranks
      CheckEqual(TL_MODEL_MLP, dp, pp, zb, 2, {}, tp, false, 0);
      if (dp > 1) CheckEqual(TL_MODEL_GPT, dp, pp, zb, 2, {}, tp, false, 1);
      CheckEqual(TL_MODEL_GPT, dp, pp, zb, 2, {}, tp, false, 0, 0, TL_RECOMPUTE_FULL);
    }
}

// Interleaved 1F1B (v model chunks per pipeline rank, the micro-batches
// going round the pipeline v times): v = 2 and 3, even and uneven chunks,
// on dp x pp and dp x tp x pp meshes, with sequence parallelism, ZeRO-1 and
// recomputation, the tied embedding on the first and last chunks.
TEST(Equality, InterleavedEqualsTheSingleDeviceRun) {
  int n = WorldSize();
  for (int tp : {1, 2})
    for (int pp : {2, 4}) {
      int dp = n / tp / pp;
      if (dp < 1 || dp * tp * pp != n) continue;
      if (n == 8 && (tp != 2 || pp != 2)) continue;  // CI time: 8 ranks run 2 x 2 x 2 only
      const tl_model_kind gpt = TL_MODEL_GPT;
      // 5 layers in 2 x 2 chunks: one chunk of two
      CheckInterleaved(gpt, dp, tp, pp, 2, pp, pp * 2 + 1, tp > 1);
      if (n == 8) continue;  // CI time: one run a mesh on 8 ranks
      // 3 chunks a rank, 2 rounds of micro-batches
      CheckInterleaved(gpt, dp, tp, pp, 3, 2 * pp, pp * 3 + 1, false, dp > 1 ? 1 : 0);
      if (pp == 2 && tp == 1) {
        CheckInterleaved(gpt, dp, tp, pp, 2, 2 * pp, 4, false, 0, TL_RECOMPUTE_FULL);
        CheckInterleaved(TL_MODEL_MLP, dp, tp, pp, 2, pp, 4);
        CheckInterleaved(gpt, dp, tp, pp, 2, pp, 6, false, 0, TL_RECOMPUTE_NONE, {1, 2, 2, 1});
      }
    }
}

// bf16 mixed precision (train.precision "bf16"): every mesh of this job
// equals the bf16 single-device run, to the oracle's bf16 tolerances
// (launcher/train/verify.h says why they are looser: a reassociated fp32
// sum can round to the neighbouring bf16 value): data, tensor (with
// sequence parallelism) and pipeline parallelism alone and together, ZeRO
// 1-3, full recomputation, zero-bubble, both models.
TEST(Equality, Bf16OnEveryMeshEqualsTheBf16SingleDeviceRun) {
  const int n = WorldSize();
  const tl_precision bf16 = TL_PRECISION_BF16;
  const tl_model_kind gpt = TL_MODEL_GPT, mlp = TL_MODEL_MLP;
  for (int tp : {1, 2})
    for (int pp : {1, 2, 4}) {
      int dp = n / tp / pp;
      if (dp < 1 || dp * tp * pp != n) continue;
      if (n == 8 && (tp != 2 || pp != 2)) continue;  // CI time: 8 ranks run 2 x 2 x 2 only
      const bool sp = tp > 1;
      CheckEqual(gpt, dp, pp, TL_SCHEDULE_1F1B, 2, {}, tp, sp, 0, 0, TL_RECOMPUTE_NONE, bf16);
      if (n == 8) continue;
      if (dp > 1)
        CheckEqual(gpt, dp, pp, TL_SCHEDULE_GPIPE, 2, {}, tp, false, 3, 0, TL_RECOMPUTE_NONE, bf16);
      if (pp > 1)
        CheckEqual(gpt, dp, pp, TL_SCHEDULE_ZERO_BUBBLE, 2, {}, tp, false, dp > 1 ? 1 : 0, 0,
                   TL_RECOMPUTE_FULL, bf16);
      if (dp == 2 && pp == 1)  // the bf16 working copy gathered from sharded fp32 masters
        CheckEqual(gpt, dp, pp, TL_SCHEDULE_1F1B, 2, {}, tp, sp, 2, 0, TL_RECOMPUTE_NONE, bf16);
      CheckEqual(mlp, dp, pp, TL_SCHEDULE_1F1B, 2, {}, tp, false, 0, 0, TL_RECOMPUTE_NONE, bf16);
    }
}

// The Llama family (RMSNorm, rotary positions, SwiGLU, grouped-query
// attention, an untied head) on every axis, as the GPT runs them: data,
// tensor with sequence parallelism (the q/k/v and gate/up projections
// column-parallel by heads, o and down row-parallel, the untied head and
// its loss vocabulary-parallel, the norms on token rows), pipelines (GPipe,
// 1F1B, interleaved, zero-bubble), ZeRO 1-3, selective and full
// recomputation, bf16, and dp x tp x pp — each step the single-device run
// of the same Llama.
TEST(Equality, LlamaOnEveryAxisEqualsTheSingleDeviceRun) {
  const int n = WorldSize();
  const tl_model_kind llama = TL_MODEL_LLAMA;
  const tl_schedule_kind f1b = TL_SCHEDULE_1F1B, gpipe = TL_SCHEDULE_GPIPE;
  const tl_recompute none = TL_RECOMPUTE_NONE;
  if (n == 2) {
    CheckEqual(llama, 2, 1, f1b, 2);                      // dp
    CheckEqual(llama, 1, 1, f1b, 2, {}, 2, true);         // tp + sp
    CheckEqual(llama, 1, 1, f1b, 1, {}, 2, false);        // tp alone
    CheckEqual(llama, 1, 2, gpipe, 2);                    // pp, GPipe
    CheckEqual(llama, 1, 2, f1b, 4, {3, 1});              // pp, 1F1B, uneven
    CheckEqual(llama, 1, 2, TL_SCHEDULE_ZERO_BUBBLE, 4);  // zero-bubble
    CheckInterleaved(llama, 1, 1, 2, 2, 2, 5);            // interleaved
    for (int zero : {1, 2, 3}) CheckEqual(llama, 2, 1, f1b, 2, {}, 1, false, zero);
    CheckEqual(llama, 1, 2, f1b, 2, {}, 1, false, 0, 0, TL_RECOMPUTE_SELECTIVE);
    CheckEqual(llama, 1, 1, f1b, 2, {}, 2, true, 0, 0, TL_RECOMPUTE_FULL);
    CheckEqual(llama, 1, 1, f1b, 2, {}, 2, true, 0, 0, none, TL_PRECISION_BF16);
    CheckEqual(llama, 2, 1, f1b, 2, {}, 1, false, 3, 0, none, TL_PRECISION_BF16);
  } else if (n == 4) {
    CheckEqual(llama, 2, 1, f1b, 2, {}, 2, true);                      // dp x tp
    CheckEqual(llama, 1, 2, gpipe, 2, {}, 2, false);                   // tp x pp
    CheckEqual(llama, 2, 2, f1b, 2, {}, 1, false, 3);                  // ZeRO-3 x pp
    CheckEqual(llama, 1, 2, TL_SCHEDULE_ZERO_BUBBLE, 2, {}, 2, true);  // zero-bubble x tp
    CheckInterleaved(llama, 1, 2, 2, 2, 2, 4, true);                   // interleaved x tp
    CheckEqual(llama, 2, 2, f1b, 2, {}, 1, false, 1, 0, TL_RECOMPUTE_FULL, TL_PRECISION_BF16);
  } else if (n == 8) {
    CheckEqual(llama, 2, 2, f1b, 2, {}, 2, true);  // dp x tp x pp
  }
}

// parallel.grad_reduce "bf16": the data-parallel reduction rounds each
// replica's gradients to bf16 and sums them in bf16, at every ZeRO stage
// (each moves its buckets its own way: all-reduce, reduce-scatter from the
// buffer, from ZeRO-2's slots), in fp32 and bf16 training; every step
// equals the single-device run to the bf16 tolerances, and the reduction
// moves half the bytes of fp32's.
TEST(Equality, Bf16GradientReductionEqualsTheSingleDeviceRun) {
  const int n = WorldSize();
  const tl_precision bf16 = TL_PRECISION_BF16, fp32 = TL_PRECISION_FP32;
  const tl_recompute none = TL_RECOMPUTE_NONE;
  for (int pp : {1, 2}) {
    const int dp = n / pp;
    if (dp < 2 || dp * pp != n || (n == 8 && pp == 1)) continue;
    for (int zero : {0, 1, 2, 3})
      CheckEqual(TL_MODEL_GPT, dp, pp, TL_SCHEDULE_1F1B, 2, {}, 1, false, zero, 0, none,
                 zero == 3 ? bf16 : fp32, bf16);
  }
  if (n != 2) return;
  // a stage whose late gradients (the tied embedding) outnumber its early
  // ones, in one bucket a part: ZeRO-2 and 3 reduce the late bucket from
  // the gradient buffer, through a bf16 image as long as the longest part
  for (int zero : {2, 3}) {
    tl_config c = Base(TL_MODEL_GPT);
    c.model.n_layers = 1, c.model.vocab_size = 4000;  // wte 4096 x 32, a block 12.7k
    c.mesh.dp = 2, c.parallel.zero = zero, c.parallel.bucket_mb = 25;
    c.schedule.micro_batches = 2;
    c.parallel.grad_reduce = bf16;
    Report(c, "gpt L=1 V=4000 dp=2 zero=" + std::to_string(zero) + " grad_reduce=bf16 one bucket",
           {});
  }
  // the bytes: ZeRO-0's all-reduce and ZeRO-1's reduce-scatter
  for (int zero : {0, 1}) {
    int64_t bytes[2];
    for (int i = 0; i < 2; i++) {
      tl_config c = Base(TL_MODEL_GPT);
      c.mesh.dp = 2, c.parallel.zero = zero, c.train.steps = 1, c.schedule.micro_batches = 2;
      c.parallel.grad_reduce = i ? bf16 : fp32;
      tl_worker w;
      ASSERT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
      tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
      tl_trainer* t = nullptr;
      ASSERT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
      tl_group_stats_reset(w.groups[TL_AXIS_DP]);
      tl_step_stats st;
      ASSERT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
      tl_group_stats s = tl_group_stats_get(w.groups[TL_AXIS_DP]);
      bytes[i] = s.bytes[zero ? TL_GROUP_REDUCE_SCATTER : TL_GROUP_ALL_REDUCE];
      tl_trainer_destroy(t);
      tl_worker_finalize(&w);
    }
    std::printf("zero=%d: the gradient reduction moved %lld bytes in fp32, %lld in bf16\n", zero,
                (long long)bytes[0], (long long)bytes[1]);
    EXPECT_GT(bytes[0], 0);
    EXPECT_NEAR((double)bytes[1] / (double)bytes[0], 0.5, 0.01) << "zero=" << zero;
  }
}

// ZeRO-3 in bf16 training gathers the parameters rounded to bf16, half the
// bytes of fp32's, into bf16 slots the executor widens: exactly what a bf16
// graph reads (it rounds every parameter to bf16 on the way in), so the
// losses are ZeRO-2's bit for bit — ZeRO-2 in bf16 reads its whole bf16
// working copy, the same rounding of the same fp32 master (no clipping:
// the norm's sum is cut differently by the two). ZeRO 1 and 2 gather the
// updated chunks of that working copy in bf16: ZeRO-1's losses are ZeRO-0's
// bit for bit, ZeRO-0 reading fp32 parameters the graph rounds (a sum of
// two replicas is the same float reduced whole or scattered). Every stage's
// gathers move half the bytes of the same run in fp32.
TEST(Equality, ZeroInBf16GathersRoundedParametersExactly) {
  if (WorldSize() != 2) GTEST_SKIP() << "a two-rank case";
  auto run = [](int zero, tl_precision precision, int64_t* gathered) {
    std::vector<double> losses;
    tl_config c = Base(TL_MODEL_GPT);
    c.mesh.dp = 2, c.parallel.zero = zero, c.train.steps = 3, c.schedule.micro_batches = 2;
    c.train.precision = precision, c.train.grad_clip = 0;
    tl_worker w;
    EXPECT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
    tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
    tl_trainer* t = nullptr;
    EXPECT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
    tl_group_stats_reset(w.groups[TL_AXIS_DP]);
    for (int s = 0; s < c.train.steps && t; s++) {
      tl_step_stats st;
      EXPECT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
      losses.push_back(st.loss);
    }
    *gathered = tl_group_stats_get(w.groups[TL_AXIS_DP]).bytes[TL_GROUP_ALL_GATHER];
    tl_trainer_destroy(t);
    tl_worker_finalize(&w);
    return losses;
  };
  int64_t bf16[4] = {0}, fp32[4] = {0};
  std::vector<double> zero2 = run(2, TL_PRECISION_BF16, &bf16[2]);
  std::vector<double> zero3 = run(3, TL_PRECISION_BF16, &bf16[3]);
  ASSERT_EQ(zero2.size(), 3u);
  ASSERT_EQ(zero3.size(), 3u);
  for (int s = 0; s < 3; s++) EXPECT_EQ(zero3[s], zero2[s]) << "step " << s + 1;
  std::vector<double> zero1 = run(1, TL_PRECISION_BF16, &bf16[1]);
  std::vector<double> zero0 = run(0, TL_PRECISION_BF16, &bf16[0]);
  ASSERT_EQ(zero1.size(), 3u);
  ASSERT_EQ(zero0.size(), 3u);
  for (int s = 0; s < 3; s++) EXPECT_EQ(zero1[s], zero0[s]) << "ZeRO-1, step " << s + 1;
  for (int zero = 1; zero <= 3; zero++) {
    run(zero, TL_PRECISION_FP32, &fp32[zero]);
    if (WorldRank() == 0)
      std::printf("ZeRO-%d gathered %lld bytes in bf16 training, %lld in fp32\n", zero,
                  (long long)bf16[zero], (long long)fp32[zero]);
    EXPECT_GT(fp32[zero], 0) << "ZeRO-" << zero;
    EXPECT_EQ(2 * bf16[zero], fp32[zero]) << "ZeRO-" << zero;
  }
}

// A pipeline boundary carries the residual stream: whole between stages of
// one rank each, 1/tp of it per tensor-parallel rank otherwise — with
// sequence parallelism each rank's token rows, without it each rank's chunk
// of the (identical) whole, all-gathered over tp on arrival. Counted on
// every rank over a GPT of dp x 2 x 2 (GPipe without, 1F1B with sequence
// parallelism) and dp x 1 x 2: each step, stage 0 sends every micro-batch's
// activations and stage 1 their gradients, b x T x C floats / tp each
// (bf16 numbers, 2 bytes each, under train.precision "bf16").
TEST(Equality, PipelineBoundariesCarryOneTensorParallelShardEach) {
  int n = WorldSize();
  if (n != 4 && n != 8) GTEST_SKIP() << "runs on 4 and 8 ranks (dp x tp 2 x pp 2)";
  for (int tp : {1, 2})
    for (int sp_bf16 = 0; sp_bf16 < 3; sp_bf16++) {
      // 0: no sequence parallelism; 1: with; 2: with, in bf16 (2 bytes an element)
      const bool sp = sp_bf16 > 0, bf16 = sp_bf16 == 2;
      if (tp == 1 && sp) continue;
      tl_config c = Base(TL_MODEL_GPT);
      if (bf16) c.train.precision = TL_PRECISION_BF16;
      c.mesh.tp = tp, c.mesh.pp = 2, c.mesh.dp = n / (2 * tp);
      c.parallel.sequence_parallel = sp;
      c.schedule.kind = sp ? TL_SCHEDULE_1F1B : TL_SCHEDULE_GPIPE, c.schedule.micro_batches = 2;
      c.train.steps = 2;
      struct Run r = Train(c);
      const int64_t b = c.train.batch_size / c.mesh.dp / c.schedule.micro_batches;
      const int64_t floats = b * c.train.seq_len * c.model.n_embd / tp;
      EXPECT_EQ(r.pp_send_bytes, c.train.steps * c.schedule.micro_batches * floats * (bf16 ? 2 : 4))
          << "tp=" << tp << (sp ? " sp" : "") << (bf16 ? " bf16" : "") << ", rank " << WorldRank();
      // and the run is still the single-device run
      if (WorldRank() == 0) {
        EXPECT_TRUE(r.report.equal) << r.report.failure;
      }
    }
}

// parallel.deterministic: after 20 steps the parameters and AdamW moments
// of every data x pipeline mesh of this job are the single-device run's bit
// for bit (the same micro-batch size: 2 sequences), and so are the llm.c
// model files they export and every step's loss; without it a mesh with data parallelism is not
// (so the comparison can fail).
struct Bits {
  std::vector<float> state;  // parameters, first and second moments (rank 0)
  std::string exported;      // the llm.c model file's bytes (rank 0, gpt)
  std::vector<double> losses;
};

Bits TrainFree(const tl_config& c, bool single) {
  Bits b;
  tl_worker w;
  tl_trainer* t = nullptr;
  tl_trainer_comm comm = {};
  if (!single) {
    EXPECT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
    comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
  }
  EXPECT_EQ(tl_trainer_create(&c, single ? nullptr : &comm, &t), TL_OK) << tl_last_error();
  if (!t) return b;
  for (int s = 0; s < c.train.steps; s++) {
    tl_step_stats st;
    EXPECT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
    b.losses.push_back(st.loss);
  }
  int64_t n = tl_trainer_model(t)->n_params;
  bool root = single || WorldRank() == 0;
  if (root) b.state.resize(3 * n);
  EXPECT_EQ(tl_trainer_gather(t, root ? b.state.data() : nullptr, 1), TL_OK) << tl_last_error();
  if (c.model.kind == TL_MODEL_GPT) {
    const char* dir = getenv("TEST_TMPDIR");
    std::string path = std::string(dir ? dir : "/tmp") + (single ? "/one.bin" : "/mesh.bin");
    EXPECT_EQ(tl_trainer_export(t, path.c_str()), TL_OK) << tl_last_error();
    if (root) b.exported = ReadAll(path);
  }
  tl_trainer_destroy(t);
  if (!single) tl_worker_finalize(&w);
  return b;
}

TEST(Equality, DeterministicModeGivesTheSingleDeviceBits) {
  int n = WorldSize();
  for (int dp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      for (tl_model_kind kind : {TL_MODEL_GPT, TL_MODEL_MLP, TL_MODEL_LLAMA}) {
        if (dp * pp != n) continue;
        if (kind == TL_MODEL_LLAMA && n == 8) continue;  // CI time: 2 and 4 ranks
        for (bool det : {true, false}) {
          if (!det && dp == 1) continue;  // pipelines alone may well agree either way
          tl_config c = Base(kind);
          c.train.steps = 20;
          c.mesh.dp = dp, c.mesh.pp = pp;
          c.parallel.deterministic = det;
          c.schedule.kind = TL_SCHEDULE_1F1B;
          c.schedule.micro_batches = c.train.batch_size / dp / 2;  // 2 sequences each
          std::string what = std::string(KindName(kind)) + " dp=" + std::to_string(dp) +
                             " pp=" + std::to_string(pp) + (det ? " deterministic" : " normal");
          Bits mesh = TrainFree(c, false);
          if (WorldRank() != 0) continue;
          tl_config one = c;
          one.mesh.dp = one.mesh.pp = 1;
          one.schedule.micro_batches = c.train.batch_size / 2;
          Bits ref = TrainFree(one, true);
          ASSERT_EQ(mesh.state.size(), ref.state.size()) << what;
          size_t differ = 0;
          for (size_t i = 0; i < ref.state.size(); i++)
            differ += memcmp(&mesh.state[i], &ref.state[i], sizeof(float)) != 0;
          if (det) {
            EXPECT_EQ(differ, 0u) << what << ": parameters and moments, of " << ref.state.size();
            EXPECT_TRUE(mesh.exported == ref.exported) << what << ": the llm.c model files";
            EXPECT_TRUE(mesh.losses == ref.losses) << what << ": the losses";
          } else {
            EXPECT_GT(differ, 0u) << what << ": the normal mode sums in the mesh's order";
          }
          printf("%-32s %zu of %zu parameter and moment elements differ in their bits%s\n",
                 what.c_str(), differ, ref.state.size(),
                 kind == TL_MODEL_GPT && det
                     ? (mesh.exported == ref.exported ? "; model files identical"
                                                      : "; model files DIFFER")
                     : "");
        }
      }
}

}  // namespace
