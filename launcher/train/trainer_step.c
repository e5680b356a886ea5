/* trainer_step.c — one optimizer step on one rank: the stage's schedule
 * walked (forwards, backwards, weight passes, the exchanges between them),
 * the gradient sums over the mesh's groups, the norm and clipping, the
 * update; and the validation loss. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/env.h"
#include "core/log.h"
#include "core/timer.h"
#include "launcher/train/trainer_impl.h"
#include "tp/cp.h"
#include "tp/tp.h"

/* ---- the pipeline ------------------------------------------------------- */

/* Sets micro-batch i's inputs for chunk c (tokens on the model's first
 * chunk, targets on its last). */
static tl_status set_inputs(tl_trainer* t, tl_exec* x, int c, const tl_loader* l, int seq0) {
  int n = t->micro * t->seq;
  const bool first = tl__trainer_first_chunk(t, c), last = tl__trainer_last_chunk(t, c);
  if (!first && !last) return TL_OK;
  tl_loader_get(l, seq0, t->micro, t->inputs, t->targets);
  if (t->cp_size > 1) { /* the two chunks of each sequence this rank holds (tp/cp.h) */
    tl_cp_local_tokens(t->inputs, t->micro, t->seq, t->cp_size, t->cp_rank);
    tl_cp_local_tokens(t->targets, t->micro, t->seq, t->cp_size, t->cp_rank);
  }
  if (first) TL_CHECK(tl_exec_set_input(x, t->io.tokens, t->inputs, sizeof(int32_t) * (size_t)n));
  if (last) TL_CHECK(tl_exec_set_input(x, t->io.targets, t->targets, sizeof(int32_t) * (size_t)n));
  return TL_OK;
}

/* The micro-batch's token losses into *sum, or into *fixed (units of
 * 2^-32: the deterministic mode's exact sum) when fixed is given. */
static tl_status add_losses(tl_trainer* t, tl_exec* x, double* sum, int64_t* fixed) {
  if (t->tp_rank != 0) return TL_OK; /* the tensor-parallel group agrees; rank 0 counts */
  int n = t->micro * t->seq;
  TL_CHECK(tl_exec_get(x, t->io.losses, t->losses, sizeof(float) * (size_t)n));
  if (fixed) {
    for (int i = 0; i < n; i++) {
      float l = t->losses[i];
      /* NaN too (llrint of it is undefined), and a sum past int64 */
      if (!(fabsf(l) < 1048576.0f) ||
          __builtin_add_overflow(*fixed, (int64_t)llrint(ldexp((double)l, 32)), fixed))
        return TL_ERRF(TL_ERR_INTERNAL, "step %lld: a token's loss is %g (the loss diverged)",
                       (long long)t->step + 1, (double)l);
    }
    return TL_OK;
  }
  for (int i = 0; i < n; i++) *sum += t->losses[i];
  return TL_OK;
}

static tl_status bucket_hook(void* user, int forward_node) {
  tl_trainer* t = user;
  TL_CHECK(tl_dp_buckets_node_done(t->buckets, forward_node));
  /* ZeRO 2-3: the node's early gradients have left the staging, which the
   * next node's are written over: the next micro-batch writes them afresh */
  const tl_dp_layout* l = t->lay;
  for (int i = 0; t->zero >= 2 && i < l->n_segments && l->segments[i].offset < l->n_early; i++)
    if (l->segments[i].first_use == forward_node)
      t->grads_fresh[l->segments[i].value] = t->grads_written[l->segments[i].value];
  return TL_OK;
}

/* First sequence of micro-batch i of this replica within the global batch. */
static int first_seq(const tl_trainer* t, int i) {
  return t->dp_rank / t->cp_size * (t->cfg.train.batch_size / t->cfg.mesh.dp) + i * t->micro;
}

/* One step's forwards and backwards as the stage's schedule orders them;
 * the runtime exchanges activations and gradients in between. */
