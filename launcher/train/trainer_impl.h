/* trainer_impl.h — the trainer's state, shared by its three files:
 * trainer.c (set-up and the step), trainer_state.c (the whole model in
 * and out: the starting weights, gathering, checkpoint files) and
 * trainer_shards.c (what each rank holds alone: sharded checkpoints, the
 * model file). */
#ifndef TL_LAUNCHER_TRAINER_IMPL_H
#define TL_LAUNCHER_TRAINER_IMPL_H

#include <stdio.h>

#include "dp/buckets.h"
#include "dp/layout.h"
#include "launcher/data/loader.h"
#include "launcher/data/tokens.h"
#include "launcher/train/optimizer.h"
#include "launcher/train/trainer.h"
#include "pp/runtime.h"
#include "pp/schedule.h"
#include "pp/stage.h"
#include "tp/tp.h"

struct tl_trainer {
  struct tl_config cfg;
  tl_model model;    /* the whole model: checkpoints, model files, gathered vectors */
  tl_tp_shard shard; /* how this tensor-parallel rank holds the model (tp/tp.h) */
  tl_graph* full;    /* the whole model's forward graph: the other tp ranks' shards */
  tl_backend* be;
  /* the job */
  struct tl_trainer_comm comm;
  /* dp_size, dp_rank: in the data group (dp x cp: what the gradients are
   * summed and ZeRO shards its state over); the replica (which sequences
   * this rank reads) is dp_rank / cp_size */
  int world_rank, dp_size, dp_rank, pp_size, pp_rank, tp_size, tp_rank, cp_size, cp_rank;
  int seq;          /* the tokens of each sequence this rank holds: train.seq_len / cp */
  tl_group* shared; /* the stages of this pipeline sharing parameters (the tied embedding) */
  /* the graph and this rank's stage */
  tl_graph* graph;
  struct tl_model_io io;
  /* all pp_size * n_chunks virtual stages (boundaries are needed on both
   * sides): chunk c of pipeline stage s is stages[c * pp_size + s] */
  tl_pp_stage* stages;
  int n_chunks;                         /* schedule.virtual_stages: 1 unless interleaved */
  tl_pp_stage chunks[TL_PP_MAX_CHUNKS]; /* this rank's, in model order */
  tl_pp_stage* me;                      /* its first chunk */
  const tl_pp_stage* sharing; /* the chunk holding the parameters shared with another stage */
  tl_dp_layout* layouts;      /* each stage's flat buffers (stage 0 gathers every stage's) */
  tl_dp_layout* lay;          /* this rank's stage's */
  tl_pp_schedule sched;
  struct tl_pp_costs costs; /* the passes' costs the schedule was built with */
  tl_pp_runtime* rt;        /* the stage's executors and exchanges */
  bool* scatter;            /* per graph value: a boundary value the tp group holds alike */
  /* the stage's flat buffers; with ZeRO-2 `grads` is the buckets' staging
   * (tl_dp_buckets_grad_buffer), and grad_offset says where each
   * parameter's gradient lies in it (NULL: at the layout's offset) */
  tl_buffer *params, *grads;
  bool params_owned, grads_owned;
  /* per parameter, whether the stage's backward writes its gradient
   * (`written`), and whether it holds nothing of this step yet (`fresh`:
   * the executors' tl_exec_options.grads_fresh, set from `written` as a
   * step begins instead of zeroing `grads`; under ZeRO 2-3 set again for a
   * node's gradients once the buckets took them from the staging) */
  bool *grads_fresh, *grads_written;
  /* ZeRO-3: `params` is the buckets' two unit slots (tl_dp_buckets_param_
   * buffer) and param_offset says where each parameter lies in it; ZeRO 1
   * and 2 under bf16 training: `params` is the buckets' whole bf16 working
   * copy. Either way (`master`) the parameters themselves are the fp32
   * shard the optimizer updates (tl_dp_buckets_shard_params) */
  const int64_t* param_offset;
  bool master;
  const int64_t* grad_offset;
  /* ZeRO 2 and 3: per graph value, a row's elements of a parameter whose
   * gradient the executors write in pieces (the tied embedding: dp/buckets.h's
   * piece_cols, trainer_pieces.c), and the rows a
   * piece the buckets cut (the executors' tl_exec_pieces.rows); NULL: none */
  int64_t *piece_cols, *piece_rows;
  /* of those, per value the rows a piece the trainer sets where several
   * stages hold it (the tied embedding over a pipeline: cut alike on each,
   * dp/buckets.h's piece_rows), else 0; NULL: none */
  int64_t* piece_cut;
  /* ZeRO-2: per value the rows a piece of a matrix that a stage's one node
   * writes in pieces, because staging it would cost what sharding saves
   * (dp/buckets.h's tl_dp_solo_pieces_pay), else 0; NULL: none. Late in
   * its stage's layout; merged into piece_cols and piece_cut */
  int64_t* solo_rows;
  int zero; /* parallel.zero */
  /* parallel.deterministic: the gradients as exact 64-bit fixed-point sums
   * (graph/exec.h grad_acc), laid out as grads */
  tl_buffer* grad_acc;
  int64_t loss_fixed;  /* the step's loss sum, in fixed point (deterministic mode) */
  tl_optim* optim;     /* AdamW's moments, the norm and clipping (optimizer.h) */
  tl_buffer* sp_pack;  /* sequence parallelism: the partial gradients, packed */
  int64_t param_bytes; /* what the allocator counted for the parameter buffer */
  int64_t state_bytes; /* and for the whole model state (tl_trainer_state_bytes) */
  tl_dp_buckets* buckets;
  /* data */
  tl_token_file train_file, val_file;
  tl_loader loader;
  int micro; /* sequences per micro-batch */
  int32_t *inputs, *targets;
  float* losses;
  int64_t step;
  /* observing */
  FILE* trace;
  double trace_origin;
  int trace_micro; /* the micro-batch the executor is running (tensor-parallel spans) */
  int trace_chunk; /* and its chunk */
  double wait_seconds;
  /* the most host bytes the last checkpoint save, load or export held */
  int64_t io_host_bytes;
};

