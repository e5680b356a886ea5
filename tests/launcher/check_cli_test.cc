// `trellis check`: every broken config of the table exits 1 with its
// message; the four-device example prints the design's mapping; with no
// config it still runs the kernel self-check. `trellis train`: a failure on
// rank 0 alone ends the whole job.
#include <gtest/gtest.h>
#include <jansson.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/core/bad_configs.h"
#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A byte-level token file of `bytes` tokens, made by `trellis data`.
std::string Tokens(size_t bytes) {
  std::string text = WriteTempFile(std::string(bytes, 'a') + "bcd efg\n", ".txt");
  std::string tokens = text + ".bin";
  EXPECT_EQ(RunProcess({kTrellis, "data", text, tokens}).status, 0);
  return tokens;
}

// An example config with its default-corpus paths pointed at a token file
// of this test (`trellis check` opens the files a config names).
std::string ExampleWithData(const std::string& example) {
  std::string tokens = Tokens(4000);
  std::string json = ReadFile(example);
  json = Replace(json, "data/fortunes_train.bin", tokens);
  json = Replace(json, "data/fortunes_val.bin", tokens);
  return WriteTempFile(json);
}

}  // namespace

class CheckCli : public testing::TestWithParam<BadConfig> {};

TEST_P(CheckCli, ABadConfigExitsOneWithItsMessage) {
  const BadConfig& b = GetParam();
  std::string path = WriteTempFile(b.json);
  RunResult r = RunProcess({kTrellis, "check", path});
  EXPECT_EQ(r.status, 1) << r.output;
  std::string want = Replace(b.expect, "{file}", path);
  EXPECT_NE(r.output.find(want), std::string::npos) << "wanted: " << want << "\ngot: " << r.output;
  EXPECT_EQ(r.output.find("rank map"), std::string::npos) << "no map for a bad config";
}

INSTANTIATE_TEST_SUITE_P(Table, CheckCli, testing::ValuesIn(BadConfigs()),
                         [](const testing::TestParamInfo<BadConfig>& i) { return i.param.name; });