static tl_status run_schedule(tl_trainer* t, double* loss_sum) {
  int m = t->cfg.schedule.micro_batches;
  float scale = 1.0f / ((float)t->cfg.train.batch_size * (float)t->cfg.train.seq_len);
  TL_CHECK(tl_pp_runtime_start(t->rt, &t->sched));
  for (;;) {
    tl_pp_task task;
    bool done;
    TL_CHECK(tl_pp_runtime_next(t->rt, &task, &done));
    if (done) break;
    double t0 = tl__trainer_now_us();
    const tl_pp_stage* me = &t->chunks[task.chunk];
    t->trace_micro = task.micro;
    t->trace_chunk = task.chunk;
    if (task.op == TL_PP_FORWARD) {
      TL_CHECK(set_inputs(t, task.exec, task.chunk, &t->loader, first_seq(t, task.micro)));
      TL_CHECK(tl_exec_forward(task.exec, me->node_begin, me->node_end));
      tl__trainer_trace_span(t, "forward", task.micro, t0);
      continue;
    }
    /* the last micro-batch's backward starts the buckets' reductions (of
     * each chunk: the chunks' last backwards run from the last chunk
     * down, the layout's order); ZeRO-2 streams every backward's gradients into its shard (a split
     * backward: its weight pass, where the gradients become final) */
    const bool split = t->graph->weight_begin > 0;
    int hook = t->buckets && (t->zero >= 2 || (task.micro == m - 1 && t->dp_size > 1)) &&
               (!split || task.op == TL_PP_WEIGHT);
    if (hook) tl_exec_set_backward_hook(task.exec, bucket_hook, t);
    if (task.op == TL_PP_WEIGHT) {
      tl_status st = tl_exec_backward_weight(task.exec, me->node_begin, me->node_end);
      tl_exec_set_backward_hook(task.exec, NULL, NULL);
      TL_CHECK(st);
      tl__trainer_trace_span(t, "weight", task.micro, t0);
      continue;
    }
    float s = scale;
    if (task.micro == m - 1 && t->dp_rank == t->dp_size - 1 && tl__trainer_in_job(t) &&
        tl_fault_on(TL_FAULT_MICRO_BATCH_DROPPED))
      s = 0.0f; /* a deliberate bug (core/env.h) */
    tl_status st = split ? tl_exec_backward_input(task.exec, me->node_begin, me->node_end, s)
                         : tl_exec_backward(task.exec, me->node_begin, me->node_end, s);
    tl_exec_set_backward_hook(task.exec, NULL, NULL);
    TL_CHECK(st);
    if (tl__trainer_last_chunk(t, task.chunk))
      TL_CHECK(add_losses(t, task.exec, loss_sum, t->grad_acc ? &t->loss_fixed : NULL));
    tl__trainer_trace_span(t, "backward", task.micro, t0);
  }
  t->wait_seconds = tl_pp_runtime_wait_seconds(t->rt);
  t->trace_chunk = 0;
  return TL_OK;
}

/* Sum of a float over a host group (every member gets it). */
static tl_status host_sum(tl_group* g, double* v) {
  if (!g || tl_group_size(g) == 1) return TL_OK;
  float x = (float)*v;
  TL_CHECK(tl_group_all_reduce(g, &x, &x, 1, TL_F32, TL_REDUCE_SUM, NULL));
  *v = x;
  return TL_OK;
}

/* Where each parameter's gradient lies in t->grads. */
static const int64_t* grad_offsets(const tl_trainer* t) {
  return t->grad_offset ? t->grad_offset : t->lay->offset;
}

static tl_status sync_tied(tl_trainer* t) {
  if (!t->shared) return TL_OK;
  double t0 = tl__trainer_now_us();
  if (t->grad_acc)
    TL_CHECK(tl_pp_sync_shared(t->sharing, t->shared, t->graph, t->grad_acc->data, TL_I64,
                               t->lay->offset));
  else
    TL_CHECK(tl_pp_sync_shared(t->sharing, t->shared, t->graph, t->grads->data, TL_F32,
                               grad_offsets(t)));
  tl__trainer_trace_span(t, "tied_allreduce", 0, t0);
  return TL_OK;
}

/* ZeRO 2 and 3: the tied embedding written in pieces on each stage that
 * holds it (trainer_pieces.c) never has a whole gradient to sum: each
 * stage reduce-scattered its own pieces into its shard, cut alike on every
 * stage, so rank r of each stage's data-parallel group holds the same rows
 * of it, and those shards are summed over the stages instead (1 / dp of
 * the bytes of summing it whole). */
