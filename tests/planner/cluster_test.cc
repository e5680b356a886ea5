// Cluster specs: the shipped examples load with the figures they document;
// bad specs fail naming the JSON path, the value and what was expected.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "planner/cluster.h"
}

TEST(Cluster, ShippedExamplesLoad) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_a100.json", &c), TL_OK) << tl_last_error();
  EXPECT_STREQ(c.name, "dgx_a100");
  EXPECT_EQ(c.devices_per_node, 8);
  EXPECT_EQ(tl_cluster_devices(&c), 3072);
  EXPECT_DOUBLE_EQ(tl_cluster_peak(&c, TL_BF16), 312e12);
  EXPECT_DOUBLE_EQ(tl_cluster_peak(&c, TL_F32), 19.5e12);
  EXPECT_DOUBLE_EQ(c.intra.bandwidth, 300e9);
  EXPECT_DOUBLE_EQ(c.inter.bandwidth, 25e9);
  EXPECT_EQ(c.device, TL_DEVICE_CUDA);
  ASSERT_EQ(tl_cluster_load("examples/clusters/dgx_h100.json", &c), TL_OK) << tl_last_error();
  EXPECT_DOUBLE_EQ(c.peak_bf16, 989e12);
  ASSERT_EQ(tl_cluster_load("examples/clusters/h200.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_cluster_devices(&c), 1);
  ASSERT_EQ(tl_cluster_load("examples/clusters/this_machine.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.device, TL_DEVICE_CPU);
  EXPECT_EQ(tl_cluster_devices(&c), 2);
  EXPECT_DOUBLE_EQ(tl_cluster_peak(&c, TL_F32), 90e9);
  EXPECT_DOUBLE_EQ(tl_cluster_peak(&c, TL_BF16), 0);
}

namespace {

const char* kGood =
    R"({"nodes": 2, "devices_per_node": 4, "device_memory_bytes": 1e9,
        "peak_flops": {"fp32": 1e12}, "intra_node": {"bandwidth": 1e9, "latency": 0},
        "inter_node": {"bandwidth": 1e8, "latency": 1e-5}})";

std::string Error(const std::string& json) {
  tl_cluster c;
  tl_status st = tl_cluster_parse(json.c_str(), "c.json", &c);
  EXPECT_NE(st, TL_OK) << json;
  EXPECT_EQ(c.nodes, 0) << "nothing half-built";
  return tl_last_error();
}

std::string With(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

std::string With(const std::string& from, const std::string& to) {
  return With(kGood, from, to);
}

}  // namespace

TEST(Cluster, DefaultsForTheOptionalKeys) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_parse(kGood, "c.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(tl_cluster_devices(&c), 8);
  EXPECT_DOUBLE_EQ(c.efficiency, TL_CLUSTER_DEFAULT_EFFICIENCY);
  EXPECT_DOUBLE_EQ(c.attention_efficiency, c.efficiency);
  ASSERT_EQ(
      tl_cluster_parse(With("\"nodes\"", "\"attention_efficiency\": 0.125, \"nodes\"").c_str(),
                       "c.json", &c),
      TL_OK)
      << tl_last_error();
  EXPECT_DOUBLE_EQ(c.attention_efficiency, 0.125);
  EXPECT_DOUBLE_EQ(c.reserve_bytes, TL_CLUSTER_DEFAULT_RESERVE);
  EXPECT_EQ(c.allocator_overhead, 0.0);  // trellis's allocator caches nothing
  EXPECT_EQ(c.device, TL_DEVICE_CUDA);
  ASSERT_EQ(tl_cluster_parse(With("\"nodes\"", "\"allocator_overhead\": 0.15, \"nodes\"").c_str(),
                             "c.json", &c),
            TL_OK)
      << tl_last_error();
  EXPECT_DOUBLE_EQ(c.allocator_overhead, 0.15);
  EXPECT_EQ(c.memory_bandwidth, 0.0);  // unknown: the optimizer priced by its FLOPs
  ASSERT_EQ(tl_cluster_parse(With("\"nodes\"", "\"memory_bandwidth\": 3.35e12, \"nodes\"").c_str(),
                             "c.json", &c),
            TL_OK)
      << tl_last_error();
  EXPECT_DOUBLE_EQ(c.memory_bandwidth, 3.35e12);
}

TEST(Cluster, BadSpecsNameThePathTheValueAndWhatWasExpected) {
  EXPECT_NE(Error(With("\"nodes\": 2", "\"nodes\": 0")).find("nodes = 0: expected an integer 1"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\": 2", "\"nodes\": \"2\"")).find("nodes: expected an integer"),
            std::string::npos);
  EXPECT_NE(Error(With("\"bandwidth\": 1e8", "\"bandwidth\": -1"))
                .find("inter_node.bandwidth = -1: expected a number > 0"),
            std::string::npos);
  EXPECT_NE(Error(With("\"fp32\": 1e12", "\"fp16\": 1e12"))
                .find("peak_flops.fp16: unknown key; expected one of: fp32, bf16"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\": 2,", "")).find("nodes: missing"), std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"node\"")).find("node: unknown key"), std::string::npos);
  EXPECT_NE(Error(With("{\"nodes\"", "{\"device\": \"tpu\", \"nodes\""))
                .find("device: expected \"cpu\" or \"cuda\", got tpu"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"attention_efficiency\": 1.5, \"nodes\""))
                .find("attention_efficiency = 1.5: expected a fraction in (0, 1]"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"allocator_overhead\": 10, \"nodes\""))
                .find("allocator_overhead = 10: expected a fraction of the tensors' bytes in "
                      "[0, 1]"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"allocator_overhead\": -0.1, \"nodes\""))
                .find("allocator_overhead = -0.1: expected a number >= 0"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"memory_bandwidth\": 0, \"nodes\""))
                .find("memory_bandwidth = 0: expected a number > 0"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"memory_bandwidth\": \"fast\", \"nodes\""))
                .find("memory_bandwidth: expected a number > 0, got "),
            std::string::npos);
  EXPECT_NE(Error("{\"nodes\": ").find("c.json:1:"), std::string::npos);
  tl_cluster c;
  EXPECT_EQ(tl_cluster_load("no/such/cluster.json", &c), TL_ERR_IO);
  EXPECT_NE(std::string(tl_last_error()).find("no/such/cluster.json: No such file"),
            std::string::npos)
      << tl_last_error();
  // a directory opens, and then cannot be read: said so, not as bad JSON
  EXPECT_EQ(tl_cluster_load("examples/clusters", &c), TL_ERR_IO);
  EXPECT_NE(std::string(tl_last_error())
                .find("cannot read cluster file examples/clusters: Is a "
                      "directory"),
            std::string::npos)
      << tl_last_error();
}