TEST(CheckCliMap, TheFourDeviceExampleShowsTheDesignsMapping) {
  std::string cfg = ExampleWithData("examples/four_device.json");
  RunResult r = RunProcess({kTrellis, "check", cfg});
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string& o = r.output;
  EXPECT_NE(o.find(cfg + ": valid"), std::string::npos) << o;
  EXPECT_NE(o.find("ranks count from 0 (as MPI numbers them), devices from 1"), std::string::npos);
  // rank, device, dp, tp, pp, then the groups' ranks
  for (const char* row :
       {"    0       1    0    0    0  node 0 cpu        {0,2}          {0}            {0,1}",
        "    1       2    0    0    1  node 0 cpu        {1,3}          {1}            {0,1}",
        "    2       3    1    0    0  node 0 cpu        {0,2}          {2}            {2,3}",
        "    3       4    1    0    1  node 0 cpu        {1,3}          {3}            {2,3}"})
    EXPECT_NE(o.find(row), std::string::npos) << "missing row:\n" << row << "\nin:\n" << o;
  EXPECT_NE(o.find("stage 0 (operator 1): layer 1        12% of FLOPs on devices 1, 3"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("stage 1 (operator 2): layer 2        88% of FLOPs on devices 2, 4"),
            std::string::npos)
      << o;
  EXPECT_NE(o.find("data-parallel groups (gradient all-reduce):\n"
                   "  devices {1,3}  (ranks {0,2})\n"
                   "  devices {2,4}  (ranks {1,3})\n"),
            std::string::npos)
      << o;
}

TEST(CheckCliMap, TheThreeAxisExampleShowsEachTensorParallelRanksShard) {
  RunResult r = RunProcess({kTrellis, "check", ExampleWithData("examples/gpt_dp2_tp2_pp2.json")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tp rank 0: heads 1-2 of 4, vocabulary rows 0-127 of 256"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("tp rank 1: heads 3-4 of 4, vocabulary rows 128-255 of 256"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("parameters, on devices 2, 4, 6, 8"), std::string::npos) << r.output;
}

// The summary says in which precision the run trains and reduces.
TEST(CheckCliMap, ThePrecisionsAreSaid) {
  RunResult r = RunProcess({kTrellis, "check", ExampleWithData("examples/gpt_dp2_tp2_pp2.json")});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("precision fp32\nreduce    gradients over dp in fp32\n"),
            std::string::npos)
      << r.output;
  std::string cfg = WriteTempFile(R"({"mesh": {"dp": 2}, "train": {"precision": "bf16"},
                                      "parallel": {"grad_reduce": "bf16"},
                                      "data": {"train": ")" +
                                  Tokens(2000) + "\"}}");
  r = RunProcess({kTrellis, "check", cfg});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("precision bf16: activations and their gradients stored in bf16"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("reduce    gradients over dp in bf16 (half the bytes)"),
            std::string::npos)
      << r.output;
}

TEST(CheckCliMap, RanksPerNodePlacesGpusByLocalRank) {
  std::string cfg = WriteTempFile(R"({"mesh": {"dp": 2, "tp": 2}, "device": {"type": "cuda"},
                                      "data": {"train": ")" +
                                  Tokens(2000) + "\"}}");
  RunResult r = RunProcess({kTrellis, "check", cfg, "--ranks-per-node", "2"});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("    3       4    1    1    0  node 1 cuda:1"), std::string::npos)
      << r.output;
}

TEST(CheckCliMap, UsageErrorsExitTwo) {
  EXPECT_EQ(RunProcess({kTrellis, "check", "a.json", "b.json"}).status, 2);
  EXPECT_EQ(
      RunProcess({kTrellis, "check", "examples/four_device.json", "--ranks-per-node", "0"}).status,
      2);
  RunResult missing = RunProcess({kTrellis, "check", "/nonexistent/x.json"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("cannot open config '/nonexistent/x.json'"), std::string::npos);
}

// The files a config names are opened as training will read them: each
// missing or malformed one is refused by name, all at once, with exit 1 —
// by `trellis check` and by `trellis train` before any rank starts.
TEST(CheckCliFiles, MissingOrMalformedInputFilesAreRefusedByName) {
  std::string good = Tokens(2000);
  std::string garbage = WriteTempFile(std::string(2048, 'x'), ".bin");
  std::string few = Tokens(10);  // fewer tokens than one batch of 4 x 64
  std::string model = WriteTempFile(std::string(1024, '\0'), ".bin");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  struct Case {
    std::string fields, want;
  } cases[] = {
      {R"("data": {"train": "/nonexistent/train.bin"})",
       "data.train: cannot open token file '/nonexistent/train.bin'"},
      {R"("data": {"train": ")" + garbage + "\"}",
       "data.train: '" + garbage + "' is not a token file"},
      {R"("data": {"train": ")" + few + "\"}", "needs at least 257"},
      {R"("data": {"train": ")" + good + R"(", "val": "/nonexistent/val.bin"})",
       "data.val: cannot open token file '/nonexistent/val.bin'"},
      {R"("data": {"train": ")" + good + R"("}, "model": {"vocab_size": 90})",
       "data.train: '" + good + "': token 97 at position 0 is outside the model's vocabulary"},
      {R"("data": {"train": ")" + good + R"("}, "model": {"init_from": ")" + model + "\"}",
       "model.init_from: '" + model + "' is not an llm.c model file"},
      {R"("data": {"train": ")" + good + R"("}, "checkpoint": {"resume": "/nonexistent/c.ckpt"})",
       "checkpoint.resume: cannot open checkpoint '/nonexistent/c.ckpt'"},
      {R"("train": {"sample_tokens": 0})", "data.train: not set"},
      // a directory where a file belongs: said so, not as a short or bad file
      {R"("data": {"train": ")" + dir + "\"}", "data.train: '" + dir + "' is a directory"},
      {R"("data": {"train": ")" + good + R"(", "tokenizer": ")" + dir + "\"}",
       "data.tokenizer: cannot read tokenizer '" + dir + "': Is a directory"},
      {R"("data": {"train": ")" + good + R"("}, "model": {"init_from": ")" + dir + "\"}",
       "model.init_from: '" + dir + "' is a directory without config.json"},
  };
  for (const Case& c : cases) {
    std::string cfg = WriteTempFile("{" + c.fields + "}");
    for (const char* cmd : {"check", "train"}) {
      RunResult r = RunProcess({kTrellis, cmd, cfg}, {}, 30);
      EXPECT_EQ(r.status, 1) << cmd << " " << c.fields << "\n" << r.output;
      EXPECT_NE(r.output.find(c.want), std::string::npos)
          << cmd << ": wanted: " << c.want << "\ngot: " << r.output;
      EXPECT_EQ(r.output.find("rank map"), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("step "), std::string::npos) << "no step may run:\n" << r.output;
      // said for a person: not where in trellis's sources it was found
      EXPECT_EQ(r.output.find(".c:"), std::string::npos) << r.output;
    }
  }
  // ... which TRELLIS_LOG_LEVEL=debug adds
  std::string cfg = WriteTempFile(R"({"data": {"train": "/nonexistent/train.bin"}})");
  RunResult d = RunProcess({kTrellis, "train", cfg}, {{"TRELLIS_LOG_LEVEL", "debug"}}, 30);
  EXPECT_EQ(d.status, 1) << d.output;
  EXPECT_NE(d.output.find(".c:"), std::string::npos) << d.output;
  // every problem at once
  std::string both =
      WriteTempFile(R"({"data": {"train": "/nonexistent/a.bin", "val": "/nonexistent/b.bin"}})");
  RunResult r = RunProcess({kTrellis, "check", both});
  EXPECT_NE(r.output.find("2 input file problems"), std::string::npos) << r.output;
}

