/* trainer.c — one optimizer step on one rank of a data x tensor x pipeline mesh. */
#include "launcher/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/timer.h"
#include "graph/op.h"
#include "launcher/trainer_impl.h"
#include "tp/tp.h"

float tl_lr_at(const struct tl_train_config* c, int64_t step) {
  if (c->warmup_steps > 0 && step < c->warmup_steps)
    return c->lr * (float)(step + 1) / (float)c->warmup_steps;
  if (c->lr_schedule == TL_LR_CONSTANT || c->steps <= c->warmup_steps) return c->lr;
  double ratio = (double)(step - c->warmup_steps) / (double)(c->steps - c->warmup_steps);
  if (ratio > 1.0) ratio = 1.0;
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return (float)(c->min_lr + coeff * (c->lr - c->min_lr));
}

static int is_last_stage(const tl_trainer* t) {
  return t->pp_rank == t->pp_size - 1;
}

/* ---- tracing ------------------------------------------------------------ */

static double now_us(void) {
  return (double)tl_time_ns() * 1e-3;
}

static void trace_span(tl_trainer* t, const char* name, int micro, double start_us) {
  if (!t->trace) return;
  double end = now_us();
  fprintf(t->trace,
          "{\"name\": \"%s %d\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.1f, \"dur\": %.1f, "
          "\"pid\": %d, \"tid\": 0, \"args\": {\"micro\": %d, \"step\": %lld}},\n",
          name, micro, name, start_us - t->trace_origin, end - start_us, t->world_rank, micro,
          (long long)t->step + 1);
}

/* A span per tensor-parallel collective inside a pass (the graph's tp_comm
 * nodes and the vocabulary-parallel loss, forward and backward), nested in
 * the micro-batch's forward or backward span. */
static void trace_node(void* user, const tl_node* n, int64_t start_ns, int64_t end_ns) {
  tl_trainer* t = user;
  if (!(tl_op_get(n->op)->flags & TL_OP_COLLECTIVE)) return;
  fprintf(t->trace,
          "{\"name\": \"%s\", \"cat\": \"tp\", \"ph\": \"X\", \"ts\": %.1f, \"dur\": %.1f, "
          "\"pid\": %d, \"tid\": 0, \"args\": {\"micro\": %d, \"step\": %lld}},\n",
          n->name, start_ns * 1e-3 - t->trace_origin, (end_ns - start_ns) * 1e-3, t->world_rank,
          t->trace_micro, (long long)t->step + 1);
}

void tl_trainer_trace(tl_trainer* t, FILE* f) {
  t->trace = f;
  t->trace_origin = now_us();
  for (int i = 0; t->tp_size > 1 && i < t->n_slots; i++)
    tl_exec_set_node_hook(t->slots[i].exec, f ? trace_node : NULL, t);
}

/* ---- set-up ------------------------------------------------------------- */

