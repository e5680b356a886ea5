/* trainer.c — a trainer set up on one rank of a data x tensor x pipeline
 * mesh (its stage, layouts, buffers, optimizer, executors and groups),
 * taken down, and traced; trainer_step.c runs its steps. */
#include "launcher/train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/log.h"
#include "core/timer.h"
#include "graph/model.h"
#include "graph/op.h"
#include "launcher/train/trainer_impl.h"
#include "tp/cp.h"
#include "tp/tp.h"

/* ---- tracing ------------------------------------------------------------ */

double tl__trainer_now_us(void) {
  return (double)tl_time_ns() * 1e-3;
}

static void trace_span_to(tl_trainer* t, const char* name, int micro, double start_us, double end) {
  if (!t->trace) return;
  fprintf(t->trace,
          "{\"name\": \"%s %d\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.1f, \"dur\": %.1f, "
          "\"pid\": %d, \"tid\": 0, \"args\": {\"micro\": %d, \"chunk\": %d, \"step\": %lld}},\n",
          name, micro, name, start_us - t->trace_origin, end - start_us, t->world_rank, micro,
          t->trace_chunk, (long long)t->step + 1);
}

void tl__trainer_trace_span(tl_trainer* t, const char* name, int micro, double start_us) {
  if (t->trace) trace_span_to(t, name, micro, start_us, tl__trainer_now_us());
}

/* The pipeline's exchanges (pp/runtime.h's span hook). */
static void trace_exchange(void* user, const char* name, int micro, int chunk, int64_t start_ns,
                           int64_t end_ns) {
  tl_trainer* t = user;
  int was = t->trace_chunk;
  t->trace_chunk = chunk;
  trace_span_to(t, name, micro, start_ns * 1e-3, end_ns * 1e-3);
  t->trace_chunk = was;
}

/* One span inside a pass, in category `cat`. */
static void trace_inner(tl_trainer* t, const char* name, const char* cat, int64_t start_ns,
                        int64_t end_ns) {
  fprintf(t->trace,
          "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.1f, \"dur\": %.1f, "
          "\"pid\": %d, \"tid\": 0, \"args\": {\"micro\": %d, \"chunk\": %d, \"step\": %lld}},\n",
          name, cat, start_ns * 1e-3 - t->trace_origin, (end_ns - start_ns) * 1e-3, t->world_rank,
          t->trace_micro, t->trace_chunk, (long long)t->step + 1);
}

/* A span per collective inside a pass (the graph's tp_comm nodes and the
 * vocabulary-parallel loss, category "tp"; context parallelism's ring
 * attention, "cp"), forward and backward, nested in the micro-batch's
 * forward or backward span. */
static void trace_node(void* user, const tl_node* n, int64_t start_ns, int64_t end_ns) {
  tl_trainer* t = user;
  if (!(tl_op_get(n->op)->flags & TL_OP_COLLECTIVE)) return;
  trace_inner(t, n->name, tl_cp_attention_op(n->op) ? "cp" : "tp", start_ns, end_ns);
}

/* The ring's transfers inside its attention node (tp/cp_attention.c):
 * "ring kv" while a key/value block travels beside the attention, "ring
 * wait" what of it the attention did not cover, "ring dkv" the gradients'
 * hops after a block's backward; category "cp", named "<what> <node>". */
static void trace_ring(void* user, const tl_node* n, const char* what, int64_t start_ns,
                       int64_t end_ns) {
  tl_trainer* t = user;
  char name[160];
  snprintf(name, sizeof name, "%s %s", what, n->name);
  trace_inner(t, name, "cp", start_ns, end_ns);
}

void tl_trainer_trace(tl_trainer* t, FILE* f) {
  t->trace = f;
  t->trace_origin = tl__trainer_now_us();
  tl_pp_runtime_set_span_hook(t->rt, f ? trace_exchange : NULL, t);
  for (int i = 0; (t->tp_size > 1 || t->cp_size > 1) && i < tl_pp_runtime_n_slots(t->rt); i++) {
    tl_exec_set_node_hook(tl_pp_runtime_exec(t->rt, i), f ? trace_node : NULL, t);
    if (t->cp_size > 1)
      tl_exec_set_span_hook(tl_pp_runtime_exec(t->rt, i), f ? trace_ring : NULL, t);
  }
}