TEST(CheckCliMap, WithoutAConfigCheckStillRunsTheKernelSelfCheck) {
  RunResult r = RunProcess({kTrellis, "check", "--device", "cpu"}, {}, 50);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("trellis op self-check"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("checks, 0 failed"), std::string::npos) << r.output;
}

// A failure on rank 0 alone after the job has started (its --metrics file
// cannot be written) ends every rank with the message, instead of leaving
// the others waiting in their first collective.
TEST(TrainCli, AnUnwritableMetricsFileOnRankZeroEndsTheWholeJob) {
  std::string text = WriteTempFile(std::string(2000, 'a') + "bcd\n");
  std::string tokens = text + ".bin";
  ASSERT_EQ(RunProcess({kTrellis, "data", text, tokens}).status, 0);
  std::string cfg = WriteTempFile(
      R"({"model": {"kind": "mlp", "vocab_size": 256, "mlp_sizes": [8, 256]},
          "mesh": {"dp": 2}, "train": {"steps": 2, "batch_size": 2, "seq_len": 8,
          "sample_tokens": 0}, "device": {"threads": 1}, "data": {"train": ")" +
      tokens + "\"}}");
  RunResult r =
      RunProcess({kTrellis, "train", cfg, "--metrics", "/nonexistent/dir/m.jsonl"}, {}, 45, true);
  EXPECT_FALSE(r.timed_out) << r.output;
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("cannot write '/nonexistent/dir/m.jsonl.partial'"), std::string::npos)
      << r.output;
}

// `trellis train --trace` of a 2-layer GPT on 2 ranks of mesh axis `axis`
// (2 micro-batches, 2 steps): the trace's document into *root (the caller
// json_decrefs it).
void TraceOfTwoRanks(const std::string& axis, json_t** root) {
  std::string text = WriteTempFile(std::string(3000, 'a') + "bcd efg\n");
  std::string tokens = text + ".bin";
  ASSERT_EQ(RunProcess({kTrellis, "data", text, tokens}).status, 0);
  std::string cfg = WriteTempFile(
      R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": 16, "max_seq_len": 8},
          "mesh": {")" +
      axis + R"(": 2}, "schedule": {"micro_batches": 2},
          "train": {"steps": 2, "batch_size": 4, "seq_len": 8, "sample_tokens": 0},
          "device": {"threads": 1}, "checkpoint": {"every": 0},
          "data": {"train": ")" +
      tokens + "\"}}");
  std::string trace = cfg + ".trace.json";
  RunResult r = RunProcess({kTrellis, "train", cfg, "--trace", trace}, {}, 45, true);
  ASSERT_EQ(r.status, 0) << r.output;
  json_error_t err;
  *root = json_load_file(trace.c_str(), 0, &err);
  ASSERT_NE(*root, nullptr) << err.text;
}

// --trace on a tensor-parallel job: one Chrome trace holding both ranks'
// forward and backward spans per micro-batch and, inside them, a span per
// tensor-parallel collective of the pass (graph nodes of collective ops:
// the tp_comm pairs and the vocabulary-parallel loss), forward and backward.
TEST(TrainCli, TraceShowsEachTensorParallelCollective) {
  json_t* root = nullptr;
  ASSERT_NO_FATAL_FAILURE(TraceOfTwoRanks("tp", &root));
  json_t* events = json_object_get(root, "traceEvents");
  ASSERT_TRUE(json_is_array(events));
  // (rank, step, micro) -> spans of each kind
  std::map<std::tuple<int, int, int>, std::map<std::string, int>> seen;
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t* e = json_array_get(events, i);
    json_t* args = json_object_get(e, "args");
    const char* c = json_string_value(json_object_get(e, "cat"));
    const char* n = json_string_value(json_object_get(e, "name"));
    if (!c || !n) continue;  // metadata (process names)
    std::string cat = c, name = n;
    bool grad = name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
    if (cat == "tp") cat += grad ? " bwd" : " fwd";  // backward nodes are named "<node>.grad"
    auto key = std::make_tuple((int)json_integer_value(json_object_get(e, "pid")),
                               (int)json_integer_value(json_object_get(args, "step")),
                               (int)json_integer_value(json_object_get(args, "micro")));
    seen[key][cat]++;
    EXPECT_GE(json_number_value(json_object_get(e, "dur")), 0) << name;
  }
  json_decref(root);
  for (int rank = 0; rank < 2; rank++)
    for (int step = 1; step <= 2; step++)
      for (int micro = 0; micro < 2; micro++) {
        auto& k = seen[std::make_tuple(rank, step, micro)];
        EXPECT_EQ(k["forward"], 1) << rank << " " << step << " " << micro;
        EXPECT_EQ(k["backward"], 1);
        // encoder.sum, 4 per layer (ln1, attproj, ln2, fcproj), lnf, and the
        // loss forward (its backward communicates nothing)
        EXPECT_EQ(k["tp fwd"], 1 + 4 * 2 + 1 + 1);
        EXPECT_EQ(k["tp bwd"], 1 + 4 * 2 + 1);
      }
}