static tl_status sync_tied_pieces(tl_trainer* t) {
  if (!t->shared || !t->piece_cols || t->zero < 2 || tl_fault_on(TL_FAULT_TIED_SYNC_SKIPPED))
    return TL_OK;
  const int n = tl_dp_buckets_pieces(t->buckets, NULL);
  struct tl_dp_piece* pieces = malloc(sizeof *pieces * (size_t)(n > 0 ? n : 1));
  if (!pieces) return TL_ERRF(TL_ERR_NOMEM, "out of memory summing the tied embedding");
  tl_dp_buckets_pieces(t->buckets, pieces);
  float* g = tl_dp_buckets_shard_grads(t->buckets);
  double t0 = tl__trainer_now_us();
  tl_status st = TL_OK;
  int64_t at = 0, len = 0; /* a run of the shard to sum: the table's chunks lie together */
  for (int i = 0; i <= n && st == TL_OK; i++) {
    const int v = i < n ? t->lay->segments[pieces[i].segment].value : -1;
    const bool mine = i < n && t->piece_cols[v] > 0 && tl__trainer_shares(t, v);
    if (mine && len > 0 && pieces[i].at == at + len) {
      len += pieces[i].n;
      continue;
    }
    if (len > 0)
      st = tl_group_all_reduce(t->shared, g + at, g + at, (size_t)len, TL_F32, TL_REDUCE_SUM, NULL);
    at = mine ? pieces[i].at : 0, len = mine ? pieces[i].n : 0;
  }
  free(pieces);
  tl__trainer_trace_span(t, "tied_shard_allreduce", 0, t0);
  return st;
}

/* Sequence parallelism: the parameters every rank holds whole but ran on
 * its token rows only (the LayerNorms) have gradients that are parts of a
 * sum over the tensor-parallel group (tp/tp.h). */
static tl_status sync_sequence_parallel(tl_trainer* t) {
  if (!t->shard.sp || t->tp_size == 1) return TL_OK;
  double t0 = tl__trainer_now_us();
  TL_CHECK(tl_tp_sync_partial(&t->shard, t->comm.tp, t->be, t->grads->data, grad_offsets(t),
                              t->sp_pack->data));
  tl__trainer_trace_span(t, "sp_allreduce", 0, t0);
  return TL_OK;
}

/* The deterministic mode: the micro-batches' fixed-point gradients summed
 * over the replicas (integers: any order gives the same bits), the tied
 * embedding's over its stages, then back to floats. */
static tl_status sum_exact(tl_trainer* t) {
  double t0 = tl__trainer_now_us();
  int64_t* acc = t->grad_acc->data;
  if (t->comm.dp && t->dp_size > 1)
    TL_CHECK(
        tl_group_all_reduce(t->comm.dp, acc, acc, (size_t)t->lay->n, TL_I64, TL_REDUCE_SUM, NULL));
  TL_CHECK(sync_tied(t));
  TL_CHECK(t->be->ops->fixed_to_float(t->be->ctx, t->grads->data, acc, t->lay->n));
  tl__trainer_trace_span(t, "dp_allreduce", 0, t0);
  return TL_OK;
}

/* The squared global norm from 128-bit fixed-point shares, summed exactly
 * over the stages. */
static tl_status norm_exact(tl_trainer* t, double* sumsq) {
  __int128 mine, total = 0;
  TL_CHECK(tl_optim_sumsq_fixed(t->optim, &mine));
  tl_group* g = t->comm.host_pp;
  int n = g ? tl_group_size(g) : 1;
  if (n == 1) {
    total = mine;
  } else {
    int64_t words[2] = {(int64_t)(mine >> 64), (int64_t)(uint64_t)mine};
    int64_t* all = malloc(sizeof(int64_t) * 2 * (size_t)n);
    if (!all) return TL_ERRF(TL_ERR_NOMEM, "out of memory for the gradient norm");
    tl_status st = tl_group_all_gather(g, words, all, 2 * (size_t)n, TL_I64, NULL);
    for (int r = 0; r < n && st == TL_OK; r++)
      total +=
          (__int128)(((unsigned __int128)(uint64_t)all[2 * r] << 64) | (uint64_t)all[2 * r + 1]);
    free(all);
    TL_CHECK(st);
  }
  *sumsq = ldexp((double)total, -TL_FIXED_SQ_SHIFT);
  return TL_OK;
}

