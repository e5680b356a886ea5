// planner_nodes_test.cc — the planner on a cluster of emulated nodes: two
// nodes of two ranks, and four of one (tools/cluster.sh, 1 Gbit/s links
// between them), `trellis plan --calibrate` run across them (each link
// measured on its own), then five meshes that put dp, pp or tp across the
// links trained with `--cluster` on that spec, each run's priced step
// against its measured median. Printed: the table, the worst error and the rank correlation.
// Checked: every mesh within kTolerance of its price (a run out of bounds
// is run again once, and the second decides). Alone on the machine
// (it measures time), not under the sanitizers (they measure themselves);
// skipped, saying why, where namespaces cannot be made.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cluster/namespaces.h"
#include "tests/launcher/subprocess.h"

namespace {

const char* kTrellis = "launcher/trellis";
const char* kCluster = "tools/cluster.sh";
const char* kPrefix = "tlpn";  // nodes of this test's own

// Measured here, on an otherwise idle machine, with the spec calibrated
// moments before: every mesh within 33% on 2 nodes of 2 and 23% on 4 of 1
// (docs/clusters.md has the tables).
// A shared machine's neighbours move a 50-ms step by more than a machine
// of its own does, so the bound is wider than the 25% the planner aims at;
// on the emulation this guards against (nodes sharing every core, the ranks
// inside a node over TCP) the meshes measured -58% to +955% of their price.
constexpr double kTolerance = 0.50;

std::string TmpDir() {
  const char* d = getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

struct Mesh {
  const char* name;
  const char* mesh;       // the config's "mesh" object
  const char* across[2];  // what crosses a link on 2 nodes of 2, on 4 of 1
};

// Ranks 0-1 on node 0 and 2-3 on node 1 (or each rank a node of its own);
// the order puts each axis across.
const Mesh kMeshes[] = {
    {"dp2tp2", R"({"dp": 2, "tp": 2})", {"dp", "dp, tp"}},
    {"dp2pp2", R"({"dp": 2, "pp": 2})", {"pp", "dp, pp"}},
    {"dp2tp2_tpx", R"({"dp": 2, "tp": 2, "order": ["dp", "tp", "pp"]})", {"tp", "dp, tp"}},
    {"dp4", R"({"dp": 4})", {"dp (and inside)", "dp"}},
    {"dp2pp2_dpx", R"({"dp": 2, "pp": 2, "order": ["pp", "dp", "tp"]})", {"dp", "dp, pp"}},
};

// Spearman's rank correlation (tied values share their mean rank).
double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = a.size();
  auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> idx(n);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&v](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && v[idx[j + 1]] == v[idx[i]]) j++;
      for (size_t k = i; k <= j; k++) r[idx[k]] = (double)(i + j) / 2;
      i = j + 1;
    }
    return r;
  };
  // Pearson's correlation of the ranks
  std::vector<double> ra = ranks(a), rb = ranks(b);
  const double mean = (double)(n - 1) / 2;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; i++) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

