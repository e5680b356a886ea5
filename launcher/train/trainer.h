/* trainer.h — training on one device or on a data x tensor x pipeline mesh:
 * the one place where the axes meet.
 *
 * Set-up, on every rank: graph/ builds the whole model's graph for one
 * micro-batch; tp/ rewrites it into this tensor-parallel rank's graph (and
 * says where each of its parameters lies in the whole model); pp/ cuts that
 * into stages and runs this rank's stage; dp/ lays out the stage's flat
 * parameter and gradient buffers in the order the backward finishes them;
 * the optimizer (optimizer.h) holds the AdamW moments.
 *
 * One step:
 *  1. zero the gradients; walk the stage's pipeline schedule (GPipe or 1F1B)
 *     over the replica's micro-batches (pp/runtime.h: receive activations,
 *     forward, send; receive gradients, backward with the loss scaled by
 *     1/(global batch tokens), send); the graph's tensor-parallel
 *     collectives run inside forward and backward. During the last
 *     micro-batch's backward, finished gradient buckets start their
 *     data-parallel all-reduce (a sum);
 *  2. wait for the buckets; sum the tied token embedding's gradient between
 *     the first and last stage (pp; under ZeRO 2 and 3 with the table in
 *     pieces, its shards after the data-parallel reduction); with sequence
 *     parallelism, sum the
 *     gradients of the parameters each tp rank saw only its token rows of
 *     (tp);
 *  3. global gradient norm over all stages and shards (each parameter
 *     counted once), clipping;
 *  4. AdamW on the stage's parameters (weight decay on weight matrices only).
 * A single device is the mesh (1, 1, 1): the same code, with no messages. */
#ifndef TL_LAUNCHER_TRAINER_H
#define TL_LAUNCHER_TRAINER_H

#include <stdint.h>

#include "core/config.h"
#include "core/group.h"
#include "graph/exec.h"
#include "graph/model.h"
#include "pp/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_trainer tl_trainer;

/* The job around one rank. NULL (or all groups NULL) for a single device.
 * device groups carry tensors (on the backend's device); host groups carry
 * scalars and host copies. On the CPU they are the same groups. */
struct tl_trainer_comm {
  tl_group* world; /* host group of the whole job */
  /* device groups of this rank's data group and pipeline: `dp` is what the
   * gradients are summed over and ZeRO shards over — the data-parallel
   * group, or with context parallelism dp x cp (core/mesh.h) */
  tl_group *dp, *pp;
  tl_group *host_dp, *host_pp;
  tl_group *tp, *host_tp; /* this rank's tensor-parallel group */
  tl_group *cp, *host_cp; /* its context-parallel group (the attention ring) */
};

/* The job's groups, given as a tl_worker's arrays (core/group.h's
 * tl_group_split_mesh: by tl_axis, the data group at TL_MESH_DATA). */
static inline struct tl_trainer_comm tl_trainer_comm_of(
    tl_group* world, tl_group* const groups[TL_MESH_GROUPS],
    tl_group* const host_groups[TL_MESH_GROUPS]) {
  struct tl_trainer_comm c = {world,
                              groups[TL_MESH_DATA],
                              groups[TL_AXIS_PP],
                              host_groups[TL_MESH_DATA],
                              host_groups[TL_AXIS_PP],
                              groups[TL_AXIS_TP],
                              host_groups[TL_AXIS_TP],
                              groups[TL_AXIS_CP],
                              host_groups[TL_AXIS_CP]};
  return c;
}

struct tl_step_stats {
  int64_t step; /* 1-based: the step just taken */
  double loss;  /* mean over the global batch (every rank gets it) */
  float lr;
  float grad_norm; /* before clipping */
  double seconds;
  double bubble_seconds; /* time this rank waited on pipeline receives */
  /* this rank's data-parallel gradient buckets (parallel.bucket_mb), and how
   * many of them started during the last backward (overlapped); 0 at dp = 1 */
  int dp_buckets, dp_buckets_early;
  /* seconds this rank waited on data-parallel collectives outside compute:
   * the buckets' ends (and ZeRO-2's turns of its bucket buffers) and ZeRO's
   * all-gather of the updated parameters — the communication left exposed */
  double dp_wait_seconds;
  /* 1: the loss or the gradient norm was not finite and, under
   * train.skip_nonfinite, nothing was updated */
  int skipped;
};

/* Builds this rank's part from the config (every rank of the job calls it:
 * collective). Starting weights: checkpoint.resume, else model.init_from,
 * else the RNG — each rank reads or draws only its stage's parameters. */
tl_status tl_trainer_create(const struct tl_config* cfg, const struct tl_trainer_comm* comm,
                            tl_trainer** out);
void tl_trainer_destroy(tl_trainer* t);

/* One optimizer step (collective). */
tl_status tl_trainer_step(tl_trainer* t, struct tl_step_stats* out);
/* Mean loss over train.val_batches batches of the validation file, from its
 * start (collective). TL_ERR_CONFIG without data.val. */
tl_status tl_trainer_eval(tl_trainer* t, double* loss);
/* The full flat parameter vector in the model's order (llm.c's), assembled
 * on world rank 0 (collective; `out` may be NULL on other ranks). With
 * `moments`, also the AdamW moments into out + n and out + 2n. */
