// The equality oracle catches real bugs: `trellis train --verify` on small
// GPTs says EQUAL for the correct runs of a 4-rank dp 2 x pp 2 mesh (tied
// embedding split over the stages, 2 micro-batches, 1F1B) and of a tp 2
// sequence-parallel mesh, with AdamW's eps at 1e-8, and DIFFERENT — exit 1,
// naming what it caught — for each deliberate bug TRELLIS_FAULT injects:
// one micro-batch's gradient dropped, the data-parallel sum divided by dp
// again, the tied embedding's sync skipped, pipeline gradients delivered to
// the wrong micro-batch, an optimizer step repeated on one stage, a
// tensor-parallel reduction skipped, sequence parallelism's LayerNorm sync
// skipped; the pipeline faults again on interleaved and zero-bubble
// schedules, and on dp 2 with ZeRO-2 and ZeRO-3 a shard read one element on
// and (ZeRO-3) a parameter gather skipped. With parallel.deterministic the
// correct run must also be equal
// bit for bit at every step. The same faults on the same meshes in bf16
// mixed precision (train.precision "bf16"), whose looser tolerances
// (verify.h) must still catch each; and bf16 with parallel.deterministic
// bit for bit. (dp_scaled_twice is caught by the gradients, half the
// reference's: verify compares them unclipped, as the optimizer leaves them.)
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";

std::string Tokens() {
  static std::string tokens;
  if (tokens.empty()) {
    std::string text;
    for (int i = 0; i < 400; i++)
      text += "the quick brown fox " + std::to_string(i * 7 % 13) + "\n";
    std::string path = WriteTempFile(text, ".txt");
    tokens = path + ".bin";
    EXPECT_EQ(RunProcess({kTrellis, "data", path, tokens}).status, 0);
  }
  return tokens;
}

// A 4-layer GPT on the mesh, 3 steps, eps 1e-8.
std::string Config(const std::string& mesh, bool sp, bool det = false, bool bf16 = false,
                   const std::string& schedule = "{\"kind\": \"1f1b\", \"micro_batches\": 2}",
                   int zero = 0) {
  std::string t = Tokens();
  return WriteTempFile(
      "{\"model\": {\"kind\": \"gpt\", \"n_layers\": 4, \"n_heads\": 4, \"n_embd\": 32, "
      "\"vocab_size\": 256, \"max_seq_len\": 16},\n"
      " \"mesh\": " +
      mesh +
      ",\n"
      " \"schedule\": " +
      schedule +
      ",\n"
      " \"parallel\": {\"sequence_parallel\": " +
      (sp ? "true" : "false") + ", \"deterministic\": " + (det ? "true" : "false") +
      ", \"zero\": " + std::to_string(zero) +
      "},\n"
      " \"train\": {\"steps\": 3, \"batch_size\": 8, \"seq_len\": 16, \"lr\": 0.001, "
      "\"eps\": 1e-8, \"warmup_steps\": 0, \"grad_clip\": 1.0, \"sample_tokens\": 0, "
      "\"precision\": \"" +
      (bf16 ? "bf16" : "fp32") +
      "\"},\n"
      " \"data\": {\"train\": \"" +
      t +
      "\"},\n"
      " \"device\": {\"type\": \"cpu\", \"threads\": 1}}\n");
}

struct Case {
  const char* fault;
  // "dp2pp2", "tp2sp", "dp2pp2det" (parallel.deterministic), or any of
  // them with "bf16" after it (train.precision); "dp2pp2il" (interleaved,
  // two chunks a stage), "dp2pp2zb" (zero bubble), "dp2z2" and "dp2z3"
  // (dp 2 alone, ZeRO-2 and ZeRO-3)
  const char* mesh;
  const char* says;  // in the DIFFERENT line
};

RunResult Verify(const Case& c) {
  static std::string dp_pp = Config("{\"dp\": 2, \"tp\": 1, \"pp\": 2}", false);
  static std::string tp_sp = Config("{\"dp\": 1, \"tp\": 2, \"pp\": 1}", true);
  static std::string dp_pp_det = Config("{\"dp\": 2, \"tp\": 1, \"pp\": 2}", false, true);
  static std::string dp_pp_bf16 = Config("{\"dp\": 2, \"tp\": 1, \"pp\": 2}", false, false, true);
  static std::string tp_sp_bf16 = Config("{\"dp\": 1, \"tp\": 2, \"pp\": 1}", true, false, true);
  static std::string det_bf16 = Config("{\"dp\": 2, \"tp\": 1, \"pp\": 2}", false, true, true);
  static std::string il =
      Config("{\"dp\": 2, \"tp\": 1, \"pp\": 2}", false, false, false,
             "{\"kind\": \"interleaved\", \"micro_batches\": 2, \"virtual_stages\": 2}");
  static std::string zb = Config("{\"dp\": 2, \"tp\": 1, \"pp\": 2}", false, false, false,
                                 "{\"kind\": \"zero_bubble\", \"micro_batches\": 2}");
  static std::string z2 =
      Config("{\"dp\": 2}", false, false, false, "{\"kind\": \"1f1b\", \"micro_batches\": 2}", 2);
  static std::string z3 =
      Config("{\"dp\": 2}", false, false, false, "{\"kind\": \"1f1b\", \"micro_batches\": 2}", 3);
  const std::map<std::string, const std::string*> meshes = {{"dp2pp2", &dp_pp},
                                                            {"tp2sp", &tp_sp},
                                                            {"dp2pp2det", &dp_pp_det},
                                                            {"dp2pp2bf16", &dp_pp_bf16},
                                                            {"tp2spbf16", &tp_sp_bf16},
                                                            {"dp2pp2detbf16", &det_bf16},
                                                            {"dp2pp2il", &il},
                                                            {"dp2pp2zb", &zb},
                                                            {"dp2z2", &z2},
                                                            {"dp2z3", &z3}};
  EXPECT_EQ(meshes.count(c.mesh), 1u) << c.mesh;
  const std::string& cfg = *meshes.at(c.mesh);
  return RunProcess({kTrellis, "train", cfg, "--verify"}, {{"TRELLIS_FAULT", c.fault}}, 120, true);
}