/* ---- set-up ------------------------------------------------------------- */

/* the executors' pieces of a gradient (graph/exec.h): the buckets' */
static tl_status piece_begin(void* user, int v, int64_t row0, int64_t rows, float** grad) {
  return tl_dp_buckets_piece_begin(user, v, row0, rows, grad);
}

static tl_status piece_end(void* user, int v, int64_t row0, int64_t rows) {
  return tl_dp_buckets_piece_end(user, v, row0, rows);
}

static tl_status piece_param(void* user, int v, int64_t row0, int64_t rows, const void** at) {
  return tl_dp_buckets_piece_param(user, v, row0, rows, at);
}

/* Before every node of a pass: the pipeline's sends in flight pushed along,
 * and under ZeRO-3 the node's unit gathered. */
static tl_status pass_hook(void* user, int forward_node, bool backward) {
  tl_trainer* t = user;
  if (t->pp_size > 1) TL_CHECK(tl_pp_runtime_progress(t->rt));
  return t->zero == 3 ? tl_dp_buckets_before_node(t->buckets, forward_node, backward) : TL_OK;
}

int tl__trainer_tensor_of(const tl_trainer* t, int v) {
  const struct tl_tp_param* p = tl_tp_param_of(&t->shard, v);
  int k = p ? tl_model_tensor_at(&t->model, p->full_offset) : -1;
  TL_ASSERT(k >= 0);
  return k;
}

/* Whether segment s is counted elsewhere in the global norm: the tied
 * embedding's copy on the last stage, and a tensor that every
 * tensor-parallel rank holds whole (rank 0 counts it). */
int tl__trainer_counted_elsewhere(const tl_trainer* t, const tl_dp_segment* s) {
  if (tl__trainer_shares(t, s->value) && t->pp_size > 1 && tl__trainer_is_last_stage(t)) return 1;
  return !tl_tp_counts(&t->shard, s->value);
}

/* Stage s's flat buffers. With ZeRO the parameters whose gradients need a
 * sum over another group before the sharded reduction (the tied embedding
 * over the pipeline, sequence parallelism's partial LayerNorms over the
 * tensor-parallel group) go to the back, reduced last; ZeRO 2 and 3 send
 * there too the ones several nodes write (a tied embedding on one stage)
 * and, on a stage with none of those, the matrices of its largest node
 * where writing them in pieces holds less (tl__trainer_solo_pieces).
 * Some of the others are then written in pieces too (trainer_pieces.c). */
static tl_status build_layout(tl_trainer* t, int s) {
  int begin[TL_PP_MAX_CHUNKS], end[TL_PP_MAX_CHUNKS];
  for (int c = 0; c < t->n_chunks; c++) {
    const tl_pp_stage* x = &t->stages[c * t->pp_size + s];
    begin[c] = x->node_begin, end[c] = x->node_end;
  }
  if (t->zero == 0)
    return tl_dp_layout_build_ranges(t->graph, t->n_chunks, begin, end, NULL, &t->layouts[s]);
  bool* late = calloc((size_t)t->graph->n_values, sizeof(bool));
  if (!late) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a stage layout");
  for (int v = 0; v < t->graph->n_values; v++) {
    if (t->graph->values[v].role != TL_ROLE_PARAM) continue;
    const struct tl_tp_param* p = tl_tp_param_of(&t->shard, v);
    int readers = 0, shared = 0;
    for (int c = 0; c < t->n_chunks; c++) {
      readers += tl_dp_readers(t->graph, begin[c], end[c], v);
      shared |= tl_pp_stage_shares(&t->stages[c * t->pp_size + s], v);
    }
    const bool summed = shared || (p && p->partial && t->tp_size > 1);
    late[v] = summed || (t->zero >= 2 && readers > 1);
  }
  tl_status r = t->n_chunks == 1 ? tl__trainer_solo_pieces(t, begin[0], end[0], late) : TL_OK;
  if (r == TL_OK)
    r = tl_dp_layout_build_ranges(t->graph, t->n_chunks, begin, end, late, &t->layouts[s]);
  free(late);
  return r;
}