// cores_per_node: a CPU cluster's shared cores; with it the spec keeps the
// ranks its rates were measured on (devices_per_node as written), which a
// search over part of a node does not change; refused on a GPU cluster,
// whose ranks compute on their devices.
TEST(Cluster, CoresPerNodeIsACpuClustersAndKeepsTheRatedRanks) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_parse(kGood, "c.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.cores_per_node, 0);
  const std::string cpu = With("{\"nodes\"", "{\"device\": \"cpu\", \"nodes\"");
  ASSERT_EQ(tl_cluster_parse(With(cpu, "\"nodes\"", "\"cores_per_node\": 2, \"nodes\"").c_str(),
                             "c.json", &c),
            TL_OK)
      << tl_last_error();
  EXPECT_EQ(c.cores_per_node, 2);
  EXPECT_EQ(c.rated_ranks_per_node, c.devices_per_node);
  EXPECT_NE(Error(With("\"nodes\"", "\"cores_per_node\": 2, \"nodes\""))
                .find("cores_per_node: only a cpu cluster's ranks share the cores they compute "
                      "on (device is \"cuda\")"),
            std::string::npos);
  EXPECT_NE(Error(With(cpu, "\"nodes\"", "\"cores_per_node\": 0, \"nodes\""))
                .find("cores_per_node = 0: expected an integer 1 .. 1000000"),
            std::string::npos);
  EXPECT_NE(Error(With(cpu, "\"nodes\"", "\"cores_per_node\": 1.5, \"nodes\""))
                .find("cores_per_node: expected an integer 1 .. 1000000, got "),
            std::string::npos);
}