static inline int tl__trainer_is_last_stage(const tl_trainer* t) {
  return t->pp_rank == t->pp_size - 1;
}

/* Whether chunk c of this rank is the model's first (it embeds the
 * tokens) or its last (the head and the loss). */
static inline int tl__trainer_first_chunk(const tl_trainer* t, int c) {
  return t->pp_rank == 0 && c == 0;
}
static inline int tl__trainer_last_chunk(const tl_trainer* t, int c) {
  return tl__trainer_is_last_stage(t) && c == t->n_chunks - 1;
}

/* Whether parameter value v is shared with another stage (the tied
 * embedding's copies). */
static inline int tl__trainer_shares(const tl_trainer* t, int v) {
  return t->sharing && tl_pp_stage_shares(t->sharing, v);
}

/* Part of a job of more than one rank. */
static inline int tl__trainer_in_job(const tl_trainer* t) {
  return t->comm.world && tl_group_size(t->comm.world) > 1;
}

/* trainer_pieces.c: stage s's ZeRO-3 units (the forward node each
 * begins at, n_units + 1 entries: its first node, each block's, its end;
 * TL_MODEL_MAX_LAYERS + 3 of room), their count; which of them read a
 * parameter written in pieces (t->piece_cols); and the pieces themselves:
 * piece_cols and piece_cut from the layouts of every stage. */
int tl__trainer_units(const tl_trainer* t, int s, int* units);
/* ZeRO-2 on the stage of forward nodes [begin, end) (one chunk, no late
 * parameter in late[]): marks late the matrices of its largest backward
 * node that go in pieces (tl_dp_solo_candidates, where
 * tl_dp_solo_pieces_pay), and their rows in t->solo_rows. */
tl_status tl__trainer_solo_pieces(tl_trainer* t, int begin, int end, bool* late);
void tl__trainer_unit_pieces(const tl_trainer* t, const int* units, int n_units, bool* out);
/* Per unit of this rank's stage, the first late parameter its nodes read
 * that ZeRO-3 may gather with it (dp/buckets.h's unit_late: one another
 * stage or another unit reads too, neither summed over tp nor in pieces),
 * where every unit that reads it names it, else -1. */
void tl__trainer_unit_late(const tl_trainer* t, const int* units, int n_units, int* out);
tl_status tl__trainer_pieces(tl_trainer* t);

/* The trace's clock, and a span from start_us to now (no-op untraced). */
double tl__trainer_now_us(void);
void tl__trainer_trace_span(tl_trainer* t, const char* name, int micro, double start_us);

/* Whether another rank counts (and writes) layout segment s: the tied
 * embedding's copy on the last stage, a tensor every tp rank holds whole
 * on tp ranks other than 0. */
int tl__trainer_counted_elsewhere(const tl_trainer* t, const tl_dp_segment* s);

/* The tensor of the model holding parameter value v of the graph. */
int tl__trainer_tensor_of(const tl_trainer* t, int v);

/* The stage's parameters (and AdamW moments) from the start state —
 * checkpoint.resume, model.init_from, else the RNG — and the loader at the
 * checkpoint's data position (trainer_state.c). */
tl_status tl__trainer_load_start(tl_trainer* t);

/* The fp32 master shard was written (a start state placed): the working
 * parameters made from it, collectively over the dp group; nothing
 * without a master shard (trainer_state.c). */
tl_status tl__trainer_params_placed(tl_trainer* t);

/* trainer_shards.c: a sharded checkpoint written (collective) and read
 * (this rank's pieces, and the step and data position), and the llm.c
 * model file and Hugging Face directory written by every rank's slices. */
tl_status tl__trainer_save_sharded(tl_trainer* t, const char* path);
tl_status tl__trainer_place_sharded(tl_trainer* t, const char* path, int64_t* position);
tl_status tl__trainer_export_parts(tl_trainer* t, const char* path);

#endif