tl_status tl_trainer_gather(tl_trainer* t, float* out, int moments);
/* The gradients AdamW took in the last step (after clipping), as a full
 * flat vector in the model's order on world rank 0 (collective). */
tl_status tl_trainer_gather_grads(tl_trainer* t, float* out);
/* Whether tl_trainer_save writes a sharded checkpoint directory (sharded.h:
 * checkpoint.format "sharded", or "auto" with parallel.zero 3) rather than
 * one file assembled on rank 0. */
bool tl_trainer_saves_sharded(const tl_trainer* t);
/* The most host bytes the last save, sharded load or export held on this
 * rank (a sharded save or load holds what the rank holds, never the whole
 * model unless the rank does). */
int64_t tl_trainer_io_host_bytes(const tl_trainer* t);
/* Sets this rank's parameters and AdamW moments from whole-model vectors
 * (parameters, first and second moment, n_params apart; the same on every
 * rank of the job). Collective over the job: under ZeRO 1-3 the working
 * parameters are gathered from the master shards. */
tl_status tl_trainer_set_state(tl_trainer* t, const float* full);
/* Whether every copy of a parameter holds the same bits (collective):
 * data-parallel replicas, the tied embedding on the first and last stage,
 * the parameters every tensor-parallel rank holds whole. On disagreement,
 * `what` (cap bytes) says where, on every rank. */
tl_status tl_trainer_copies_agree(tl_trainer* t, int* agree, char* what, size_t cap);
/* Writes a trellis checkpoint (collective, atomic): one file from world
 * rank 0 (checkpoint.h), or a sharded directory every rank writes its part
 * of (sharded.h; tl_trainer_saves_sharded). checkpoint.resume reads
 * either, on any mesh and ZeRO stage. */
tl_status tl_trainer_save(tl_trainer* t, const char* path);
/* Writes the weights (collective): to a path ending in ".bin" as an llm.c
 * model file (gpt only), else as a Hugging Face model directory (hf.h:
 * config.json and safetensors, for transformers' GPT2LMHeadModel or
 * LlamaForCausalLM; files already in it that are not weights stay). Each
 * rank writes the parameters it holds alone at their places in the files:
 * no rank holds the whole model. */
tl_status tl_trainer_export(tl_trainer* t, const char* path);
/* The Hugging Face directory, with files of at most max_file_bytes
 * (tl_trainer_export's limit is TRELLIS_EXPORT_SHARD_MB). */
tl_status tl_trainer_export_hf(tl_trainer* t, const char* dir, int64_t max_file_bytes);

int64_t tl_trainer_steps_done(const tl_trainer* t);
const struct tl_config* tl_trainer_config(const tl_trainer* t);
/* This rank's place in the job (0 on a single device). */
int tl_trainer_world_rank(const tl_trainer* t);
const tl_model* tl_trainer_model(const tl_trainer* t);
/* The first token of the validation (else training) data: a natural prompt. */
int32_t tl_trainer_first_token(const tl_trainer* t);
/* FLOPs of one optimizer step on this rank. */
double tl_trainer_step_flops(const tl_trainer* t);
/* Device peak bytes since start (core's allocator), and the activation
 * arenas this rank holds (one per micro-batch in flight). */
int64_t tl_trainer_peak_bytes(const tl_trainer* t);
/* Bytes the allocator holds now on this rank's device. */
int64_t tl_trainer_live_bytes(const tl_trainer* t);
/* The calls and bytes of this stage's pipeline exchanges so far (they go
 * over links of their own, not the pp group: pp/runtime.h). */
tl_group_stats tl_trainer_pp_stats(const tl_trainer* t);
int64_t tl_trainer_activation_bytes(const tl_trainer* t);
/* The costs of a block's passes its pipeline schedule was built with
 * (pp/schedule.h: zero-bubble's lists depend on them). */
struct tl_pp_costs tl_trainer_schedule_costs(const tl_trainer* t);
/* Bytes of this rank's parameters, as the allocator counted them: the
 * whole stage's fp32 buffer (gradients and the two AdamW moments are the
 * same size each), or under ZeRO-3 and bf16 ZeRO 1-2 the working copy and
 * the fp32 master shard. */
int64_t tl_trainer_param_bytes(const tl_trainer* t);
/* Bytes of this rank's model state as the allocator counted them when the
 * trainer was made: parameters (and bf16 working copies), gradients,
 * AdamW's moments and the data-parallel buckets' buffers — what the ZeRO
 * formulas count, with what the implementation adds. */
int64_t tl_trainer_state_bytes(const tl_trainer* t);
/* This rank's stage: [layer_begin, layer_end) of n_stages (under the
 * interleaved schedule its first chunk's layers). */
void tl_trainer_stage(const tl_trainer* t, int* stage, int* n_stages, int* layer_begin,
                      int* layer_end);
/* Per-op timing of the training graph (synchronises after every node). */
void tl_trainer_profile(tl_trainer* t, int on);
double tl_trainer_op_seconds(const tl_trainer* t, int op);
/* Chrome trace events ("X" spans of forward, backward, send, recv and
 * all-reduce per micro-batch) appended for every later step; NULL stops. */
void tl_trainer_trace(tl_trainer* t, FILE* f);

#ifdef __cplusplus
}
#endif

#endif