std::string VerdictOf(const std::string& out) {
  size_t at = out.find("verify: EQUAL");
  if (at == std::string::npos) at = out.find("verify: DIFFERENT");
  if (at == std::string::npos) return "(no verdict)";
  return out.substr(at, out.find('\n', at) - at);
}

class Faults : public testing::TestWithParam<Case> {};

TEST_P(Faults, VerifyCatchesIt) {
  const Case& c = GetParam();
  RunResult r = Verify(c);
  std::string verdict = VerdictOf(r.output);
  printf("%-22s %-7s %s\n", c.fault, c.mesh, verdict.c_str());
  if (std::string(c.fault) == "none") {
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(verdict.find("verify: EQUAL to the single-device run"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("verify:   start       parameters equal bit for bit"),
              std::string::npos)
        << r.output;
    if (std::string(c.mesh).rfind("dp2pp2det", 0) == 0) {  // every step's state, bit for bit
      EXPECT_NE(r.output.find("verify:   bits        parallel.deterministic: every parameter, "
                              "moment and gradient equal to the single-device run's"),
                std::string::npos)
          << r.output;
      EXPECT_NE(r.output.find("verify:   gradients   0 of the tensor's largest"), std::string::npos)
          << r.output;
    }
    return;
  }
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(verdict.find("verify: DIFFERENT from the single-device run: step 1: "),
            std::string::npos)
      << r.output;
  EXPECT_NE(verdict.find(c.says), std::string::npos) << "wanted: " << c.says << "\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Table, Faults,
    testing::Values(Case{"none", "dp2pp2", ""}, Case{"none", "tp2sp", ""},
                    Case{"none", "dp2pp2det", ""},
                    Case{"update_repeated", "dp2pp2det", "the optimizer's update"},
                    Case{"micro_batch_dropped", "dp2pp2", "gradient of"},
                    Case{"dp_scaled_twice", "dp2pp2", "gradient of"},
                    Case{"tied_sync_skipped", "dp2pp2", "gradient of wte"},
                    Case{"pp_grad_misrouted", "dp2pp2", "gradient of"},
                    Case{"update_repeated", "dp2pp2", "the optimizer's update"},
                    Case{"micro_batch_dropped", "tp2sp", "gradient of"},
                    Case{"tp_allreduce_skipped", "tp2sp", "loss"},
                    Case{"sp_sync_skipped", "tp2sp", "gradient of ln"},
                    Case{"update_repeated", "tp2sp", "the optimizer's update"},
                    Case{"none", "dp2pp2bf16", ""}, Case{"none", "tp2spbf16", ""},
                    Case{"none", "dp2pp2detbf16", ""},
                    Case{"micro_batch_dropped", "dp2pp2bf16", "gradient of"},
                    Case{"dp_scaled_twice", "dp2pp2bf16", "gradient of"},
                    Case{"tied_sync_skipped", "dp2pp2bf16", "gradient of wte"},
                    Case{"pp_grad_misrouted", "dp2pp2bf16", "gradient of"},
                    Case{"micro_batch_dropped", "tp2spbf16", "gradient of"},
                    Case{"tp_allreduce_skipped", "tp2spbf16", "gradient of"},
                    Case{"sp_sync_skipped", "tp2spbf16", "gradient of ln"},
                    // the interleaved and zero-bubble schedules' own paths
                    Case{"none", "dp2pp2il", ""}, Case{"none", "dp2pp2zb", ""},
                    Case{"micro_batch_dropped", "dp2pp2il", "gradient of"},
                    Case{"tied_sync_skipped", "dp2pp2il", "gradient of wte"},
                    Case{"pp_grad_misrouted", "dp2pp2il", "gradient of"},
                    Case{"update_repeated", "dp2pp2il", "the optimizer's update"},
                    Case{"micro_batch_dropped", "dp2pp2zb", "gradient of"},
                    Case{"tied_sync_skipped", "dp2pp2zb", "gradient of wte"},
                    Case{"pp_grad_misrouted", "dp2pp2zb", "gradient of"},
                    Case{"update_repeated", "dp2pp2zb", "the optimizer's update"},
                    // ZeRO's shards and gathers
                    Case{"none", "dp2z2", ""}, Case{"none", "dp2z3", ""},
                    Case{"zero_shard_offset", "dp2z2", "the optimizer's update"},
                    Case{"zero_shard_offset", "dp2z3", "the optimizer's update"},
                    Case{"zero_gather_skipped", "dp2z3", "loss"}),
    [](const testing::TestParamInfo<Case>& i) {
      return std::string(i.param.fault) + "_" + i.param.mesh;
    });

}  // namespace
