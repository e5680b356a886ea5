// Context parallelism is the same run: each sequence split in 2 cp chunks
// over the cp ranks (rank i holding chunks i and 2 cp - 1 - i), attention
// passing the key/value blocks around the ring, must train the GPT and the
// grouped-query Llama exactly as one device does — the equality oracle
// (launcher/train/verify.h, what --verify runs) checking every step: the
// same starting weights, losses and gradient norms within 1e-5, gradients
// within 1e-4 of their tensor's largest, AdamW's update replayed from the
// mesh's state, every copy of a parameter the same bits.
//
// On 2 ranks: cp 2 with each model, schedule choice, recomputation, bf16;
// on 3 the same at cp 3, an odd ring (rank 2 sends first, as rank 0 does).
// On 4 ranks: cp 4, and cp 2 with tensor parallelism (and sequence
// parallelism), a pipeline (1F1B, GPipe, interleaved, zero-bubble), and data
// parallelism under ZeRO 0-3;
// bf16 with tensor (sequence) parallelism, a pipeline, and ZeRO 1 and 3
// over dp x cp.
#include <gtest/gtest.h>

#include <string>

#include "core/group.h"
#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"
#include "tests/launcher/equality_common.h"

namespace {

struct Mesh {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int sched = -1, v = 1;  // a schedule other than the default, its chunks a rank
};

void CheckCp(tl_model_kind kind, Mesh m, int micro = 1, int zero = 0, bool sp = false,
             tl_recompute rc = TL_RECOMPUTE_NONE, tl_precision precision = TL_PRECISION_FP32) {
  tl_config c = Base(kind);
  c.mesh.dp = m.dp, c.mesh.tp = m.tp, c.mesh.pp = m.pp, c.mesh.cp = m.cp;
  // an odd ring: sequences of 4 cp tokens (2 cp chunks of 2)
  if (c.train.seq_len % (2 * m.cp)) c.train.seq_len = c.model.max_seq_len = 4 * m.cp;
  c.schedule.micro_batches = micro;
  if (m.sched >= 0) c.schedule.kind = (tl_schedule_kind)m.sched, c.schedule.virtual_stages = m.v;
  c.parallel.zero = zero;
  c.parallel.sequence_parallel = sp;
  c.parallel.recompute = rc;
  c.train.precision = precision;
  c.parallel.bucket_mb = micro == 2 ? 0.002 : 25;  // small buckets: reductions overlap
  std::string what =
      std::string(KindName(kind)) + " cp=" + std::to_string(m.cp) + " dp=" + std::to_string(m.dp) +
      " tp=" + std::to_string(m.tp) + " pp=" + std::to_string(m.pp) +
      (m.sched >= 0 ? std::string(" ") + tl_schedule_kind_name((tl_schedule_kind)m.sched) : "") +
      (sp ? " sp" : "") + " micro=" + std::to_string(micro) + " zero=" + std::to_string(zero) +
      (rc == TL_RECOMPUTE_FULL        ? " recompute=full"
       : rc == TL_RECOMPUTE_SELECTIVE ? " recompute=selective"
                                      : "") +
      (precision == TL_PRECISION_BF16 ? " bf16" : "");
  Report(c, what, {});
}

const tl_model_kind kKinds[] = {TL_MODEL_GPT, TL_MODEL_LLAMA};

TEST(ContextParallel, TheWholeJobAsOneRingEqualsTheSingleDeviceRun) {
  const int n = WorldSize();
  for (tl_model_kind kind : kKinds)
    for (int micro : {1, 2}) CheckCp(kind, {.cp = n}, micro);
}

TEST(ContextParallel, RecomputationAndBf16EqualTheSingleDeviceRun) {
  const int n = WorldSize();
  for (tl_model_kind kind : kKinds) {
    CheckCp(kind, {.cp = n}, 1, 0, false, TL_RECOMPUTE_FULL);
    CheckCp(kind, {.cp = n}, 1, 0, false, TL_RECOMPUTE_SELECTIVE);
    CheckCp(kind, {.cp = n}, 1, 0, false, TL_RECOMPUTE_NONE, TL_PRECISION_BF16);
  }
}

TEST(ContextParallel, WithEveryOtherAxisEqualsTheSingleDeviceRun) {
  const int n = WorldSize();
  if (n < 4) GTEST_SKIP() << "cp with another axis runs on 4 ranks; this job has " << n;
  const int other = n / 2;
  for (tl_model_kind kind : kKinds) {
    CheckCp(kind, {.tp = other, .cp = 2}, 1, 0, false);
    CheckCp(kind, {.tp = other, .cp = 2}, 1, 0, true);
    CheckCp(kind, {.pp = other, .cp = 2}, 2);
    // every pipeline schedule: interleaved (2 chunks a rank) and zero-bubble
    CheckCp(kind, {.pp = other, .cp = 2, .sched = TL_SCHEDULE_INTERLEAVED, .v = 2}, 2);
    CheckCp(kind, {.pp = other, .cp = 2, .sched = TL_SCHEDULE_ZERO_BUBBLE}, 2);
    CheckCp(kind, {.pp = other, .cp = 2, .sched = TL_SCHEDULE_GPIPE}, 2);
    for (int zero : {0, 1, 2, 3}) CheckCp(kind, {.dp = other, .cp = 2}, 1, zero);
    // bf16 with another axis: sequence-parallel shards, a pipeline's bf16
    // activations, ZeRO-1's bf16 working copy gathered over dp x cp and
    // ZeRO-3's units gathered in bf16 over it
    CheckCp(kind, {.tp = other, .cp = 2}, 1, 0, true, TL_RECOMPUTE_NONE, TL_PRECISION_BF16);
    CheckCp(kind, {.pp = other, .cp = 2}, 2, 0, false, TL_RECOMPUTE_NONE, TL_PRECISION_BF16);
    for (int zero : {1, 3})
      CheckCp(kind, {.dp = other, .cp = 2}, 1, zero, false, TL_RECOMPUTE_NONE, TL_PRECISION_BF16);
  }
}

// What the ring moves, in bytes: a step of cp = the job's ranks on one
// sequence, the GPT (2 layers, fused qkv) and the Llama (separate k and v,
// 2 key/value heads of 8): per layer, cp - 1 hops of k and v forward and as
// many backward, cp hops of dk and dv backward, each a rank's block of
// t = T / cp rows of the key/value channels. Under bf16 k and v travel in
// 2 bytes (the graph stores them as bf16 numbers: exact, as the bf16 cases
// above check), dk and dv in 4.
TEST(ContextParallel, TheRingMovesKeysAndValuesInTheStoredDtype) {
  const int n = WorldSize();
  for (tl_model_kind kind : kKinds)
    for (tl_precision precision : {TL_PRECISION_FP32, TL_PRECISION_BF16}) {
      tl_config c = Base(kind);
      c.mesh.cp = n;
      if (c.train.seq_len % (2 * n)) c.train.seq_len = c.model.max_seq_len = 4 * n;
      c.train.batch_size = 1, c.train.steps = 1;
      c.train.precision = precision;
      tl_worker w;
      ASSERT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
      tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
      tl_trainer* t = nullptr;
      ASSERT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
      tl_group_stats_reset(w.groups[TL_AXIS_CP]);
      tl_step_stats st;
      ASSERT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
      const int64_t sent = tl_group_stats_get(w.groups[TL_AXIS_CP]).bytes[TL_GROUP_SEND];
      tl_trainer_destroy(t);
      tl_worker_finalize(&w);
      const int64_t kv_channels =
          (int64_t)(kind == TL_MODEL_LLAMA ? c.model.n_kv_heads : c.model.n_heads) *
          (c.model.n_embd / c.model.n_heads);
      const int64_t block = (int64_t)(c.train.seq_len / n) * kv_channels;  // elements of k
      const int64_t kv_bytes = precision == TL_PRECISION_BF16 ? 2 : 4;
      const int64_t want =
          c.model.n_layers * (2 * (n - 1) * 2 * block * kv_bytes + n * 2 * block * 4);
      EXPECT_EQ(sent, want) << KindName(kind)
                            << (precision == TL_PRECISION_BF16 ? " bf16" : " fp32");
    }
}

}  // namespace