/* The optimizer over what this rank updates: a segment per parameter, or
 * per piece of the ZeRO shard (dp/buckets.h), each counted in the global
 * norm on one rank only (the last stage leaves the tied embedding to the
 * first, tp ranks other than 0 leave the tensors every rank holds whole; the
 * shards of a dp group are disjoint). */
/* The parameters some backward node of this rank's chunks writes the
 * gradient of (t->grads_written), and the executors' marks (grads_fresh). */
static tl_status written_grads(tl_trainer* t) {
  const tl_graph* g = t->graph;
  t->grads_written = calloc((size_t)g->n_values, sizeof(bool));
  t->grads_fresh = calloc((size_t)g->n_values, sizeof(bool));
  if (!t->grads_written || !t->grads_fresh)
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
  for (int i = g->n_forward; i < g->n_nodes; i++) {
    const tl_node* n = &g->nodes[i];
    bool mine = false;
    for (int c = 0; c < t->n_chunks; c++)
      mine = mine ||
             (n->forward_of >= t->chunks[c].node_begin && n->forward_of < t->chunks[c].node_end);
    for (int k = 0; mine && k < n->n_out; k++)
      if (n->out[k] >= 0 && g->values[n->out[k]].role == TL_ROLE_PARAM_GRAD)
        t->grads_written[g->values[n->out[k]].grad_of] = true;
  }
  return TL_OK;
}

static tl_status create_optimizer(tl_trainer* t) {
  const tl_dp_layout* l = t->lay;
  int n = t->buckets ? tl_dp_buckets_pieces(t->buckets, NULL) : l->n_segments;
  struct tl_dp_piece* pieces = malloc(sizeof *pieces * (size_t)(n > 0 ? n : 1));
  struct tl_optim_segment* segs = malloc(sizeof *segs * (size_t)(n > 0 ? n : 1));
  if (!pieces || !segs) {
    free(pieces);
    free(segs);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
  }
  if (t->buckets)
    tl_dp_buckets_pieces(t->buckets, pieces);
  else
    for (int i = 0; i < n; i++)
      pieces[i] =
          (struct tl_dp_piece){i, l->segments[i].offset, l->segments[i].n, l->segments[i].offset};
  for (int i = 0; i < n; i++) {
    const tl_dp_segment* s = &l->segments[pieces[i].segment];
    segs[i] = (struct tl_optim_segment){
        .offset = t->master ? pieces[i].at : pieces[i].offset,
        .grad_at = t->zero >= 2 ? pieces[i].at : pieces[i].offset,
        .state_at = pieces[i].at,
        .n = pieces[i].n,
        .decay = t->model.tensors[tl__trainer_tensor_of(t, s->value)].decay,
        .counted = !tl__trainer_counted_elsewhere(t, s),
    };
  }
  float* grads = t->zero >= 2 ? tl_dp_buckets_shard_grads(t->buckets) : (float*)t->grads->data;
  int64_t grad_n = t->zero >= 2 ? tl_dp_buckets_shard_n(t->buckets) : l->n;
  int64_t state_n = t->buckets ? tl_dp_buckets_shard_n(t->buckets) : l->n;
  tl_buffer* params = t->master ? tl_dp_buckets_shard_params(t->buckets) : t->params;
  tl_status st =
      tl_optim_create(t->be, &t->cfg.train, params, grads, grad_n, segs, n, state_n, &t->optim);
  free(pieces);
  free(segs);
  return st;
}