/* The first tensor (in the model's order) in which this rank holds a
 * gradient that is not finite, or the model's tensor count. */
static tl_status first_nonfinite(tl_trainer* t, int* first) {
  *first = t->model.n_tensors;
  const tl_dp_layout* l = t->lay;
  int n = t->zero >= 2 ? tl_dp_buckets_pieces(t->buckets, NULL) : l->n_segments;
  struct tl_dp_piece* pieces = malloc(sizeof *pieces * (size_t)(n > 0 ? n : 1));
  float* host = malloc(sizeof(float) * (size_t)(l->n > 0 ? l->n : 1));
  if (!pieces || !host) {
    free(pieces), free(host);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory looking for non-finite gradients");
  }
  /* where each piece's gradient lies: the stage's buffer, or ZeRO-2/3's shard */
  const float* g = t->zero >= 2 ? tl_dp_buckets_shard_grads(t->buckets) : (float*)t->grads->data;
  int64_t g_n = t->zero >= 2 ? tl_dp_buckets_shard_n(t->buckets) : l->n;
  if (t->zero >= 2) {
    tl_dp_buckets_pieces(t->buckets, pieces);
  } else {
    const int64_t* off = grad_offsets(t);
    for (int i = 0; i < n; i++)
      pieces[i] = (struct tl_dp_piece){i, l->segments[i].offset, l->segments[i].n,
                                       off[l->segments[i].value]};
  }
  tl_status st = tl_memcpy(tl_cpu(), host, t->be->device, g, sizeof(float) * (size_t)g_n);
  for (int i = 0; i < n && st == TL_OK; i++) {
    int k = tl__trainer_tensor_of(t, l->segments[pieces[i].segment].value);
    for (int64_t e = 0; e < pieces[i].n && k < *first; e++)
      if (!isfinite(host[pieces[i].at + e])) *first = k;
  }
  free(pieces), free(host);
  return st;
}

/* A step whose norm or loss is not finite: skipped (train.skip_nonfinite:
 * nothing updated, the step and the data move on) or the run stopped with
 * the first parameter whose gradient is not finite — collective over the
 * job, reported by world rank 0 alone. */
static tl_status nonfinite(tl_trainer* t, float norm, double loss, tl_timer* timer,
                           struct tl_step_stats* out) {
  int first;
  TL_CHECK(first_nonfinite(t, &first));
  int32_t k = t->model.n_tensors - first; /* the largest is the first tensor */
  if (tl__trainer_in_job(t))
    TL_CHECK(tl_group_all_reduce(t->comm.world, &k, &k, 1, TL_I32, TL_REDUCE_MAX, NULL));
  first = t->model.n_tensors - k;
  const char* name = first < t->model.n_tensors ? t->model.tensors[first].name : NULL;
  const double mean = loss / ((double)t->cfg.train.batch_size * t->cfg.train.seq_len);
  if (t->cfg.train.skip_nonfinite) {
    if (t->world_rank == 0)
      TL_LOG_WARN(
          "step %lld skipped: the loss is %g and the gradient norm %g%s%s "
          "(train.skip_nonfinite)",
          (long long)t->step + 1, mean, (double)norm,
          name ? "; the first parameter whose gradient is not finite: " : "", name ? name : "");
    tl_loader_advance(&t->loader);
    t->step++;
    memset(out, 0, sizeof *out);
    out->step = t->step;
    out->loss = mean;
    out->lr = tl_lr_at(&t->cfg.train, t->step - 1);
    out->grad_norm = norm;
    out->seconds = tl_timer_elapsed_s(timer);
    out->bubble_seconds = t->wait_seconds;
    out->skipped = 1;
    return TL_OK;
  }
  if (t->world_rank != 0)
    return TL_ERRF(TL_ERR_PEER, "step %lld is not finite (world rank 0 reports it)",
                   (long long)t->step + 1);
  return TL_ERRF(TL_ERR_INTERNAL,
                 "step %lld: the loss is %g and the gradient norm %g: not finite%s%s; nothing "
                 "was updated (set train.skip_nonfinite to skip such steps instead)",
                 (long long)t->step + 1, mean, (double)norm,
                 name ? "; the first parameter whose gradient is not finite: " : "",
                 name ? name : "");
}