int tl__trainer_tensor_of(const tl_trainer* t, int v) {
  int64_t at = t->graph->values[v].offset;
  for (int k = 0; k < t->local.n_tensors; k++)
    if (at >= t->local.tensors[k].offset &&
        at < t->local.tensors[k].offset + t->local.tensors[k].numel)
      return k;
  TL_ASSERT(!"a parameter outside every tensor");
  return -1;
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
  int tp = cfg->mesh.tp, rows = tc->batch_size / dp / mb * tc->seq_len;
  if (tp > 1 && cfg->parallel.sequence_parallel && rows % tp != 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "parallel.sequence_parallel splits a micro-batch's %d token rows (micro-batch "
                   "%d x train.seq_len %d) over mesh.tp=%d ranks: it must divide them",
                   rows, tc->batch_size / dp / mb, tc->seq_len, tp);
  int world = t->comm.world ? tl_group_size(t->comm.world) : 1;
  if (cfg->mesh.dp * tp * cfg->mesh.pp != world)
    return TL_ERRF(TL_ERR_CONFIG, "mesh.dp * mesh.tp * mesh.pp = %d, but the job has %d rank%s",
                   cfg->mesh.dp * tp * cfg->mesh.pp, world, world == 1 ? "" : "s");
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
  if (t->dp_size != t->cfg.mesh.dp || t->pp_size != t->cfg.mesh.pp || t->tp_size != t->cfg.mesh.tp)
    return TL_ERRF(TL_ERR_INVALID,
                   "the job's groups (dp %d, tp %d, pp %d) do not match mesh.dp=%d, mesh.tp=%d, "
                   "mesh.pp=%d",
                   t->dp_size, t->tp_size, t->pp_size, t->cfg.mesh.dp, t->cfg.mesh.tp,
                   t->cfg.mesh.pp);
  if (!t->comm.world) return TL_OK;
  /* the tied embedding (this tensor-parallel rank's shard of it) lives on
   * the first and the last stage of each pipeline */
  int p = t->pp_size;
  int member = p > 1 && (t->pp_rank == 0 || t->pp_rank == p - 1);
  return tl_group_split(t->comm.world,
                        member ? t->dp_rank * t->tp_size + t->tp_rank : TL_GROUP_UNDEFINED,
                        t->pp_rank, "embedding", &t->embed);
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
  TL_CHECK_GOTO(tl_tp_model_init(&cfg->model, t->tp_size, t->tp_rank,
                                 cfg->parallel.sequence_parallel, &t->local),
                st, fail);
  tl_device dev = cfg->device.type == TL_DEVICE_CUDA
                      ? (t->comm.dp ? tl_group_device(t->comm.dp) : tl_cuda(0))
                      : tl_cpu();
  TL_CHECK_GOTO(tl_backend_create(dev, &t->be), st, fail);
  if (!cfg->data.train[0]) {
    st = TL_ERRF(TL_ERR_CONFIG, "data.train is required: the path of a token file");
    goto fail;
  }
  TL_CHECK_GOTO(tl_tokens_open(cfg->data.train, t->model.vocab, &t->train_file), st, fail);
  if (cfg->data.val[0])
    TL_CHECK_GOTO(tl_tokens_open(cfg->data.val, t->model.vocab, &t->val_file), st, fail);
  /* the graph of one micro-batch, cut into stages */
  TL_CHECK_GOTO(tl_model_build(&t->local, t->micro, tc->seq_len, true, &t->graph, &t->io), st,
                fail);
  t->stages = calloc((size_t)t->pp_size, sizeof(tl_pp_stage));
  if (!t->stages) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for stages");
    goto fail;
  }
  /* the config's cut when it gives one, else stages balanced by FLOPs */
  const int* cut = cfg->schedule.n_stage_layers > 0 ? cfg->schedule.stage_layers : NULL;
  TL_CHECK_GOTO(tl_pp_partition(t->graph, &t->io, t->pp_size, cut, t->stages), st, fail);
  t->me = &t->stages[t->pp_rank];
  t->layouts = calloc((size_t)t->pp_size, sizeof(tl_dp_layout));
  if (!t->layouts) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for stage layouts");
    goto fail;
  }
  for (int s = 0; s < t->pp_size; s++)
    TL_CHECK_GOTO(tl_dp_layout_build(t->graph, t->stages[s].node_begin, t->stages[s].node_end,
                                     &t->layouts[s]),
                  st, fail);
  t->lay = &t->layouts[t->pp_rank];
  TL_CHECK_GOTO(tl_pp_schedule_build(cfg->schedule.kind, t->pp_size, t->pp_rank,
                                     cfg->schedule.micro_batches, &t->sched),
                st, fail);
  /* buffers and one executor per micro-batch in flight */
  size_t bytes = sizeof(float) * (size_t)(t->lay->n > 0 ? t->lay->n : 1);
  int64_t live = tl_alloc_stats_get(dev).live_bytes;
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->params), st, fail);
  t->param_bytes = tl_alloc_stats_get(dev).live_bytes - live;
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->grads), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->adam_m), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->adam_v), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, sizeof(float), &t->scalar), st, fail);
  if (t->local.sp) {
    int64_t packed = 0;
    for (int i = 0; i < t->lay->n_segments; i++)
      if (t->local.tensors[tl__trainer_tensor_of(t, t->lay->segments[i].value)].shard ==
          TL_SHARD_REPLICATED)
        packed += t->lay->segments[i].n;
    TL_CHECK_GOTO(
        tl_buffer_create(dev, sizeof(float) * (size_t)(packed > 0 ? packed : 1), &t->sp_pack), st,
        fail);
  }
  t->n_slots = t->sched.max_in_flight;
  t->slots = calloc((size_t)t->n_slots, sizeof(struct slot));
  if (!t->slots) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for executors");
    goto fail;
  }
  struct tl_exec_options opt = {t->me->node_begin, t->me->node_end, t->lay->offset,
                                t->comm.tp};
  for (int i = 0; i < t->n_slots; i++)
    TL_CHECK_GOTO(tl_exec_create_ex(t->graph, t->be, t->params, t->grads, &opt, &t->slots[i].exec),
                  st, fail);
  if (t->comm.dp)
    TL_CHECK_GOTO(tl_dp_buckets_create(t->comm.dp, t->lay, (float*)t->grads->data,
                                       cfg->parallel.bucket_mb, &t->buckets),
                  st, fail);
  size_t n = (size_t)t->micro * (size_t)tc->seq_len;
  t->inputs = malloc(sizeof(int32_t) * n);
  t->targets = malloc(sizeof(int32_t) * n);
  t->losses = malloc(sizeof(float) * n);
  if (!t->inputs || !t->targets || !t->losses) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a batch");
    goto fail;
  }
  TL_CHECK_GOTO(tl__trainer_load_start(t), st, fail);
  if (t->tp_size > 1)
    TL_LOG_INFO("tensor-parallel rank %d of %d%s: %.2fM of the model's %.2fM parameters",
                t->tp_rank, t->tp_size, t->local.sp ? " (sequence parallel)" : "",
                t->local.n_params / 1e6, t->model.n_params / 1e6);
  if (t->pp_size > 1)
    TL_LOG_INFO("pipeline stage %d of %d: layers %d-%d (%d of %d), %.2fM parameters", t->pp_rank,
                t->pp_size, t->me->layer_begin, t->me->layer_end - 1,
                t->me->layer_end - t->me->layer_begin, t->io.n_layers, t->lay->n / 1e6);
  *out = t;
  return TL_OK;