static tl_status check_sizes(const tl_trainer* t) {
  const struct tl_config* cfg = &t->cfg;
  const struct tl_train_config* tc = &cfg->train;
  int mb = cfg->schedule.micro_batches, dp = cfg->mesh.dp;
  if (tc->batch_size < 1 || tc->seq_len < 1)
    return TL_ERRF(TL_ERR_CONFIG, "train.batch_size=%d and train.seq_len=%d must be >= 1",
                   tc->batch_size, tc->seq_len);
  if (dp < 1 || tc->batch_size % dp != 0)
    return TL_ERRF(TL_ERR_CONFIG, "mesh.dp=%d does not divide train.batch_size=%d", dp,
                   tc->batch_size);
  if (mb < 1 || (tc->batch_size / dp) % mb != 0)
    return TL_ERRF(
        TL_ERR_CONFIG,
        "schedule.micro_batches=%d does not divide the replica batch %d (train.batch_size "
        "/ mesh.dp)",
        mb, tc->batch_size / dp);
  int tp = cfg->mesh.tp, rows = tc->batch_size / dp / mb * (tc->seq_len / cfg->mesh.cp);
  if (tp > 1 && cfg->parallel.sequence_parallel && rows % tp != 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "parallel.sequence_parallel splits a micro-batch's %d token rows (micro-batch "
                   "%d x train.seq_len %d / mesh.cp %d) over mesh.tp=%d ranks: it must divide them",
                   rows, tc->batch_size / dp / mb, tc->seq_len, cfg->mesh.cp, tp);
  if (cfg->mesh.cp > 1 && tc->seq_len % (2 * cfg->mesh.cp) != 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "mesh.cp=%d cuts each sequence in %d chunks: it must divide train.seq_len=%d",
                   cfg->mesh.cp, 2 * cfg->mesh.cp, tc->seq_len);
  int world = t->comm.world ? tl_group_size(t->comm.world) : 1;
  if (tl_config_ranks(&cfg->mesh) != world)
    return TL_ERRF(TL_ERR_CONFIG,
                   "mesh.dp * mesh.tp * mesh.pp * mesh.cp = %lld, but the job has %d rank%s",
                   tl_config_ranks(&cfg->mesh), world, world == 1 ? "" : "s");
  return TL_OK;
}

static tl_status setup_comm(tl_trainer* t) {
  t->world_rank = t->comm.world ? tl_group_rank(t->comm.world) : 0;
  t->dp_size = t->comm.dp ? tl_group_size(t->comm.dp) : 1;
  t->dp_rank = t->comm.dp ? tl_group_rank(t->comm.dp) : 0;
  t->pp_size = t->comm.pp ? tl_group_size(t->comm.pp) : 1;
  t->pp_rank = t->comm.pp ? tl_group_rank(t->comm.pp) : 0;
  t->tp_size = t->comm.tp ? tl_group_size(t->comm.tp) : 1;
  t->tp_rank = t->comm.tp ? tl_group_rank(t->comm.tp) : 0;
  t->cp_size = t->comm.cp ? tl_group_size(t->comm.cp) : 1;
  t->cp_rank = t->comm.cp ? tl_group_rank(t->comm.cp) : 0;
  const struct tl_mesh_config* m = &t->cfg.mesh;
  if (t->dp_size != m->dp * m->cp || t->pp_size != m->pp || t->tp_size != m->tp ||
      t->cp_size != m->cp)
    return TL_ERRF(TL_ERR_INVALID,
                   "the job's groups (data %d, tp %d, pp %d, cp %d) do not match mesh.dp=%d x "
                   "mesh.cp=%d, mesh.tp=%d, mesh.pp=%d, mesh.cp=%d",
                   t->dp_size, t->tp_size, t->pp_size, t->cp_size, m->dp, m->cp, m->tp, m->pp,
                   m->cp);
  t->seq = t->cfg.train.seq_len / t->cp_size;
  return TL_OK;
}