// --trace on a context-parallel job (cp 2): the ring attention's nodes are
// spans of category "cp", forward and backward, and inside each the ring's
// transfers: "ring kv" while a key/value block travels beside the
// attention (one hop a layer forward, one backward), "ring wait" what of it
// the attention left to wait for, "ring dkv" the gradients' hops after each
// block's backward (two a layer) — every one inside its node's span.
TEST(TrainCli, TraceShowsTheRingsTransfersBesideTheAttention) {
  json_t* root = nullptr;
  ASSERT_NO_FATAL_FAILURE(TraceOfTwoRanks("cp", &root));
  json_t* events = json_object_get(root, "traceEvents");
  ASSERT_TRUE(json_is_array(events));
  // (rank, step, micro) -> spans of each kind; and the nodes' intervals
  std::map<std::tuple<int, int, int>, std::map<std::string, int>> seen;
  std::map<std::pair<int, std::string>, std::vector<std::pair<double, double>>> nodes;
  std::vector<std::tuple<int, std::string, double, double>> rings;
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t* e = json_array_get(events, i);
    json_t* args = json_object_get(e, "args");
    const char* c = json_string_value(json_object_get(e, "cat"));
    const char* n = json_string_value(json_object_get(e, "name"));
    if (!c || std::string(c) != "cp") continue;
    std::string name = n;
    const int pid = (int)json_integer_value(json_object_get(e, "pid"));
    const double ts = json_number_value(json_object_get(e, "ts"));
    const double end = ts + json_number_value(json_object_get(e, "dur"));
    std::string kind = name.rfind("ring ", 0) == 0 ? name.substr(0, name.find(' ', 5)) : "node";
    if (kind == "node") {
      bool grad = name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
      kind = grad ? "node bwd" : "node fwd";
      nodes[{pid, grad ? name.substr(0, name.size() - 5) : name}].push_back({ts, end});
    } else {
      std::string node = name.substr(name.find(' ', 5) + 1);
      if (node.size() > 5 && node.compare(node.size() - 5, 5, ".grad") == 0)
        node = node.substr(0, node.size() - 5);
      rings.emplace_back(pid, node, ts, end);
    }
    auto key = std::make_tuple(pid, (int)json_integer_value(json_object_get(args, "step")),
                               (int)json_integer_value(json_object_get(args, "micro")));
    seen[key][kind]++;
  }
  json_decref(root);
  for (int rank = 0; rank < 2; rank++)
    for (int step = 1; step <= 2; step++)
      for (int micro = 0; micro < 2; micro++) {
        auto& k = seen[std::make_tuple(rank, step, micro)];
        EXPECT_EQ(k["node fwd"], 2) << rank << " " << step << " " << micro;
        EXPECT_EQ(k["node bwd"], 2);
        EXPECT_EQ(k["ring kv"], 2 + 2);
        EXPECT_EQ(k["ring wait"], 2 + 2);
        EXPECT_EQ(k["ring dkv"], 2 * 2);
      }
  ASSERT_FALSE(rings.empty());
  for (const auto& [pid, node, ts, end] : rings) {
    bool inside = false;
    for (const auto& [a, b] : nodes[{pid, node}]) inside = inside || (ts >= a && end <= b + 0.2);
    EXPECT_TRUE(inside) << "a ring span of " << node << " on rank " << pid
                        << " outside every span of its node";
  }
}

