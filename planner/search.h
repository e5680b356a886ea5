/* search.h — the search over 4D splits: every dp × tp × pp × cp
 * factorisation of the cluster's devices (cp: each degree a cost model was
 * built for), every micro-batch size and count that makes the
 * global batch, both flush schedules (GPipe, 1F1B), ZeRO 0..3,
 * recomputation on and off, and with tp > 1 sequence parallelism on and off. Each candidate is
 * priced by the cost model (planner/cost.h, built once per model and sequence length); those that
 * do not fit a device's memory, or break a rule of the mesh, are rejected and counted by reason;
 * the rest are ranked by predicted step time.
 *
 * Mesh rules: tp divides the heads and the padded vocabulary (an MLP: the
 * sizes its layout splits; no sequence parallelism, no recomputation), tp <= devices
 * per node (tensor parallelism needs the node's fast links) unless allowed,
 * pp <= layers, dp divides the global batch; with sequence parallelism tp
 * divides a micro-batch's tokens (of a context-parallel rank's share).
 * Rejections of a mesh shape are counted once per (dp, tp, pp, cp); micro-batch, trainer and memory
 * rejections once per plan (sp_tokens once per micro-batch size). */
#ifndef TL_PLANNER_SEARCH_H
#define TL_PLANNER_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "planner/cluster.h"
#include "planner/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TL_REJECT_TP_HEADS = 0, /* tp does not divide the attention (or key/value) heads */
  TL_REJECT_TP_VOCAB,     /* tp does not divide the padded vocabulary */
  TL_REJECT_TP_SPLIT,     /* MLP, Llama: tp does not divide a split layer's size */
  TL_REJECT_TP_NODE,      /* tp > devices per node */
  TL_REJECT_PP_LAYERS,    /* pp > layers */
  TL_REJECT_BATCH,        /* dp does not divide the global batch */
  TL_REJECT_SP_TOKENS,    /* sequence parallelism: tp does not divide a micro-batch's tokens */
  TL_REJECT_TRAINER,      /* the trainer cannot run it here (tl_plan.runnable) */
  TL_REJECT_MEMORY,       /* over device memory */
  TL_REJECT_COUNT
} tl_reject_reason;

/* "tp_heads", "tp_vocab", "tp_split", "tp_node", "pp_layers", "batch", "sp_tokens", "trainer",
 * "memory" */
const char* tl_reject_name(tl_reject_reason r);

struct tl_search_options {
  int global_batch; /* sequences per step */
  tl_dtype dtype;   /* TL_BF16 (mixed precision) or TL_F32 */
  bool allow_tp_across_nodes;
  /* only plans `trellis train` runs (tl_plan.runnable) */
  bool trainer_only;
  /* the plans' dp_bucket_mb (tl_plan): default 25, the trainer's default
   * bucket; 0 prices a runtime that all-reduces after the backward */
  double dp_bucket_mb;
  /* the plans' grad_reduce (tl_plan): TL_F32 */
  tl_dtype grad_reduce;
  /* the plans' no_overlap (tl_plan): false */
  bool no_overlap;
  /* the plans' recompute_whole_forward (tl_plan): false */
  bool recompute_whole_forward;
  /* fixed choices; -1 = search (schedule: -1 or a tl_schedule_kind;
   * recompute: -1 or a tl_recompute; sp: sequence parallelism, 0 or 1,
   * meaningful with tp > 1) */
  int fix_dp, fix_tp, fix_pp, fix_micro_batch, fix_n_micro, fix_zero, fix_recompute, fix_schedule;
  int fix_sp;
  int fix_virtual_stages; /* the interleaved schedule's chunks per rank (2 to 8 searched) */
  /* context parallelism: cost models of the model split for cp > 1 ranks
   * (tl_cost_model_build_cp, one per degree; none: cp 1 alone), each
   * searched beside tl_search_run's own (cp 1); fix_cp -1 = search */
  const tl_cost_model* const* cp_models;
  int n_cp_models;
  int fix_cp;
};