// Calibrates `nodes` nodes of `per_node` ranks, then prices and runs every
// mesh on them.
void PriceOnNodes(int nodes, int per_node) {
  const std::string why = NoNamespaces("tlpn_probe");
  if (!why.empty()) GTEST_SKIP() << why;
  const int layout = nodes == 2 ? 0 : 1;
  const std::string dir = TmpDir(), text = dir + "/pn_text.txt", tokens = dir + "/pn_tokens.bin",
                    spec = dir + "/pn_spec.json", script = dir + "/pn_run.sh";
  {
    std::ofstream t(text);
    for (int i = 0; i < 3000; i++)
      t << "the quick brown fox jumps over the lazy dog, line " << i << " of many\n";
  }
  RunResult data = RunProcess({kTrellis, "data", text, tokens}, {}, 60, true);
  ASSERT_EQ(data.status, 0) << data.output;
  // examples/gpt_small.json's model, two micro-batches, a thread a rank
  std::string configs;
  for (const Mesh& m : kMeshes) {
    const std::string cfg = dir + "/pn_" + m.name + ".json";
    std::ofstream(cfg) << R"({"model": {"kind": "gpt", "n_layers": 4, "n_heads": 4, "n_embd": 128,
      "vocab_size": 256, "max_seq_len": 64},
      "mesh": )" << m.mesh
                       << R"(,
      "schedule": {"kind": "1f1b", "micro_batches": 2},
      "train": {"steps": 30, "batch_size": 8, "seq_len": 64, "lr": 0.003, "warmup_steps": 0,
                "val_every": 0, "sample_tokens": 0},
      "parallel": {"timeout_s": 120}, "device": {"type": "cpu", "threads": 1},
      "data": {"train": ")"
                       << tokens << R"("}})";
    configs += " " + cfg;
  }
  std::string hosts;
  for (int i = 0; i < nodes; i++)
    hosts +=
        (i ? "," : "") + std::string(kPrefix) + std::to_string(i) + ":" + std::to_string(per_node);
  // in node 0, as a person there would: calibrate, then each mesh priced
  std::ofstream(script) << "set -e\n"
                           "spec=$1 hosts=$2; shift 2\n"
                           "launcher/trellis plan --calibrate \"$spec\" --ranks 4 --hosts "
                           "\"$hosts\" 2>&1 | grep '^calibrated'\n"
                           "for cfg in \"$@\"; do\n"
                           "  echo \"mesh: $cfg\"\n"
                           "  launcher/trellis train \"$cfg\" --hosts \"$hosts\" --cluster "
                           "\"$spec\" 2>&1 | grep '^priced on'\n"
                           "done\n";
  std::vector<std::string> argv = {kCluster, "run", std::to_string(nodes), "1gbit", "bash", script,
                                   spec,     hosts};
  for (const Mesh& m : kMeshes) argv.push_back(dir + "/pn_" + m.name + ".json");
  // A calibration is a few seconds of a shared machine: once in a while a
  // neighbour's burst moves it, and every price with it (a CI run priced
  // dp 2 x tp 2 at 30 ms where every other run priced 42-47, measured
  // 48-52). A run out of bounds is run again, calibration and all, and
  // the second decides; both are printed.
  for (int attempt = 1; attempt <= 2; attempt++) {
    RunResult r = RunProcess(argv, {{"TL_CLUSTER_PREFIX", kPrefix}}, 600, true);
    ASSERT_FALSE(r.timed_out) << r.output;
    ASSERT_EQ(r.status, 0) << r.output;
    ASSERT_NE(r.output.find("calibrated 4 ranks"), std::string::npos) << r.output;
    std::vector<double> priced, measured, errors;
    std::string table;
    double worst = 0;
    for (const Mesh& m : kMeshes) {
      const std::string at = "mesh: " + dir + "/pn_" + m.name + ".json";
      size_t p = r.output.find(at);
      ASSERT_NE(p, std::string::npos) << m.name << "\n" << r.output;
      p = r.output.find("ms a step; measured", p);
      ASSERT_NE(p, std::string::npos) << m.name << ": no priced and measured line\n" << r.output;
      const size_t line = r.output.rfind("priced on", p);
      const size_t colon = r.output.find(": ", line);
      double price = 0, mean = 0, median = 0;
      ASSERT_EQ(
          std::sscanf(r.output.c_str() + colon, ": %lf ms a step; measured %lf mean (%*[^)]), %lf",
                      &price, &mean, &median),
          3)
          << r.output.substr(line, 300);
      const double err = median / price - 1;
      priced.push_back(price);
      measured.push_back(median);
      errors.push_back(err);
      worst = std::max(worst, std::fabs(err));
      char row[200];
      std::snprintf(row, sizeof row, "| %s | %s | %.1f | %.1f | %+.1f%% |\n", m.name,
                    m.across[layout], price, median, 100 * err);
      table += row;
    }
    std::printf(
        "%s| mesh | across the link | priced ms | measured ms (median) | error |\n%s",
        r.output
            .substr(r.output.find("calibrated"), r.output.find('\n', r.output.find("calibrated")) -
                                                     r.output.find("calibrated") + 1)
            .c_str(),
        table.c_str());
    std::printf("%d nodes of %d: worst error %.1f%%, Spearman %.2f over %zu meshes\n", nodes,
                per_node, 100 * worst, Spearman(priced, measured), priced.size());
    if (worst <= kTolerance) return;
    if (attempt == 1) {
      std::printf("out of bounds: calibrating and running again\n");
      continue;
    }
    for (size_t k = 0; k < errors.size(); k++)
      EXPECT_LE(std::fabs(errors[k]), kTolerance)
          << kMeshes[k].name << " on " << hosts << " (" << kMeshes[k].across[layout]
          << " across a link): priced " << priced[k] << " ms a step, measured " << measured[k]
          << " (median)";
  }
}

}  // namespace

TEST(PlannerOnNodes, TwoNodesOfTwoRanks) {
  PriceOnNodes(2, 2);
}

// Four nodes on this machine's cores share them, two to a core (which
// tools/cluster.sh tells the ranks: they yield while they wait)
TEST(PlannerOnNodes, FourNodesOfOneRank) {
  PriceOnNodes(4, 1);
}