// The speed a computing rank gets while only some of the node's ranks
// compute: one figure for each count of computing ranks, on a cpu cluster
// that says its cores.
TEST(Cluster, SharedCoreSpeedIsOneFigureACountOfComputingRanks) {
  tl_cluster c;
  const std::string cpu = With("{\"nodes\"", "{\"device\": \"cpu\", \"nodes\"");
  const std::string cores = With(cpu, "\"nodes\"", "\"cores_per_node\": 2, \"nodes\"");
  ASSERT_EQ(
      tl_cluster_parse(
          With(cores, "\"nodes\"", "\"shared_core_speed\": [1.5, 1.6, 1.2, 1], \"nodes\"").c_str(),
          "c.json", &c),
      TL_OK)
      << tl_last_error();
  ASSERT_EQ(c.n_shared_speed, 4);
  EXPECT_EQ(c.shared_speed[0], 1.5);
  EXPECT_EQ(c.shared_speed[3], 1);
  EXPECT_NE(Error(With(cores, "\"nodes\"", "\"shared_core_speed\": [1.5, 1], \"nodes\""))
                .find("shared_core_speed: expected an array of 4 numbers (one for each count of "
                      "computing ranks, 1 .. devices_per_node = 4), got 2"),
            std::string::npos);
  EXPECT_NE(Error(With(cores, "\"nodes\"", "\"shared_core_speed\": [1.5, 0, 1, 1], \"nodes\""))
                .find("shared_core_speed[1] = 0: expected a number in (0, 1e6)"),
            std::string::npos);
  // the last is all computing: the spec's own rates
  EXPECT_NE(
      Error(With(cores, "\"nodes\"", "\"shared_core_speed\": [1.5, 1.6, 1.2, 1.1], \"nodes\""))
          .find("shared_core_speed[3] = 1.1: expected 1 (all 4 ranks computing"),
      std::string::npos);
  EXPECT_NE(Error(With(cores, "\"nodes\"", "\"shared_core_speed\": [1.5, \"x\", 1, 1], \"nodes\""))
                .find("shared_core_speed[1]: expected a number in (0, 1e6)"),
            std::string::npos);
  // a core each: nothing shares
  EXPECT_NE(Error(With(With(cpu, "\"nodes\"", "\"cores_per_node\": 4, \"nodes\""), "\"nodes\"",
                       "\"shared_core_speed\": [1, 1, 1, 1], \"nodes\""))
                .find("shared_core_speed: the 4 ranks of a node have 4 cores, a core each"),
            std::string::npos);
  EXPECT_NE(Error(With("\"nodes\"", "\"shared_core_speed\": [2, 2, 1.5, 1], \"nodes\""))
                .find("shared_core_speed: it describes ranks sharing a cpu node's cores and needs "
                      "cores_per_node (device \"cuda\")"),
            std::string::npos);
  EXPECT_NE(Error(With(cpu, "\"nodes\"", "\"shared_core_speed\": [1, 1, 1, 1], \"nodes\""))
                .find("shared_core_speed: it describes ranks sharing a cpu node's cores and needs "
                      "cores_per_node (device \"cpu\", no cores_per_node)"),
            std::string::npos);
}