fail:
  tl_trainer_destroy(t);
  return st;
}

void tl_trainer_destroy(tl_trainer* t) {
  if (!t) return;
  for (int i = 0; t->slots && i < t->n_slots; i++) {
    tl_group_wait_all(t->slots[i].n_sends, t->slots[i].sends);
    tl_exec_destroy(t->slots[i].exec);
  }
  free(t->slots);
  tl_dp_buckets_destroy(t->buckets);
  tl_group_destroy(t->embed);
  tl_pp_schedule_free(&t->sched);
  for (int s = 0; t->layouts && s < t->pp_size; s++) tl_dp_layout_free(&t->layouts[s]);
  free(t->layouts);
  free(t->stages);
  tl_graph_destroy(t->graph);
  tl_buffer_destroy(t->params);
  tl_buffer_destroy(t->grads);
  tl_buffer_destroy(t->adam_m);
  tl_buffer_destroy(t->adam_v);
  tl_buffer_destroy(t->scalar);
  tl_buffer_destroy(t->sp_pack);
  tl_tokens_close(&t->train_file);
  tl_tokens_close(&t->val_file);
  tl_backend_destroy(t->be);
  free(t->inputs);
  free(t->targets);
  free(t->losses);
  free(t);
}

/* ---- the pipeline ------------------------------------------------------- */

static int act_tag(int micro, int k) {
  return micro * 2 * TL_PP_MAX_BOUNDARY + k;
}
static int grad_tag(int micro, int k) {
  return act_tag(micro, k) + TL_PP_MAX_BOUNDARY;
}

static tl_status wait_sends(struct slot* s) {
  tl_status st = tl_group_wait_all(s->n_sends, s->sends);
  s->n_sends = 0;
  return st;
}

/* Sends or receives the boundary values[0..n) (or their gradients) of
 * micro-batch `micro` to or from pipeline neighbour `peer`. A value the
 * tensor-parallel group holds identically (tl_value.tp_replicated) travels
 * as this rank's 1/tp of it, and the receivers all-gather it over tp —
 * Megatron-LM's scatter/gather, which cuts the pipeline's bytes by tp. */
