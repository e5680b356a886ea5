// nodes_test.cc — a job across two hosts: emulated nodes on this machine
// (tools/cluster.sh: a network namespace and hostname each, the link
// between them shaped to 1 Gbit/s, hydra reaching each node through its
// rsh launcher), `trellis train --hosts` starting 2 ranks on each. The
// tensor-parallel pairs run inside a node and the data-parallel gradients
// cross the link; the run is EQUAL to one device under --verify, and a probe
// between the nodes measures the shaped link, not the host's loopback.
// Skipped, saying why, where namespaces cannot be made (not root, no
// `ip netns`).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";
const char* kCluster = "tools/cluster.sh";

std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// Why emulated nodes cannot be made here, or "" when they can: a network
// namespace made, entered and removed (a chroot without /sys, say, makes
// one but cannot enter it).
std::string NoNamespaces() {
  if (geteuid() != 0) return "emulated nodes need root (ip netns, tc): not root here";
  // `ip netns add` mounts /run/netns the first time; where entering fails
  // (a chroot), that mount is this probe's to take back
  const bool mounted = RunProcess({"mountpoint", "-q", "/run/netns"}, {}, 30, true).status == 0;
  RunResult r = RunProcess({"ip", "netns", "add", "tlprobe_ns"}, {}, 30, true);
  if (r.status != 0) return "emulated nodes need network namespaces: ip netns add: " + r.output;
  RunResult e = RunProcess({"ip", "netns", "exec", "tlprobe_ns", "true"}, {}, 30, true);
  RunProcess({"ip", "netns", "delete", "tlprobe_ns"}, {}, 30, true);
  if (e.status == 0) return "";
  if (!mounted) RunProcess({"umount", "/run/netns"}, {}, 30, true);
  return "emulated nodes need network namespaces: ip netns exec: " + e.output;
}

// The job's and the probe's nodes: a prefix of their own, so that runs of
// other tests (or a crashed one's leftovers) do not collide.
const char* kPrefix = "tlnt";

}  // namespace

TEST(Nodes, AJobAcrossTwoHostsIsTheSingleDeviceRun) {
  const std::string why = NoNamespaces();
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string cfg = TmpDir() + "/two_nodes.json", text = TmpDir() + "/text.txt",
                    tokens = TmpDir() + "/tokens.bin";
  {
    std::ofstream t(text);
    for (int i = 0; i < 600; i++) t << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  RunResult data = RunProcess({kTrellis, "data", text, tokens}, {}, 60, true);
  ASSERT_EQ(data.status, 0) << data.output;
  std::ofstream(cfg) << R"({"model": {"n_layers": 2, "n_heads": 2, "n_embd": 16, "max_seq_len": 16},
    "mesh": {"dp": 2, "tp": 2},
    "train": {"steps": 3, "batch_size": 4, "seq_len": 16, "sample_tokens": 0},
    "parallel": {"timeout_s": 60}, "device": {"threads": 1},
    "data": {"train": ")"
                     << tokens << R"("}})";
  const std::string n0 = std::string(kPrefix) + "0", n1 = std::string(kPrefix) + "1";
  RunResult r = RunProcess({kCluster, "run", "2", "1gbit", kTrellis, "train", cfg, "--hosts",
                            n0 + ":2," + n1 + ":2", "--verify"},
                           {{"TL_CLUSTER_PREFIX", kPrefix},
                            {"TRELLIS_LOG_LEVEL", "debug"},
                            {"TRELLIS_LOG_RANKS", "all"}},
                           240, true);
  ASSERT_FALSE(r.timed_out) << "the job did not end\n" << r.output;
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("verify: EQUAL to the single-device run"), std::string::npos) << r.output;
  // where each rank ran: tensor-parallel pairs on one node, replicas apart
  const std::string want[4][2] = {{"0", n0}, {"1", n0}, {"2", n1}, {"3", n1}};
  for (const auto& w : want) {
    EXPECT_NE(r.output.find("rank " + w[0] + " on " + w[1] + ": dp "), std::string::npos)
        << "rank " << w[0] << " should run on " << w[1] << "\n"
        << r.output;
  }
  std::printf("2 nodes x 2 ranks, dp 2 across the 1 Gbit/s link, tp 2 inside each: EQUAL, %.1f s\n",
              r.seconds);
}

// The link between nodes is the shaped one: 32 MiB sent from node 0 to node
// 1 over TCP arrive at about 1 Gbit/s (the loopback inside a host moves
// tens of Gbit/s).
TEST(Nodes, TheLinkBetweenNodesHasItsShapedRate) {
  const std::string why = NoNamespaces();
  if (!why.empty()) GTEST_SKIP() << why;
  // the receiver in node 1 (entered as hydra enters it), the sender in node 0
  const std::string script = TmpDir() + "/probe.sh";
  std::ofstream(script)
      << "set -e\n"
         "tools/cluster.sh enter \"$1\" \"tests/cluster/link_probe recv 5999\" &\n"
         "tests/cluster/link_probe send \"$1\" 5999 32\n"
         "wait\n";
  const std::string n1 = std::string(kPrefix) + "1";
  RunResult r = RunProcess({kCluster, "run", "2", "1gbit", "bash", script, n1},
                           {{"TL_CLUSTER_PREFIX", kPrefix}}, 120, true);
  ASSERT_FALSE(r.timed_out) << r.output;
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t at = r.output.find("probe: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  long long bytes = 0;
  double seconds = 0, gbit = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + at, "probe: %lld bytes in %lf s: %lf Gbit/s", &bytes,
                        &seconds, &gbit),
            3)
      << r.output;
  EXPECT_EQ(bytes, 32LL << 20);
  std::printf("node 0 -> node 1: %.2f Gbit/s through a link shaped to 1 Gbit/s\n", gbit);
  EXPECT_GT(gbit, 0.3);
  EXPECT_LT(gbit, 1.5) << "bytes between the nodes bypassed the shaped link";
}