// A GEMM table: exact at its points, log-linear between them along each
// axis, held at its edges; one point per axis is a constant.
TEST(Cluster, GemmTableInterpolatesInLogSize) {
  tl_cluster c;
  std::string table =
      With("{\"nodes\"",
           "{\"gemm_efficiency\": {\"m\": [64, 4096], \"n\": [128], \"k\": [16, 256, 4096],"
           " \"efficiency\": [0.1, 0.2, 0.4, 0.3, 0.6, 0.9]}, \"nodes\"");
  ASSERT_EQ(tl_cluster_parse(table.c_str(), "c.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.gemm.n_m, 2);
  EXPECT_EQ(c.gemm.n_k, 3);
  EXPECT_DOUBLE_EQ(tl_cluster_gemm_efficiency(&c, 64, 128, 16), 0.1);
  EXPECT_DOUBLE_EQ(tl_cluster_gemm_efficiency(&c, 4096, 1, 4096), 0.9);  // n held
  EXPECT_DOUBLE_EQ(tl_cluster_gemm_efficiency(&c, 1e6, 128, 256), 0.6);  // m held
  EXPECT_DOUBLE_EQ(tl_cluster_gemm_efficiency(&c, 64, 128, 64), 0.15);   // k halfway in log
  EXPECT_DOUBLE_EQ(tl_cluster_gemm_efficiency(&c, 512, 128, 16), 0.2);   // m halfway in log
  EXPECT_NEAR(tl_cluster_gemm_efficiency(&c, 512, 128, 64), 0.5 * (0.15 + 0.45), 1e-15);
  // without a table: the flat efficiency
  ASSERT_EQ(tl_cluster_parse(kGood, "c.json", &c), TL_OK);
  EXPECT_DOUBLE_EQ(tl_cluster_gemm_efficiency(&c, 64, 64, 64), c.efficiency);
}

// The attention table: by head dimension and sequence length, read like
// the GEMM table; without one, attention_efficiency (else efficiency).
TEST(Cluster, AttentionTableByHeadDimensionAndSequence) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_parse(kGood, "c.json", &c), TL_OK);
  EXPECT_EQ(tl_cluster_attention_efficiency(&c, 64, 1024), c.efficiency);
  std::string table = With("{\"nodes\"",
                           "{\"attention_efficiency\": 0.3, \"attention_efficiency_table\": "
                           "{\"head_dim\": [8, 64], \"seq\": [64, 1024],"
                           " \"efficiency\": [0.05, 0.1, 0.2, 0.4]}, \"nodes\"");
  ASSERT_EQ(tl_cluster_parse(table.c_str(), "c.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.attention.n_m, 2);
  EXPECT_EQ(c.attention.n_n, 2);
  EXPECT_EQ(c.attention.n_k, 1);
  EXPECT_DOUBLE_EQ(tl_cluster_attention_efficiency(&c, 8, 64), 0.05);
  EXPECT_DOUBLE_EQ(tl_cluster_attention_efficiency(&c, 64, 1024), 0.4);
  EXPECT_DOUBLE_EQ(tl_cluster_attention_efficiency(&c, 128, 4096), 0.4);  // held at the edges
  EXPECT_DOUBLE_EQ(tl_cluster_attention_efficiency(&c, 8, 256), 0.05 + 0.5 * 0.05);
  EXPECT_DOUBLE_EQ(tl_cluster_attention_efficiency(&c, 16, 64), 0.05 + 0.15 / 3);
  EXPECT_EQ(c.attention_efficiency, 0.3);  // kept, for what reads the one figure
  EXPECT_NE(Error(With("{\"nodes\"",
                       "{\"attention_efficiency_table\": {\"head_dim\": [8], "
                       "\"seq\": [64], \"efficiency\": [0.1, 0.2]}, \"nodes\""))
                .find("attention_efficiency_table.efficiency: expected an array of 1 fractions "
                      "(head_dim x seq, head_dim-major)"),
            std::string::npos);
  EXPECT_NE(Error(With("{\"nodes\"",
                       "{\"attention_efficiency_table\": {\"head_dim\": [8], "
                       "\"k\": [1], \"seq\": [64], \"efficiency\": [0.1]}, "
                       "\"nodes\""))
                .find("attention_efficiency_table.k: unknown key"),
            std::string::npos);
  EXPECT_NE(Error(With("{\"nodes\"",
                       "{\"attention_efficiency_table\": {\"head_dim\": [64, 8], "
                       "\"seq\": [64], \"efficiency\": [0.1, 0.1]}, \"nodes\""))
                .find("attention_efficiency_table.head_dim[1] = 8: expected sizes > 0, each above "
                      "the last"),
            std::string::npos);
}

// The collectives' shares of the links' bandwidth: 1 unless given.
TEST(Cluster, CollectiveBandwidthShares) {
  tl_cluster c;
  ASSERT_EQ(tl_cluster_parse(kGood, "c.json", &c), TL_OK);
  EXPECT_EQ(c.bw_all_gather, 1);
  EXPECT_EQ(c.bw_reduce_scatter, 1);
  EXPECT_EQ(c.bw_send_recv, 1);
  ASSERT_EQ(tl_cluster_parse(With("{\"nodes\"",
                                  "{\"collective_bandwidth\": {\"all_gather\": 1.5, "
                                  "\"send_recv\": 0.5}, \"nodes\"")
                                 .c_str(),
                             "c.json", &c),
            TL_OK)
      << tl_last_error();
  EXPECT_EQ(c.bw_all_gather, 1.5);
  EXPECT_EQ(c.bw_reduce_scatter, 1);
  EXPECT_EQ(c.bw_send_recv, 0.5);
  EXPECT_NE(Error(With("{\"nodes\"", "{\"collective_bandwidth\": {\"all_gather\": 0}, \"nodes\""))
                .find("collective_bandwidth.all_gather = 0: expected a number > 0"),
            std::string::npos);
  EXPECT_NE(Error(With("{\"nodes\"", "{\"collective_bandwidth\": {\"broadcast\": 1}, \"nodes\""))
                .find("collective_bandwidth.broadcast: unknown key; expected one of: all_gather, "
                      "reduce_scatter, send_recv"),
            std::string::npos);
  EXPECT_NE(Error(With("{\"nodes\"", "{\"collective_bandwidth\": 2, \"nodes\""))
                .find("collective_bandwidth: expected an object"),
            std::string::npos);
}

TEST(Cluster, BadGemmTablesSayWhatIsWrong) {
  auto bad = [](const char* t) {
    return Error(With("{\"nodes\"", std::string("{\"gemm_efficiency\": ") + t + ", \"nodes\""));
  };
  EXPECT_NE(bad("[]").find("gemm_efficiency: expected an object"), std::string::npos);
  EXPECT_NE(bad(R"({"m": [64, 32], "n": [1], "k": [1], "efficiency": [0.5, 0.5]})")
                .find("gemm_efficiency.m[1] = 32: expected sizes > 0, each above the last"),
            std::string::npos);
  EXPECT_NE(bad(R"({"m": [64], "n": [1], "k": [1], "efficiency": [0.5, 0.5]})")
                .find("gemm_efficiency.efficiency: expected an array of 1 fractions"),
            std::string::npos);
  EXPECT_NE(bad(R"({"m": [64], "n": [1], "k": [1], "efficiency": [1.5]})")
                .find("gemm_efficiency.efficiency[0] = 1.5: expected a fraction in (0, 1]"),
            std::string::npos);
  EXPECT_NE(bad(R"({"m": [64], "n": [1], "efficiency": [0.5]})")
                .find("gemm_efficiency.k: expected an array of 1 to 8 sizes, got nothing"),
            std::string::npos);
  EXPECT_NE(bad(R"({"m": [64], "n": [1], "k": [1], "efficiency": [0.5], "x": 1})")
                .find("gemm_efficiency.x: unknown key"),
            std::string::npos);
}

// A link's all-reduce bandwidth by buffer size: read log-linearly between
// its points and held at its ends; a link without it is flat. A group
// spanning nodes takes, at each size, the node's share of the inter-node
// rate, at most the intra-node one.
TEST(Cluster, BandwidthBySizeIsReadBetweenItsPoints) {
  tl_cluster c;
  const std::string spec =
      With("\"intra_node\": {\"bandwidth\": 1e9, \"latency\": 0}",
           "\"intra_node\": {\"bandwidth\": 1e9, \"latency\": 0, \"bandwidth_by_size\": "
           "[[1048576, 2e9], [4194304, 1e9], [67108864, 5e8]]}");
  ASSERT_EQ(tl_cluster_parse(spec.c_str(), "c.json", &c), TL_OK) << tl_last_error();
  EXPECT_EQ(c.intra.n_sizes, 3);
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&c.intra, 1024), 2e9);       // below: the first
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&c.intra, 1 << 30), 5e8);    // above: the last
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&c.intra, 4194304), 1e9);    // on a point
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&c.intra, 2097152), 1.5e9);  // halfway in log size
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&c.intra, 16777216), 7.5e8);
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&c.inter, 16777216), 1e8);  // no curve: flat
  // a buffer sent in pieces: every piece at the pieces' size's rate
  struct tl_link at = tl_link_at(&c.intra, 2097152);
  EXPECT_DOUBLE_EQ(at.message_bytes, 2097152);
  EXPECT_DOUBLE_EQ(tl_link_bandwidth_at(&at, 1 << 30), 1.5e9);
  // the collectives' shares by size
  const std::string shares = With("{\"nodes\"",
                                  "{\"collective_bandwidth\": {\"all_gather\": 1.5, \"by_size\": "
                                  "[[1048576, 2, 1], [4194304, 1, 0.5]]}, \"nodes\"");
  ASSERT_EQ(tl_cluster_parse(shares.c_str(), "c.json", &c), TL_OK) << tl_last_error();
  EXPECT_DOUBLE_EQ(tl_cluster_share_at(&c, true, 2097152), 1.5);
  EXPECT_DOUBLE_EQ(tl_cluster_share_at(&c, false, 2097152), 0.75);
  EXPECT_DOUBLE_EQ(tl_cluster_share_at(&c, false, 1 << 30), 0.5);
  EXPECT_NE(Error(With("{\"nodes\"",
                       "{\"collective_bandwidth\": {\"by_size\": [[1, 1, 1], "
                       "[2, 1, -1]]}, \"nodes\""))
                .find("collective_bandwidth.by_size[1]: expected [bytes, all_gather, "
                      "reduce_scatter], each above 0"),
            std::string::npos);
  // bad curves name the field
  EXPECT_NE(Error(With("\"latency\": 0}", "\"latency\": 0, \"bandwidth_by_size\": [[1, 1e9]]}"))
                .find("intra_node.bandwidth_by_size: expected 2 to 8 pairs"),
            std::string::npos);
  EXPECT_NE(
      Error(With("\"latency\": 0}", "\"latency\": 0, \"bandwidth_by_size\": [[4, 1e9], [2, 1e9]]}"))
          .find("intra_node.bandwidth_by_size[1]: expected [bytes, bytes/s], both above "
                "0, the sizes rising"),
      std::string::npos);
  EXPECT_NE(
      Error(With("\"latency\": 0}", "\"latency\": 0, \"bandwidth_by_size\": [[1, 1e9], [2, 0]]}"))
          .find("intra_node.bandwidth_by_size[1]"),
      std::string::npos);
}