static tl_status exchange(tl_trainer* t, struct slot* s, const int* values, int n, int use_grad,
                          int send, int peer, int micro) {
  double t0 = now_us();
  if (send) TL_CHECK(t->be->ops->synchronize(t->be->ctx));
  for (int k = 0; k < n; k++) {
    const tl_value* fv = &t->graph->values[values[k]];
    int v = use_grad ? fv->grad : values[k];
    if (v < 0) continue; /* an activation without gradient (none in our models) */
    float* p = tl_exec_data(s->exec, v);
    size_t count = (size_t)tl_value_numel(&t->graph->values[v]), off = 0, len = count;
    const bool shard = t->tp_size > 1 && fv->tp_replicated;
    if (shard) tl_group_chunk(count, t->tp_size, t->tp_rank, &off, &len);
    int tag = use_grad ? grad_tag(micro, k) : act_tag(micro, k);
    if (send) {
      if (s->n_sends == MAX_SENDS) TL_CHECK(wait_sends(s));
      TL_CHECK(tl_group_send(t->comm.pp, p + off, len, TL_F32, peer, tag, &s->sends[s->n_sends++]));
    } else {
      TL_CHECK(tl_group_recv(t->comm.pp, p + off, len, TL_F32, peer, tag, NULL));
      if (shard) TL_CHECK(tl_group_all_gather(t->comm.tp, p + off, p, count, TL_F32, NULL));
    }
  }
  if (!send) t->wait_seconds += (now_us() - t0) * 1e-6;
  trace_span(t,
             send ? (use_grad ? "send_grad" : "send_act") : (use_grad ? "recv_grad" : "recv_act"),
             micro, t0);
  return TL_OK;
}

/* Sets micro-batch i's inputs (tokens on the first stage, targets on the last). */
static tl_status set_inputs(tl_trainer* t, tl_exec* x, const tl_loader* l, int seq0) {
  int n = t->micro * t->cfg.train.seq_len;
  tl_loader_get(l, seq0, t->micro, t->inputs, t->targets);
  if (t->pp_rank == 0)
    TL_CHECK(tl_exec_set_input(x, t->io.tokens, t->inputs, sizeof(int32_t) * (size_t)n));
  if (is_last_stage(t))
    TL_CHECK(tl_exec_set_input(x, t->io.targets, t->targets, sizeof(int32_t) * (size_t)n));
  return TL_OK;
}

static tl_status add_losses(tl_trainer* t, tl_exec* x, double* sum) {
  if (t->tp_rank != 0) return TL_OK; /* the tensor-parallel group agrees; rank 0 counts */
  int n = t->micro * t->cfg.train.seq_len;
  TL_CHECK(tl_exec_get(x, t->io.losses, t->losses, sizeof(float) * (size_t)n));
  for (int i = 0; i < n; i++) *sum += t->losses[i];
  return TL_OK;
}

static tl_status bucket_hook(void* user, int forward_node) {
  tl_trainer* t = user;
  return tl_dp_buckets_node_done(t->buckets, forward_node);
}

/* First sequence of micro-batch i of this replica within the global batch. */
static int first_seq(const tl_trainer* t, int i) {
  return t->dp_rank * (t->cfg.train.batch_size / t->dp_size) + i * t->micro;
}

