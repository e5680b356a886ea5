// equality_common.h — what the equality suites share (equality_test.cc,
// carry_test.cc, cp_test.cc): the token file, the base configs, and training a config on
// this job with every step checked by the equality oracle against one
// device (launcher/train/verify.h).
#ifndef TL_TESTS_LAUNCHER_EQUALITY_COMMON_H
#define TL_TESTS_LAUNCHER_EQUALITY_COMMON_H

#include <string>
#include <vector>

#include "core/config.h"
#include "launcher/train/verify.h"

int WorldSize();
int WorldRank();

// A token file of random tokens shared by every rank (written by rank 0).
const char* Tokens();

// The small GPT, Llama (grouped-query) or MLP every equality case trains,
// 5 steps of 16 sequences of 8 tokens, AdamW's eps at 1e-8.
tl_config Base(tl_model_kind kind);

struct Run {
  std::vector<double> losses;
  int64_t pp_send_bytes = 0;        // this rank's sends over the pipeline's links during the steps
  int stage = 0, stage_layers = 0;  // this rank's pipeline stage and how many layers it holds
  tl_verify_report report = {};     // rank 0: the oracle's findings
};

// Trains `c` on this job (collective), every step checked by the equality
// oracle against the same config on one device (held by rank 0).
Run Train(const tl_config& c);

const char* KindName(tl_model_kind kind);
std::string Describe(const tl_verify_report& v);

// Trains `c` on this job and checks every step against one device; with
// stage_layers, each rank's stage holds the layers the config cut.
void Report(const tl_config& c, const std::string& what, const std::vector<int>& stage_layers);

// A file's bytes ("" where it cannot be read).
std::string ReadAll(const std::string& path);

#endif