/* Options with nothing fixed. */
void tl_search_options_defaults(struct tl_search_options* o, int global_batch, tl_dtype dtype);

typedef struct tl_search_result {
  tl_plan* plans; /* the plans that fit, fastest first */
  int n_plans;
  int64_t n_evaluated; /* plans priced */
  int64_t rejected[TL_REJECT_COUNT];
  int64_t n_meshes; /* dp x tp x pp shapes with the fixed choices, before the mesh rules */
  /* the plan the memory rule rejected that needs the least memory per
   * device (has_closest): what a plan that does not fit would take */
  bool has_closest;
  tl_plan closest;
  /* tl_search_fewer and tl_search_more_nodes: device or node counts
   * searched and those with a plan */
  int n_counts, n_counts_fitting;
} tl_search_result;

/* Runs the search; out->plans is heap memory the caller frees with
 * tl_search_free (also on failure it is left empty). n_plans may be 0 when
 * everything was rejected. */
tl_status tl_search_run(const tl_cost_model* cm, const tl_cluster* c,
                        const struct tl_search_options* o, tl_search_result* out);
void tl_search_free(tl_search_result* r);

/* Why `r` (tl_search_run's result) holds no plan, as one or two sentences
 * into buf: the rule that rejected every mesh shape, in the model's and the
 * cluster's numbers (the most devices the mesh rules can use, and the flag
 * that lifts a rule where there is one), a fixed choice no split of the
 * cluster's devices has, or the memory the least hungry plan needs. */
void tl_search_explain(const tl_cost_model* cm, const tl_cluster* c,
                       const struct tl_search_options* o, const tl_search_result* r, char* buf,
                       size_t size);

/* No plan, because of the mesh rules or the fixed dp, tp and pp alone
 * (fewer devices may then have one; tl_search_fewer). */
bool tl_search_mesh_bound(const tl_search_result* r);

/* The most devices a dp x tp x pp mesh can use under the mesh rules (dp
 * divides the global batch, tp the heads and padded vocabulary within a
 * node, pp at most the layers), with the fixed choices, counting whole
 * nodes or part of one (the parts tl_search_fewer searches); its shape in
 * *dp, *tp, *pp (0 when none). */
int64_t tl_search_max_devices(const tl_cost_model* cm, const tl_cluster* c,
                              const struct tl_search_options* o, int* dp, int* tp, int* pp,
                              int* cp);

/* When no split of all of c's devices works: the search over fewer devices
 * — every count below the cluster's that a mesh can use and a part of the
 * cluster holds (whole nodes, or part of one node), most devices first,
 * until `max_counts` of them have a plan or 64 were priced — into *out,
 * fastest first (a plan's devices are dp x tp x pp). The caller frees out
 * with tl_search_free. */
tl_status tl_search_fewer(const tl_cost_model* cm, const tl_cluster* c,
                          const struct tl_search_options* o, int max_counts, tl_search_result* out);

/* When no split of c's devices fits (nor of fewer), more devices may hold
 * the model: the fewest nodes of c's kind above c->nodes on which a plan
 * fits. The candidates are the node counts whose devices some mesh fills
 * under the mesh rules and the fixed choices, up to max_devices and the
 * largest mesh the rules allow (batch x layers x the widest tp); each is
 * searched in turn, fewest first, at most max_counts of them, until one has
 * a plan (every count: fitting does not grow evenly with the devices, a
 * count whose meshes split the layers unevenly can fail between two that
 * fit). Into *out the search of that count (plans fastest first; n_counts
 * the counts searched, n_evaluated the plans priced over all of them),
 * *nodes that count (0: none searched has a plan), *searched_to the most
 * nodes searched (0: no count a mesh fills). The caller frees out with
 * tl_search_free. */
tl_status tl_search_more_nodes(const tl_cost_model* cm, const tl_cluster* c,
                               const struct tl_search_options* o, int64_t max_devices,
                               int max_counts, int* nodes, int* searched_to, tl_search_result* out);

#ifdef __cplusplus
}
#endif

#endif