static tl_status run_schedule(tl_trainer* t, double* loss_sum) {
  const tl_pp_stage* me = t->me;
  int m = t->cfg.schedule.micro_batches;
  float scale = 1.0f / ((float)t->cfg.train.batch_size * (float)t->cfg.train.seq_len);
  for (int k = 0; k < t->sched.n; k++) {
    tl_pp_instr in = t->sched.instr[k];
    struct slot* s = &t->slots[in.micro % t->n_slots];
    double t0 = now_us();
    switch (in.op) {
      case TL_PP_RECV_ACT:
        TL_CHECK(wait_sends(s)); /* the slot's memory is about to be written */
        TL_CHECK(exchange(t, s, me->recv, me->n_recv, 0, 0, t->pp_rank - 1, in.micro));
        break;
      case TL_PP_FORWARD:
        t->trace_micro = in.micro;
        TL_CHECK(wait_sends(s));
        TL_CHECK(set_inputs(t, s->exec, &t->loader, first_seq(t, in.micro)));
        TL_CHECK(tl_exec_forward(s->exec, me->node_begin, me->node_end));
        trace_span(t, "forward", in.micro, t0);
        break;
      case TL_PP_SEND_ACT:
        TL_CHECK(exchange(t, s, me->send, me->n_send, 0, 1, t->pp_rank + 1, in.micro));
        break;
      case TL_PP_RECV_GRAD:
        TL_CHECK(wait_sends(s));
        TL_CHECK(exchange(t, s, me->send, me->n_send, 1, 0, t->pp_rank + 1, in.micro));
        break;
      case TL_PP_BACKWARD: {
        t->trace_micro = in.micro;
        int last = in.micro == m - 1 && t->buckets && t->dp_size > 1;
        if (last) tl_exec_set_backward_hook(s->exec, bucket_hook, t);
        tl_status st = tl_exec_backward(s->exec, me->node_begin, me->node_end, scale);
        tl_exec_set_backward_hook(s->exec, NULL, NULL);
        TL_CHECK(st);
        if (is_last_stage(t)) TL_CHECK(add_losses(t, s->exec, loss_sum));
        trace_span(t, "backward", in.micro, t0);
        break;
      }
      case TL_PP_SEND_GRAD:
        TL_CHECK(exchange(t, s, me->recv, me->n_recv, 1, 1, t->pp_rank - 1, in.micro));
        break;
    }
  }
  for (int i = 0; i < t->n_slots; i++) TL_CHECK(wait_sends(&t->slots[i]));
  return TL_OK;
}

static tl_status read_scalar(tl_trainer* t, float* out) {
  TL_CHECK(t->be->ops->synchronize(t->be->ctx));
  return tl_memcpy(tl_cpu(), out, t->be->device, t->scalar->data, sizeof(float));
}

/* Sum of a float over a host group (every member gets it). */
static tl_status host_sum(tl_group* g, double* v) {
  if (!g || tl_group_size(g) == 1) return TL_OK;
  float x = (float)*v;
  TL_CHECK(tl_group_all_reduce(g, &x, &x, 1, TL_F32, TL_REDUCE_SUM, NULL));
  *v = x;
  return TL_OK;
}

/* Whether segment s is counted elsewhere in the global norm: the tied
 * embedding's copy on the last stage, and a tensor that every
 * tensor-parallel rank holds whole (rank 0 counts it). */
static int counted_elsewhere(const tl_trainer* t, const tl_dp_segment* s) {
  if (tl_pp_stage_shares(t->me, s->value) && t->pp_size > 1 && is_last_stage(t)) return 1;
  return t->tp_rank != 0 &&
         t->local.tensors[tl__trainer_tensor_of(t, s->value)].shard == TL_SHARD_REPLICATED;
}

/* Squared norm of the stage's gradients, each parameter counted once in
 * the job. */
static tl_status stage_sumsq(tl_trainer* t, double* out) {
  const struct tl_kernel_ops* ops = t->be->ops;
  float v = 0.0f;
  TL_CHECK(ops->sumsq(t->be->ctx, t->scalar->data, t->grads->data, t->lay->n));
  TL_CHECK(read_scalar(t, &v));
  double total = v;
  if ((t->pp_size > 1 && is_last_stage(t)) || t->tp_rank != 0)
    for (int i = 0; i < t->lay->n_segments; i++) {
      const tl_dp_segment* s = &t->lay->segments[i];
      if (!counted_elsewhere(t, s)) continue;
      TL_CHECK(ops->sumsq(t->be->ctx, t->scalar->data, (float*)t->grads->data + s->offset, s->n));
      TL_CHECK(read_scalar(t, &v));
      total -= v;
    }
  *out = total;
  return TL_OK;
}

static tl_status sync_tied(tl_trainer* t) {
  if (!t->embed) return TL_OK;
  double t0 = now_us();
  for (int i = 0; i < t->lay->n_segments; i++) {
    const tl_dp_segment* s = &t->lay->segments[i];
    if (!tl_pp_stage_shares(t->me, s->value)) continue;
    float* p = (float*)t->grads->data + s->offset;
    TL_CHECK(tl_group_all_reduce(t->embed, p, p, (size_t)s->n, TL_F32, TL_REDUCE_SUM, NULL));
  }
  trace_span(t, "tied_allreduce", 0, t0);
  return TL_OK;
}