// --trace of an interleaved pipeline: every span names its chunk, and each
// rank's exchanges are those its chunks make — the model's first chunk
// (rank 0's chunk 0) receives nothing, the last (rank 1's chunk 1) sends
// nothing on, and rank 1's chunk 0 hands activations round to rank 0's
// chunk 1.
TEST(TrainCli, TraceOfAnInterleavedPipelineNamesEachSpansChunk) {
  std::string text = WriteTempFile(std::string(3000, 'a') + "bcd efg\n");
  std::string tokens = text + ".bin";
  ASSERT_EQ(RunProcess({kTrellis, "data", text, tokens}).status, 0);
  std::string cfg = WriteTempFile(
      R"({"model": {"n_layers": 4, "n_heads": 2, "n_embd": 16, "max_seq_len": 8},
          "mesh": {"pp": 2}, "schedule": {"kind": "interleaved", "virtual_stages": 2,
          "micro_batches": 2},
          "train": {"steps": 1, "batch_size": 4, "seq_len": 8, "sample_tokens": 0},
          "device": {"threads": 1}, "checkpoint": {"every": 0},
          "data": {"train": ")" +
      tokens + "\"}}");
  std::string trace = cfg + ".trace.json";
  RunResult r = RunProcess({kTrellis, "train", cfg, "--trace", trace}, {}, 45, true);
  ASSERT_EQ(r.status, 0) << r.output;
  json_error_t err;
  json_t* root = json_load_file(trace.c_str(), 0, &err);
  ASSERT_NE(root, nullptr) << err.text;
  json_t* events = json_object_get(root, "traceEvents");
  // (rank, chunk) -> spans of each kind
  std::map<std::pair<int, int>, std::map<std::string, int>> seen;
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t* e = json_array_get(events, i);
    json_t* args = json_object_get(e, "args");
    const char* c = json_string_value(json_object_get(e, "cat"));
    if (!c || !json_object_get(args, "chunk")) continue;
    seen[{(int)json_integer_value(json_object_get(e, "pid")),
          (int)json_integer_value(json_object_get(args, "chunk"))}][c]++;
  }
  json_decref(root);
  for (int rank = 0; rank < 2; rank++)
    for (int chunk = 0; chunk < 2; chunk++) {
      auto& k = seen[{rank, chunk}];
      const bool first = rank == 0 && chunk == 0, last = rank == 1 && chunk == 1;
      EXPECT_EQ(k["forward"], 2) << rank << " " << chunk;  // one per micro-batch
      EXPECT_EQ(k["backward"], 2) << rank << " " << chunk;
      EXPECT_EQ(k["recv_act"], first ? 0 : 2) << rank << " " << chunk;
      EXPECT_EQ(k["send_grad"], first ? 0 : 2) << rank << " " << chunk;
      EXPECT_EQ(k["send_act"], last ? 0 : 2) << rank << " " << chunk;
      EXPECT_EQ(k["recv_grad"], last ? 0 : 2) << rank << " " << chunk;
    }
}

// No CUDA library is needed to start: the runtime is linked statically,
// cuBLAS and NCCL are loaded where a GPU is first used. `trellis plan`,
// `check`, `data` and CPU runs start on a machine without them (mapping
// cuBLAS alone costs a process about 0.1 s and 210 MB before main()).
TEST(CheckCliMap, TrellisNeedsNoCudaLibraryToStart) {
  RunResult r = RunProcess({"ldd", kTrellis});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("libc.so"), std::string::npos) << r.output;
  for (const char* lib : {"libcublas", "libcudart", "libnccl", "libcudnn", "libcuda."})
    EXPECT_EQ(r.output.find(lib), std::string::npos) << lib << "\n" << r.output;
}