tl_status tl_trainer_create(const struct tl_config* cfg, const struct tl_trainer_comm* comm,
                            tl_trainer** out) {
  *out = NULL;
  tl_trainer* t = calloc(1, sizeof *t);
  if (!t) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
  t->cfg = *cfg;
  if (comm) t->comm = *comm;
  tl_status st = TL_OK;
  const struct tl_train_config* tc = &cfg->train;
  TL_CHECK_GOTO(check_sizes(t), st, fail);
  TL_CHECK_GOTO(setup_comm(t), st, fail);
  t->micro = tc->batch_size / cfg->mesh.dp / cfg->schedule.micro_batches;
  TL_CHECK_GOTO(tl_model_init(&cfg->model, &t->model), st, fail);

  tl_device dev = cfg->device.type == TL_DEVICE_CUDA
                      ? (t->comm.dp ? tl_group_device(t->comm.dp) : tl_cuda(0))
                      : tl_cpu();
  st = tl_backend_create(dev, &t->be);
  if (st != TL_OK && dev.type == TL_DEVICE_CUDA) { /* said as the config's field */
    char why[512];
    snprintf(why, sizeof why, "%s", tl_last_error_message());
    st = TL_ERRF(st, "device.type is \"cuda\" but %s", why);
  }
  if (st != TL_OK) goto fail;
  if (!cfg->data.train[0]) {
    st = TL_ERRF(TL_ERR_CONFIG, "data.train is required: the path of a token file");
    goto fail;
  }
  TL_CHECK_GOTO(tl_tokens_open(cfg->data.train, t->model.vocab, &t->train_file), st, fail);
  if (cfg->data.val[0])
    TL_CHECK_GOTO(tl_tokens_open(cfg->data.val, t->model.vocab, &t->val_file), st, fail);
  /* the graph of one micro-batch, cut into stages */
  TL_CHECK_GOTO(tl_tp_build(&t->model, t->micro, t->seq, t->tp_size, t->tp_rank,
                            cfg->parallel.sequence_parallel, t->cp_size, t->cp_rank,
                            cfg->parallel.recompute, cfg->schedule.kind == TL_SCHEDULE_ZERO_BUBBLE,
                            &t->graph, &t->io, &t->shard, &t->full),
                st, fail);
  /* mixed precision: bf16 storage, fp32 arithmetic (the last rewrite) */
  if (cfg->train.precision == TL_PRECISION_BF16)
    TL_CHECK_GOTO(tl_graph_set_precision(t->graph, TL_BF16), st, fail);
  /* the model cut into pp_size * n_chunks virtual stages: the config's
   * cut when it gives one, else balanced by FLOPs; chunk c of this rank is
   * virtual stage c * pp_size + pp_rank */
  t->n_chunks = cfg->schedule.kind == TL_SCHEDULE_INTERLEAVED ? cfg->schedule.virtual_stages : 1;
  if (t->n_chunks < 1 || t->n_chunks > TL_PP_MAX_CHUNKS ||
      (t->n_chunks > 1 && cfg->parallel.zero >= 2)) {
    st = TL_ERRF(TL_ERR_CONFIG,
                 "schedule.virtual_stages = %d with parallel.zero = %d: expected 1 to %d chunks, "
                 "with ZeRO 0 or 1",
                 cfg->schedule.virtual_stages, cfg->parallel.zero, TL_PP_MAX_CHUNKS);
    goto fail;
  }
  const int n_virtual = t->pp_size * t->n_chunks;
  t->stages = calloc((size_t)n_virtual, sizeof(tl_pp_stage));
  if (!t->stages) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for stages");
    goto fail;
  }
  const int* cut = cfg->schedule.n_stage_layers > 0 ? cfg->schedule.stage_layers : NULL;
  TL_CHECK_GOTO(tl_pp_partition(t->graph, &t->io, n_virtual, cut, t->stages), st, fail);
  for (int c = 0; c < t->n_chunks; c++) {
    t->chunks[c] = t->stages[c * t->pp_size + t->pp_rank];
    if (t->chunks[c].n_shared > 0 && !t->sharing) t->sharing = &t->chunks[c];
  }
  t->me = &t->chunks[0];
  t->layouts = calloc((size_t)t->pp_size, sizeof(tl_dp_layout));
  if (!t->layouts) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for stage layouts");
    goto fail;
  }
  t->zero = cfg->parallel.zero;
  for (int s = 0; s < t->pp_size; s++) TL_CHECK_GOTO(build_layout(t, s), st, fail);
  t->lay = &t->layouts[t->pp_rank];
  TL_CHECK_GOTO(tl__trainer_pieces(t), st, fail);
  /* zero-bubble's lists follow a block's passes' FLOPs, which every rank
   * (tp shards split a block's matmuls evenly) and the planner count alike;
   * the job takes the largest of each, so that no two ranks can build
   * different lists (and wait for each other's collectives for ever) */
  t->costs = tl_pp_costs_of(t->graph, t->io.layer_begin[0], t->io.layer_begin[1]);
  if (cfg->schedule.kind == TL_SCHEDULE_ZERO_BUBBLE && tl__trainer_in_job(t)) {
    int32_t c[3] = {t->costs.forward, t->costs.backward, t->costs.weight};
    TL_CHECK_GOTO(tl_group_all_reduce(t->comm.world, c, c, 3, TL_I32, TL_REDUCE_MAX, NULL), st,
                  fail);
    t->costs = (struct tl_pp_costs){c[0], c[1], c[2]};
  }
  TL_CHECK_GOTO(
      tl_pp_schedule_build_costs(cfg->schedule.kind, t->pp_size, t->pp_rank,
                                 cfg->schedule.micro_batches, t->n_chunks, &t->costs, &t->sched),
      st, fail);
  /* buffers and one executor per micro-batch in flight */
  size_t bytes = sizeof(float) * (size_t)(t->lay->n > 0 ? t->lay->n : 1);
  int64_t live = tl_alloc_stats_get(dev).live_bytes;
  /* the fp32 parameters: the stage's whole, or the buckets' master shard
   * (ZeRO-3; ZeRO 1 and 2 under bf16 training, Megatron-LM's distributed
   * optimizer: bf16 working parameters, the fp32 master sharded with the
   * moments) */
  t->master =
      t->zero == 3 || (t->zero > 0 && cfg->train.precision == TL_PRECISION_BF16 && t->dp_size > 1);
  if (!t->master) {
    TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->params), st, fail);
    t->params_owned = true;
  }
  t->param_bytes = tl_alloc_stats_get(dev).live_bytes - live;
  if (t->zero < 2) {
    TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->grads), st, fail);
    t->grads_owned = true;
    /* zero once: a step's first backward node to write each gradient
     * writes it (grads_fresh), and what none writes stays zero */
    TL_CHECK_GOTO(tl_memzero(dev, t->grads->data, t->grads->bytes), st, fail);
  }
  /* ZeRO 2-3 alike, into the buckets' staging (staging_written) */
  TL_CHECK_GOTO(written_grads(t), st, fail);
  /* the data-parallel reduction: whole (zero 0, only in a job with a dp
   * group), or sharded over the group (zero 1, 2; a group of one shards
   * nothing but runs the same code); none in the deterministic mode, which
   * sums its fixed point at the end */
  if (!cfg->parallel.deterministic && (t->zero > 0 || t->comm.dp)) {
    /* ZeRO-3's units: the embedding, each block, the head, as this stage
     * holds them */
    int units[TL_MODEL_MAX_LAYERS + 3];
    const int n_units = tl__trainer_units(t, t->pp_rank, units);
    /* the units whose nodes read a parameter written in pieces */
    bool unit_pieces[TL_MODEL_MAX_LAYERS + 3];
    tl__trainer_unit_pieces(t, units, n_units, unit_pieces);
    /* ZeRO-3: the late parameter each unit reads (the tied embedding),
     * gathered with it where it fits */
    int unit_late[TL_MODEL_MAX_LAYERS + 3];
    tl__trainer_unit_late(t, units, n_units, unit_late);
    struct tl_dp_buckets_config bc = {
        .dp = t->comm.dp,
        .layout = t->lay,
        .bucket_mb = cfg->parallel.bucket_mb,
        .zero = t->zero,
        .be = t->be,
        .grads = t->grads ? (float*)t->grads->data : NULL,
        .staging_written = true,
        .n_units = n_units,
        .unit_begin = units,
        .wire = cfg->parallel.grad_reduce == TL_PRECISION_BF16 ? TL_BF16 : TL_F32,
        .params = cfg->train.precision == TL_PRECISION_BF16 ? TL_BF16 : TL_F32,
        .piece_cols = t->piece_cols,
        .unit_pieces = unit_pieces,
        .unit_late = t->zero == 3 ? unit_late : NULL,
        .piece_rows = t->piece_cut,
    };
    TL_CHECK_GOTO(tl_dp_buckets_create(&bc, &t->buckets), st, fail);
    if (t->piece_cols) {
      t->piece_rows = calloc((size_t)t->graph->n_values, sizeof(int64_t));
      if (!t->piece_rows) {
        st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
        goto fail;
      }
      for (int v = 0; v < t->graph->n_values; v++)
        t->piece_rows[v] = tl_dp_buckets_piece_rows(t->buckets, v);
    }
    if (t->zero >= 2) {
      t->grads = tl_dp_buckets_grad_buffer(t->buckets);
      t->grad_offset = tl_dp_buckets_grad_offset(t->buckets);
    }
    if (t->master) {
      t->params = tl_dp_buckets_param_buffer(t->buckets);
      t->param_offset = tl_dp_buckets_param_offset(t->buckets);
    }
  }
  if (!t->params) {
    st = TL_ERRF(TL_ERR_INTERNAL, "ZeRO-%d without the buckets that hold its parameters", t->zero);
    goto fail;
  }
  if (t->master) /* the parameters: the working copy (ZeRO-3's unit slots) and the master shard */
    t->param_bytes = (int64_t)(t->params->bytes + tl_dp_buckets_shard_params(t->buckets)->bytes);
  if (cfg->parallel.deterministic) {
    if (t->tp_size > 1 || !t->be->ops->fixed_add) {
      st = TL_ERRF(TL_ERR_CONFIG,
                   "parallel.deterministic covers data and pipeline parallelism on the CPU "
                   "backend (mesh.tp = %d, backend %s)",
                   t->tp_size, t->be->ops->name);
      goto fail;
    }
    TL_CHECK_GOTO(tl_buffer_create(dev, 2 * bytes, &t->grad_acc), st, fail);
  }
  TL_CHECK_GOTO(create_optimizer(t), st, fail);
  /* the model state: parameters, gradients, AdamW's moments and the
   * buckets' buffers (not the deterministic mode's fixed-point sums) */
  t->state_bytes =
      tl_alloc_stats_get(dev).live_bytes - live - (t->grad_acc ? (int64_t)t->grad_acc->bytes : 0);
  if (t->shard.sp) {
    int64_t packed = tl_tp_partial_elems(&t->shard, t->lay->offset);
    TL_CHECK_GOTO(
        tl_buffer_create(dev, sizeof(float) * (size_t)(packed > 0 ? packed : 1), &t->sp_pack), st,
        fail);
  }
  /* the pipeline: one executor per micro-batch in flight, the exchanges
   * (a boundary value the tp group holds alike goes as 1/tp each), and the
   * stages sharing the tied embedding */
  t->scatter = calloc((size_t)t->graph->n_values, sizeof(bool));
  if (!t->scatter) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
    goto fail;
  }
  for (int v = 0; v < t->graph->n_values; v++) t->scatter[v] = tl_tp_value_whole(&t->shard, v);
  struct tl_pp_runtime_config rc = {
      .g = t->graph,
      .stage = t->me,
      .pp = t->comm.pp,
      .scatter = t->comm.tp,
      .scatter_value = t->scatter,
      .be = t->be,
      .params = t->params,
      .grads = t->grads,
      .exec = {.grads_fresh = t->grads_fresh,
               .begin = t->me->node_begin,
               .end = t->me->node_end,
               .param_offset = t->param_offset ? t->param_offset : t->lay->offset,
               .grad_offset = t->grad_offset,
               .group = t->comm.tp,
               .ring = t->comm.cp,
               .grad_acc = t->grad_acc ? (int64_t*)t->grad_acc->data : NULL,
               /* the buckets' working parameters (ZeRO-3's units, bf16 ZeRO 1-2's
                * stage): bf16 under bf16 training */
               .params_dtype = t->master ? tl_dp_buckets_param_dtype(t->buckets) : TL_F32,
               .pieces = {.rows = t->piece_rows,
                          .begin = piece_begin,
                          .end = piece_end,
                          /* ZeRO-3: the parameter too, a piece at a time */
                          .param = t->zero == 3 && tl_dp_buckets_piece_params(t->buckets)
                                       ? piece_param
                                       : NULL,
                          .user = t->buckets}},
      .n_slots = t->sched.max_in_flight,
      .n_chunks = t->n_chunks,
      .chunks = t->chunks,
      .chunk_slots = t->sched.chunk_in_flight,
  };
  TL_CHECK_GOTO(tl_pp_runtime_create(&rc, &t->rt), st, fail);
  TL_CHECK_GOTO(tl_pp_shared_group(t->comm.pp, t->sharing ? t->sharing : t->me, &t->shared), st,
                fail);
  if (t->zero == 3 || t->pp_size > 1)
    for (int i = 0; i < tl_pp_runtime_n_slots(t->rt); i++)
      tl_exec_set_pre_hook(tl_pp_runtime_exec(t->rt, i), pass_hook, t);
  size_t n = (size_t)t->micro * (size_t)tc->seq_len;
  t->inputs = malloc(sizeof(int32_t) * n);
  t->targets = malloc(sizeof(int32_t) * n);
  t->losses = malloc(sizeof(float) * n);
  if (!t->inputs || !t->targets || !t->losses) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a batch");
    goto fail;
  }
  TL_CHECK_GOTO(tl__trainer_load_start(t), st, fail);
  if (tl_env()->fault != TL_FAULT_NONE && tl__trainer_in_job(t))
    TL_LOG_WARN("TRELLIS_FAULT=%s: this run has a deliberate bug (for testing --verify)",
                tl_fault_name(tl_env()->fault));
  if (t->tp_size > 1)
    TL_LOG_INFO("tensor-parallel rank %d of %d%s: %.2fM of the model's %.2fM parameters",
                t->tp_rank, t->tp_size, t->shard.sp ? " (sequence parallel)" : "",
                t->shard.n_local / 1e6, t->model.n_params / 1e6);
  const int data_size = t->comm.dp ? tl_group_size(t->comm.dp) : 1; /* dp x cp */
  if (t->zero > 0 && data_size > 1)
    TL_LOG_INFO("ZeRO-%d: %s rank %d of %d updates %.2fM of its stage's %.2fM parameters%s",
                t->zero, t->cp_size > 1 ? "data-group (dp x cp)" : "data-parallel",
                tl_group_rank(t->comm.dp), data_size, tl_dp_buckets_shard_n(t->buckets) / 1e6,
                t->lay->n / 1e6,
                t->zero == 3   ? ", holding only their parameters and gradients"
                : t->zero == 2 ? " and holds only their gradients"
                               : "");
  if (t->pp_size > 1) {
    char layers[256] = "";
    int held = 0;
    for (int c = 0, at = 0; c < t->n_chunks && at < (int)sizeof layers; c++) {
      const tl_pp_stage* x = &t->chunks[c];
      at += snprintf(layers + at, sizeof layers - (size_t)at, "%s%d-%d", c ? ", " : "",
                     x->layer_begin, x->layer_end - 1);
      held += x->layer_end - x->layer_begin;
    }
    TL_LOG_INFO("pipeline stage %d of %d: layers %s (%d of %d%s), %.2fM parameters", t->pp_rank,
                t->pp_size, layers, held, t->io.n_layers, t->n_chunks > 1 ? ", interleaved" : "",
                t->lay->n / 1e6);
  }
  *out = t;
  return TL_OK;