/* Sequence parallelism: each tensor-parallel rank ran the LayerNorms on its
 * token rows only, so their gradients are parts of a sum over the group.
 * They are packed into one buffer for one all-reduce. */
static tl_status sync_sequence_parallel(tl_trainer* t) {
  if (!t->local.sp || t->tp_size == 1) return TL_OK;
  double t0 = now_us();
  tl_device dev = t->be->device;
  float* grads = t->grads->data;
  for (int pass = 0; pass < 2; pass++) {
    int64_t at = 0;
    for (int i = 0; i < t->lay->n_segments; i++) {
      const tl_dp_segment* s = &t->lay->segments[i];
      if (t->local.tensors[tl__trainer_tensor_of(t, s->value)].shard != TL_SHARD_REPLICATED)
        continue;
      float* pack = (float*)t->sp_pack->data + at;
      if (pass == 0)
        TL_CHECK(tl_memcpy(dev, pack, dev, grads + s->offset, sizeof(float) * (size_t)s->n));
      else
        TL_CHECK(tl_memcpy(dev, grads + s->offset, dev, pack, sizeof(float) * (size_t)s->n));
      at += s->n;
    }
    if (pass == 0 && at > 0) {
      TL_CHECK(t->be->ops->synchronize(t->be->ctx));
      TL_CHECK(tl_group_all_reduce(t->comm.tp, t->sp_pack->data, t->sp_pack->data, (size_t)at,
                                   TL_F32, TL_REDUCE_SUM, NULL));
    }
  }
  trace_span(t, "sp_allreduce", 0, t0);
  return TL_OK;
}

tl_status tl_trainer_step(tl_trainer* t, struct tl_step_stats* out) {
  const struct tl_train_config* tc = &t->cfg.train;
  const struct tl_kernel_ops* ops = t->be->ops;
  void* ctx = t->be->ctx;
  tl_timer timer;
  tl_timer_start(&timer);
  t->wait_seconds = 0;
  /* 1. gradients of the mean loss over the global batch */
  TL_CHECK(tl_memzero(t->be->device, t->grads->data, t->grads->bytes));
  double loss = 0.0;
  TL_CHECK(run_schedule(t, &loss));
  /* 2. replicas and the tied embedding */
  if (t->buckets) {
    double t0 = now_us();
    TL_CHECK(ops->synchronize(ctx));
    TL_CHECK(tl_dp_buckets_finish(t->buckets));
    trace_span(t, "dp_allreduce", 0, t0);
  }
  TL_CHECK(sync_tied(t));
  TL_CHECK(sync_sequence_parallel(t));
  /* 3. global norm over stages and shards, clipping */
  double sumsq = 0;
  TL_CHECK(stage_sumsq(t, &sumsq));
  TL_CHECK(host_sum(t->comm.host_tp, &sumsq));
  TL_CHECK(host_sum(t->comm.host_pp, &sumsq));
  float norm = (float)sqrt(sumsq > 0 ? sumsq : 0);
  if (!isfinite(norm))
    return TL_ERRF(TL_ERR_INTERNAL, "step %lld: the gradient norm is %f (the loss diverged)",
                   (long long)t->step + 1, norm);
  if (tc->grad_clip > 0.0f && norm > tc->grad_clip)
    TL_CHECK(ops->scale_forward(ctx, t->grads->data, t->grads->data, tc->grad_clip / (norm + 1e-6f),
                                t->lay->n));
  /* 4. AdamW per segment: decay on weight matrices only */
  float lr = tl_lr_at(tc, t->step);
  for (int i = 0; i < t->lay->n_segments; i++) {
    const tl_dp_segment* s = &t->lay->segments[i];
    int64_t o = s->offset;
    TL_CHECK(ops->adamw(
        ctx, (float*)t->params->data + o, (float*)t->grads->data + o, (float*)t->adam_m->data + o,
        (float*)t->adam_v->data + o, s->n, lr, tc->beta1, tc->beta2, tc->eps,
        t->model.tensors[tl__trainer_tensor_of(t, s->value)].decay ? tc->weight_decay : 0.0f,
        (int)(t->step + 1)));
  }
  TL_CHECK(ops->synchronize(ctx));
  /* the loss lives on the last stages: everyone learns it */
  TL_CHECK(host_sum(t->comm.world, &loss));
  tl_loader_advance(&t->loader);
  t->step++;
  out->step = t->step;
  out->loss = loss / ((double)tc->batch_size * tc->seq_len);
  out->lr = lr;
  out->grad_norm = norm;
  out->seconds = tl_timer_elapsed_s(&timer);
  out->bubble_seconds = t->wait_seconds;
  out->dp_buckets = t->buckets && t->dp_size > 1 ? tl_dp_buckets_count(t->buckets) : 0;
  out->dp_buckets_early = t->buckets && t->dp_size > 1 ? tl_dp_buckets_early(t->buckets) : 0;
  return TL_OK;
}