tl_status tl_trainer_step(tl_trainer* t, struct tl_step_stats* out) {
  const struct tl_train_config* tc = &t->cfg.train;
  const struct tl_kernel_ops* ops = t->be->ops;
  void* ctx = t->be->ctx;
  tl_timer timer;
  tl_timer_start(&timer);
  t->wait_seconds = 0;
  /* 1. gradients of the mean loss over the global batch */
  if (t->buckets) TL_CHECK(tl_dp_buckets_begin_step(t->buckets)); /* ZeRO-3: fresh parameters */
  /* not zeroed: each written by the step's first backward node to write it
   * (ZeRO 2-3: only their shard is zeroed) */
  memcpy(t->grads_fresh, t->grads_written, sizeof(bool) * (size_t)t->graph->n_values);
  if (t->zero >= 2) TL_CHECK(tl_dp_buckets_zero_grads(t->buckets));
  if (t->grad_acc) TL_CHECK(tl_memzero(t->be->device, t->grad_acc->data, t->grad_acc->bytes));
  double loss = 0.0;
  if (t->step + 1 == 3 && tl__trainer_in_job(t) && tl_fault_on(TL_FAULT_RANK_STOPS) &&
      t->world_rank == tl_group_size(t->comm.world) - 1)
    raise(SIGSTOP); /* a rank that no longer answers (core/env.h) */
  TL_CHECK(run_schedule(t, &loss));
  /* 2. replicas and the tied embedding */
  if (t->grad_acc) {
    TL_CHECK(sum_exact(t));
  } else if (t->zero == 0) { /* all-reduced whole, then the sums over other groups */
    if (t->buckets) {
      double t0 = tl__trainer_now_us();
      TL_CHECK(tl_dp_buckets_finish(t->buckets));
      tl__trainer_trace_span(t, "dp_allreduce", 0, t0);
    }
    TL_CHECK(sync_tied(t));
    TL_CHECK(sync_sequence_parallel(t));
  } else { /* ZeRO: the late gradients summed over the other groups first */
    TL_CHECK(sync_tied(t));
    TL_CHECK(sync_sequence_parallel(t));
    double t0 = tl__trainer_now_us();
    TL_CHECK(tl_dp_buckets_finish(t->buckets));
    tl__trainer_trace_span(t, "dp_reduce_scatter", 0, t0);
    TL_CHECK(sync_tied_pieces(t));
  }
  double dp_wait = t->buckets ? tl_dp_buckets_wait_seconds(t->buckets) : 0;
  if (t->dp_size > 1 && tl_fault_on(TL_FAULT_DP_SCALED_TWICE)) { /* a deliberate bug (core/env.h) */
    float* g = t->zero >= 2 ? tl_dp_buckets_shard_grads(t->buckets) : (float*)t->grads->data;
    int64_t n = t->zero >= 2 ? tl_dp_buckets_shard_n(t->buckets) : t->lay->n;
    TL_CHECK(ops->scale_forward(ctx, g, g, 1.0f / (float)t->dp_size, n));
  }
  if (t->step + 1 == 2 && t->world_rank == 0 && tl__trainer_in_job(t) &&
      tl_fault_on(TL_FAULT_NAN_AT_STEP_2)) { /* a transient divergence (core/env.h) */
    float nan = NAN;
    float* g = t->zero >= 2 ? tl_dp_buckets_shard_grads(t->buckets) : (float*)t->grads->data;
    TL_CHECK(tl_memcpy(t->be->device, g, tl_cpu(), &nan, sizeof nan));
  }
  /* 3. global norm over stages and shards, clipping */
  double sumsq = 0;
  if (t->grad_acc) {
    TL_CHECK(norm_exact(t, &sumsq));
  } else {
    TL_CHECK(tl_optim_sumsq(t->optim, &sumsq));
    if (t->zero > 0) TL_CHECK(host_sum(t->comm.host_dp, &sumsq)); /* disjoint shards */
    TL_CHECK(host_sum(t->comm.host_tp, &sumsq));
    TL_CHECK(host_sum(t->comm.host_pp, &sumsq));
  }
  /* a NaN sum of squares must not read as 0 (no clipping, garbage steps) */
  float norm = isfinite(sumsq) ? (float)sqrt(sumsq > 0 ? sumsq : 0) : (float)sumsq;
  /* the loss lives on the last stages: everyone learns it, before the
   * update (a step whose loss or norm is not finite updates nothing) */
  if (t->grad_acc) {
    if (t->comm.world && tl_group_size(t->comm.world) > 1)
      TL_CHECK(tl_group_all_reduce(t->comm.world, &t->loss_fixed, &t->loss_fixed, 1, TL_I64,
                                   TL_REDUCE_SUM, NULL));
    loss = ldexp((double)t->loss_fixed, -32);
    t->loss_fixed = 0;
  } else {
    TL_CHECK(host_sum(t->comm.world, &loss));
  }
  /* the job agrees: a rank whose norm is not finite while another's is
   * (replicas that diverged) must not update alone */
  int32_t bad = !isfinite(norm) || !isfinite(loss);
  if (tl__trainer_in_job(t))
    TL_CHECK(tl_group_all_reduce(t->comm.world, &bad, &bad, 1, TL_I32, TL_REDUCE_MAX, NULL));
  if (bad) return nonfinite(t, norm, loss, &timer, out);
  /* 4. clipping and AdamW on the stage's parameters */
  float lr;
  TL_CHECK(tl_optim_step(t->optim, norm, t->step, &lr));
  if (tl__trainer_in_job(t) && t->dp_rank == 0 && t->tp_rank == 0 && tl__trainer_is_last_stage(t) &&
      tl_fault_on(TL_FAULT_UPDATE_REPEATED)) /* a deliberate bug (core/env.h) */
    TL_CHECK(tl_optim_step(t->optim, 0.0f, t->step, &lr));
  if (t->zero > 0) { /* every rank's updated chunks to every replica */
    double t0 = tl__trainer_now_us();
    TL_CHECK(tl_dp_buckets_gather_params(t->buckets, t->master ? NULL : t->params->data));
    dp_wait += (tl__trainer_now_us() - t0) * 1e-6;
    tl__trainer_trace_span(t, "dp_all_gather", 0, t0);
  }
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
  out->dp_wait_seconds = dp_wait;
  out->skipped = 0;
  return TL_OK;
}

