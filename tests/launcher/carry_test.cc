// A run carried across meshes is the same run: what one mesh saves,
// another resumes, and what any mesh exports is the single device's. On
// the ranks of this job: a ZeRO-1/2 bf16 run's checkpoint (fp32 master)
// resumes bit for bit and loads on one device, and so does a run whose
// tied embedding lies in pieces on two pipeline stages; a Llama's checkpoints
// resume on a mesh whose every axis differs; the Hugging Face export of
// every mesh is the single device's byte for byte. (The runs themselves:
// equality_test.cc.)
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "launcher/job/worker.h"
#include "launcher/train/trainer.h"
#include "tests/launcher/equality_common.h"

namespace {

// Checkpoints of a Llama resume on another mesh: 2 steps on mesh A, saved
// (one file, and sharded with ZeRO-3 where A has data parallelism), then
// steps 3 and 4 on mesh B from it give the losses of 4 uninterrupted steps
// on A, within reassociation (1e-5 relative).
// `single`: on this rank alone, without the job (a mesh of one device).
std::vector<double> TrainSteps(tl_config c, int steps, const std::string& save,
                               const std::string& resume, bool sharded = false,
                               bool single = false) {
  std::vector<double> losses;
  snprintf(c.checkpoint.resume, sizeof c.checkpoint.resume, "%s", resume.c_str());
  c.checkpoint.format =
      sharded || c.parallel.zero == 3 ? TL_CHECKPOINT_SHARDED : TL_CHECKPOINT_FILE;
  tl_worker w;
  tl_trainer_comm comm = {};
  if (!single) {
    EXPECT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
    comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
  }
  tl_trainer* t = nullptr;
  EXPECT_EQ(tl_trainer_create(&c, single ? nullptr : &comm, &t), TL_OK) << tl_last_error();
  for (int s = 0; t && s < steps; s++) {
    tl_step_stats st;
    EXPECT_EQ(tl_trainer_step(t, &st), TL_OK) << tl_last_error();
    losses.push_back(st.loss);
  }
  if (t && !save.empty()) {
    EXPECT_EQ(tl_trainer_save(t, save.c_str()), TL_OK) << tl_last_error();
  }
  tl_trainer_destroy(t);
  if (!single) tl_worker_finalize(&w);
  return losses;
}

// ZeRO 1 and 2 in bf16 training hold bf16 working parameters and the fp32
// master sharded with the moments (Megatron-LM's distributed optimizer);
// checkpoints keep the fp32 master, one file or sharded. At dp 2: 2 steps,
// saved, then 2 more from the checkpoint give the 4 uninterrupted steps'
// losses bit for bit; and the checkpoint loads on one device (ZeRO-0,
// nothing sharded), whose next step reads the same parameters (the loss
// of the whole batch, reassociated) and whose step after that follows
// within bf16's rounding.
TEST(Equality, ZeroInBf16ResumesBitForBitAndLoadsOnOneDevice) {
  if (WorldSize() != 2) GTEST_SKIP() << "a two-rank case (dp 2)";
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/bf16_master";
  for (int zero : {1, 2})
    for (bool sharded : {false, true}) {
      tl_config c = Base(TL_MODEL_GPT);
      c.train.precision = TL_PRECISION_BF16;
      c.mesh.dp = 2, c.parallel.zero = zero;
      c.schedule.micro_batches = 2, c.parallel.bucket_mb = 0.002;
      const std::vector<double> whole = TrainSteps(c, 4, "", "");
      const std::string ckpt = root + std::to_string(zero) + (sharded ? "" : ".ckpt");
      TrainSteps(c, 2, ckpt, "", sharded);
      const std::vector<double> rest = TrainSteps(c, 2, "", ckpt, sharded);
      tl_config one = c;
      one.mesh.dp = 1, one.parallel.zero = 0;
      const std::vector<double> alone = TrainSteps(one, 2, "", ckpt, sharded, true);
      ASSERT_EQ(whole.size(), 4u);
      ASSERT_EQ(rest.size(), 2u);
      ASSERT_EQ(alone.size(), 2u);
      const std::string what =
          "zero=" + std::to_string(zero) + (sharded ? " sharded" : " one file");
      for (int s = 0; s < 2; s++)
        EXPECT_EQ(rest[s], whole[2 + s]) << what << ": step " << s + 3 << " resumed on dp 2";
      EXPECT_NEAR(alone[0], whole[2], 1e-6 * whole[2]) << what << ": step 3 on one device";
      EXPECT_NEAR(alone[1], whole[3], 1e-5 * whole[3]) << what << ": step 4 on one device";
      if (WorldRank() == 0)
        printf(
            "bf16 dp=2 %s: steps 3-4 resumed %.9f %.9f, uninterrupted %.9f %.9f, "
            "on one device %.9f %.9f\n",
            what.c_str(), rest[0], rest[1], whole[2], whole[3], alone[0], alone[1]);
    }
}

// The tied embedding over a pipeline under ZeRO 2 and 3 is written (and
// read) in pieces on both its stages, each stage's shard of it summed with
// the other's (trainer_pieces.c): at dp 2 x pp 2, a vocabulary of 4000,
// 2 steps saved (one file for ZeRO-2, sharded for ZeRO-3), then 2 more from
// the checkpoint give the 4 uninterrupted steps' losses bit for bit, and
// the checkpoint loads on one device, whose next step is the mesh's.
TEST(Equality, TiedEmbeddingInPiecesOverAPipelineResumesBitForBit) {
  if (WorldSize() != 4) GTEST_SKIP() << "a four-rank case (dp 2 x pp 2)";
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/tied_pieces";
  for (int zero : {2, 3}) {
    tl_config c = Base(TL_MODEL_GPT);
    c.model.vocab_size = 4000;
    c.mesh.dp = 2, c.mesh.pp = 2, c.parallel.zero = zero;
    c.schedule.micro_batches = 2, c.parallel.bucket_mb = 0.02;
    const std::vector<double> whole = TrainSteps(c, 4, "", "");
    const std::string ckpt = root + std::to_string(zero) + (zero == 3 ? "" : ".ckpt");
    TrainSteps(c, 2, ckpt, "");
    const std::vector<double> rest = TrainSteps(c, 2, "", ckpt);
    tl_config one = c;
    one.mesh.dp = 1, one.mesh.pp = 1, one.parallel.zero = 0;
    const std::vector<double> alone = TrainSteps(one, 1, "", ckpt, zero == 3, true);
    ASSERT_EQ(whole.size(), 4u);
    ASSERT_EQ(rest.size(), 2u);
    ASSERT_EQ(alone.size(), 1u);
    for (int s = 0; s < 2; s++)
      EXPECT_EQ(rest[s], whole[2 + s]) << "zero=" << zero << ": step " << s + 3 << " resumed";
    EXPECT_NEAR(alone[0], whole[2], 1e-6 * whole[2]) << "zero=" << zero << ": on one device";
    if (WorldRank() == 0)
      printf(
          "V=4000 dp=2 pp=2 zero=%d: steps 3-4 resumed %.9f %.9f, uninterrupted %.9f %.9f, "
          "step 3 on one device %.9f\n",
          zero, rest[0], rest[1], whole[2], whole[3], alone[0]);
  }
}

TEST(Equality, LlamaCheckpointsResumeOnAnotherMesh) {
  const int n = WorldSize();
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/llama_ckpt";
  struct Mesh {
    int dp, tp, pp, zero;
  };
  // A, then B: every axis changes somewhere
  std::vector<std::pair<Mesh, Mesh>> pairs;
  if (n == 2) pairs = {{{1, 2, 1, 0}, {2, 1, 1, 1}}, {{2, 1, 1, 3}, {1, 1, 2, 0}}};
  if (n == 4) pairs = {{{2, 1, 2, 3}, {1, 2, 2, 0}}, {{1, 2, 2, 0}, {2, 2, 1, 1}}};
  if (n == 8) pairs = {{{2, 2, 2, 3}, {4, 2, 1, 1}}};
  int k = 0;
  for (const auto& [a, b] : pairs) {
    tl_config c = Base(TL_MODEL_LLAMA);
    c.train.steps = 4;
    c.schedule.micro_batches = 2;
    auto set = [&](const Mesh& m) {
      c.mesh.dp = m.dp, c.mesh.tp = m.tp, c.mesh.pp = m.pp, c.parallel.zero = m.zero;
      c.parallel.sequence_parallel = m.tp > 1;
    };
    set(a);
    const std::vector<double> whole = TrainSteps(c, 4, "", "");
    const std::string ckpt = root + std::to_string(k++) + (a.zero == 3 ? "" : ".ckpt");
    TrainSteps(c, 2, ckpt, "");
    set(b);
    const std::vector<double> rest = TrainSteps(c, 2, "", ckpt);
    ASSERT_EQ(whole.size(), 4u);
    ASSERT_EQ(rest.size(), 2u);
    for (int s = 0; s < 2; s++)
      EXPECT_NEAR(rest[s], whole[2 + s], 1e-5 * whole[2 + s])
          << "step " << s + 3 << " on dp " << b.dp << " tp " << b.tp << " pp " << b.pp << " zero "
          << b.zero << " from " << ckpt;
    if (WorldRank() == 0)
      printf(
          "llama dp=%d tp=%d pp=%d zero=%d -> dp=%d tp=%d pp=%d zero=%d (%s): steps 3-4 %.7f "
          "%.7f, uninterrupted %.7f %.7f\n",
          a.dp, a.tp, a.pp, a.zero, b.dp, b.tp, b.pp, b.zero, a.zero == 3 ? "sharded" : "one file",
          rest[0], rest[1], whole[2], whole[3]);
  }
}

// A Hugging Face export is written by every rank, each its own slices (GPT
// weights transposed on the way): on every mesh of this job, tensor
// parallelism (with sequence parallelism), pipelines and ZeRO-3 on 8
// ranks, the directory's files are the single device's byte for byte —
// at the starting weights, which every mesh draws alike — in one file and
// cut into several (a limit of 50 kB).
TEST(Equality, HuggingFaceExportOfEveryMeshIsTheSingleDevicesByteForByte) {
  const int n = WorldSize();
  const char* tmp = getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp ? tmp : "/tmp") + "/hf_export";
  for (tl_model_kind kind : {TL_MODEL_GPT, TL_MODEL_LLAMA})
    for (int64_t limit : {(int64_t)1 << 40, (int64_t)50000}) {
      tl_config c = Base(kind);
      c.train.steps = 0;
      c.mesh.tp = 2, c.mesh.pp = n >= 4 ? 2 : 1, c.mesh.dp = n / c.mesh.tp / c.mesh.pp;
      c.parallel.sequence_parallel = true;
      c.parallel.zero = c.mesh.dp > 1 ? 3 : 0;
      const std::string what = std::string(KindName(kind)) + (limit < 1000000 ? " cut" : "");
      const std::string mesh_dir = root + "_mesh_" + what, one_dir = root + "_one_" + what;
      tl_worker w;
      ASSERT_EQ(tl_worker_init(&c, &w), TL_OK) << tl_last_error();
      tl_trainer_comm comm = tl_trainer_comm_of(w.world, w.groups, w.host_groups);
      tl_trainer* t = nullptr;
      ASSERT_EQ(tl_trainer_create(&c, &comm, &t), TL_OK) << tl_last_error();
      EXPECT_EQ(tl_trainer_export_hf(t, mesh_dir.c_str(), limit), TL_OK) << tl_last_error();
      tl_trainer_destroy(t);
      tl_worker_finalize(&w);
      if (WorldRank() != 0) continue;
      tl_config one = c;
      one.mesh.dp = one.mesh.tp = one.mesh.pp = 1;
      one.parallel.zero = 0, one.parallel.sequence_parallel = false;
      ASSERT_EQ(tl_trainer_create(&one, nullptr, &t), TL_OK) << tl_last_error();
      EXPECT_EQ(tl_trainer_export_hf(t, one_dir.c_str(), limit), TL_OK) << tl_last_error();
      tl_trainer_destroy(t);
      int files = 0;
      for (int k = 1; k <= 99; k++) {
        char name[64];
        snprintf(name, sizeof name, "/model-%05d-of-", k);
        std::string a, b;
        for (int of = 1; of <= 99 && a.empty(); of++) {
          char full[96];
          snprintf(full, sizeof full, "%s%05d.safetensors", name, of);
          a = ReadAll(mesh_dir + full), b = ReadAll(one_dir + full);
        }
        if (a.empty()) break;
        EXPECT_TRUE(a == b) << what << ": file " << k << " differs";
        files++;
      }
      if (files == 0) {
        std::string a = ReadAll(mesh_dir + "/model.safetensors");
        EXPECT_FALSE(a.empty()) << what;
        EXPECT_TRUE(a == ReadAll(one_dir + "/model.safetensors")) << what;
        files = 1;
      } else {
        EXPECT_TRUE(ReadAll(mesh_dir + "/model.safetensors.index.json") ==
                    ReadAll(one_dir + "/model.safetensors.index.json"))
            << what;
      }
      EXPECT_TRUE(ReadAll(mesh_dir + "/config.json") == ReadAll(one_dir + "/config.json")) << what;
      EXPECT_EQ(files > 1, limit < 1000000) << what << ": " << files << " files";
      printf("%-12s dp=%d tp=%d pp=%d zero=%d: %d file%s, the single device's bytes\n",
             what.c_str(), c.mesh.dp, c.mesh.tp, c.mesh.pp, c.parallel.zero, files,
             files == 1 ? "" : "s");
    }
}

}  // namespace