tl_status tl_trainer_eval(tl_trainer* t, double* loss) {
  if (!t->val_file.tokens)
    return TL_ERRF(TL_ERR_CONFIG, "validation needs data.val: the path of a token file");
  tl_loader l;
  TL_CHECK(tl_loader_init(&l, &t->val_file, t->cfg.train.batch_size, t->cfg.train.seq_len, 0));
  double sum = 0.0;
  int batches = t->cfg.train.val_batches > 0 ? t->cfg.train.val_batches : 1;
  struct slot* s = &t->slots[0];
  for (int b = 0; b < batches; b++) {
    for (int i = 0; i < t->cfg.schedule.micro_batches; i++) {
      TL_CHECK(wait_sends(s));
      if (t->pp_rank > 0)
        TL_CHECK(exchange(t, s, t->me->recv, t->me->n_recv, 0, 0, t->pp_rank - 1, i));
      TL_CHECK(set_inputs(t, s->exec, &l, first_seq(t, i)));
      t->trace_micro = i;
      TL_CHECK(tl_exec_forward(s->exec, t->me->node_begin, t->me->node_end));
      if (!is_last_stage(t))
        TL_CHECK(exchange(t, s, t->me->send, t->me->n_send, 0, 1, t->pp_rank + 1, i));
      else
        TL_CHECK(add_losses(t, s->exec, &sum));
    }
    tl_loader_advance(&l);
  }
  TL_CHECK(wait_sends(s));
  TL_CHECK(host_sum(t->comm.world, &sum));
  *loss = sum / ((double)batches * t->cfg.train.batch_size * t->cfg.train.seq_len);
  return TL_OK;
}

/* ---- small accessors ---------------------------------------------------- */

int64_t tl_trainer_steps_done(const tl_trainer* t) {
  return t->step;
}
const tl_model* tl_trainer_model(const tl_trainer* t) {
  return &t->model;
}
int tl_trainer_world_rank(const tl_trainer* t) {
  return t->world_rank;
}

int32_t tl_trainer_first_token(const tl_trainer* t) {
  const tl_token_file* f = t->val_file.tokens ? &t->val_file : &t->train_file;
  return f->n_tokens > 0 ? f->tokens[0] : 0;
}

double tl_trainer_step_flops(const tl_trainer* t) {
  return t->me->flops * t->cfg.schedule.micro_batches;
}

int64_t tl_trainer_peak_bytes(const tl_trainer* t) {
  return tl_alloc_stats_get(t->be->device).peak_bytes;
}

int64_t tl_trainer_param_bytes(const tl_trainer* t) {
  return t->param_bytes;
}

int64_t tl_trainer_activation_bytes(const tl_trainer* t) {
  int64_t b = 0;
  for (int i = 0; i < t->n_slots; i++) b += (int64_t)tl_exec_plan(t->slots[i].exec)->arena_bytes;
  return b;
}

void tl_trainer_stage(const tl_trainer* t, int* stage, int* n_stages, int* layer_begin,
                      int* layer_end) {
  *stage = t->pp_rank;
  *n_stages = t->pp_size;
  *layer_begin = t->me->layer_begin;
  *layer_end = t->me->layer_end;
}

void tl_trainer_profile(tl_trainer* t, int on) {
  for (int i = 0; i < t->n_slots; i++) tl_exec_profile(t->slots[i].exec, on);
}

double tl_trainer_op_seconds(const tl_trainer* t, int op) {
  double s = 0;
  for (int i = 0; i < t->n_slots; i++) s += tl_exec_op_seconds(t->slots[i].exec, op);
  return s;
}