fail:
  tl_trainer_destroy(t);
  return st;
}

void tl_trainer_destroy(tl_trainer* t) {
  if (!t) return;
  tl_pp_runtime_destroy(t->rt);
  free(t->scatter);
  free(t->grads_fresh);
  free(t->grads_written);
  free(t->piece_cols);
  free(t->piece_rows);
  free(t->piece_cut);
  free(t->solo_rows);
  tl_dp_buckets_destroy(t->buckets);
  tl_group_destroy(t->shared);
  tl_pp_schedule_free(&t->sched);
  for (int s = 0; t->layouts && s < t->pp_size; s++) tl_dp_layout_free(&t->layouts[s]);
  free(t->layouts);
  free(t->stages);
  tl_graph_destroy(t->graph);
  tl_graph_destroy(t->full);
  tl_tp_shard_free(&t->shard);
  if (t->params_owned) tl_buffer_destroy(t->params);
  if (t->grads_owned) tl_buffer_destroy(t->grads);
  tl_buffer_destroy(t->grad_acc);
  tl_optim_destroy(t->optim);
  tl_buffer_destroy(t->sp_pack);
  tl_tokens_close(&t->train_file);
  tl_tokens_close(&t->val_file);
  tl_backend_destroy(t->be);
  free(t->inputs);
  free(t->targets);
  free(t->losses);
  free(t);
}