tl_status tl_trainer_eval(tl_trainer* t, double* loss) {
  if (!t->val_file.tokens)
    return TL_ERRF(TL_ERR_CONFIG, "validation needs data.val: the path of a token file");
  tl_loader l;
  TL_CHECK(tl_loader_init(&l, &t->val_file, t->cfg.train.batch_size, t->cfg.train.seq_len, 0));
  tl_pp_schedule fwd;
  TL_CHECK(tl_pp_schedule_build_forward(t->pp_size, t->pp_rank, t->cfg.schedule.micro_batches,
                                        t->n_chunks, &fwd));
  double sum = 0.0;
  int batches = t->cfg.train.val_batches > 0 ? t->cfg.train.val_batches : 1;
  tl_status st = t->buckets ? tl_dp_buckets_begin_step(t->buckets) : TL_OK;
  for (int b = 0; b < batches && st == TL_OK; b++) {
    st = tl_pp_runtime_start(t->rt, &fwd);
    for (bool done = false; st == TL_OK;) {
      tl_pp_task task;
      st = tl_pp_runtime_next(t->rt, &task, &done);
      if (st != TL_OK || done) break;
      const tl_pp_stage* me = &t->chunks[task.chunk];
      t->trace_micro = task.micro;
      t->trace_chunk = task.chunk;
      st = set_inputs(t, task.exec, task.chunk, &l, first_seq(t, task.micro));
      if (st == TL_OK) st = tl_exec_forward(task.exec, me->node_begin, me->node_end);
      if (st == TL_OK && tl__trainer_last_chunk(t, task.chunk))
        st = add_losses(t, task.exec, &sum, NULL);
    }
    tl_loader_advance(&l);
  }
  tl_pp_schedule_free(&fwd);
  TL_CHECK(st);
  TL_CHECK(host_sum(t->comm.world, &sum));
  *loss = sum / ((double)batches * t->cfg.train.batch_size * t->cfg.train.seq_len);
  return TL_OK;
}

/* ---- small accessors ---------------------------------------------------- */
