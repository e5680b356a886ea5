/* trainer.c — the single-device training step and what it needs. */
#include "launcher/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "core/timer.h"
#include "graph/op.h"
#include "launcher/checkpoint.h"
#include "launcher/tokens.h"

struct tl_trainer {
  struct tl_config cfg;
  tl_model model;
  tl_backend* be;
  tl_buffer *params, *grads, *adam_m, *adam_v, *scalar;
  tl_graph* graph; /* (micro-batch, T) with loss */
  struct tl_model_io io;
  tl_exec* exec;
  tl_graph* infer_graph; /* (1, T), logits only; built on first use */
  struct tl_model_io infer_io;
  tl_exec* infer_exec;
  tl_token_file train_file, val_file;
  tl_loader loader;
  int micro; /* sequences per micro-batch */
  int32_t *inputs, *targets;
  float* losses;
  int64_t step;
};

float tl_lr_at(const struct tl_train_config* c, int64_t step) {
  if (c->warmup_steps > 0 && step < c->warmup_steps)
    return c->lr * (float)(step + 1) / (float)c->warmup_steps;
  if (c->lr_schedule == TL_LR_CONSTANT || c->steps <= c->warmup_steps) return c->lr;
  double ratio = (double)(step - c->warmup_steps) / (double)(c->steps - c->warmup_steps);
  if (ratio > 1.0) ratio = 1.0;
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return (float)(c->min_lr + coeff * (c->lr - c->min_lr));
}

static tl_status check_sizes(const struct tl_config* cfg) {
  const struct tl_train_config* tc = &cfg->train;
  int mb = cfg->schedule.micro_batches;
  if (tc->batch_size < 1 || tc->seq_len < 1)
    return TL_ERRF(TL_ERR_CONFIG, "train.batch_size=%d and train.seq_len=%d must be >= 1",
                   tc->batch_size, tc->seq_len);
  if (mb < 1 || tc->batch_size % mb != 0)
    return TL_ERRF(TL_ERR_CONFIG, "schedule.micro_batches=%d does not divide train.batch_size=%d",
                   mb, tc->batch_size);
  if (cfg->mesh.dp * cfg->mesh.tp * cfg->mesh.pp != 1)
    return TL_ERRF(TL_ERR_CONFIG,
                   "this trainer runs one device: mesh.dp, mesh.tp and mesh.pp must be 1 (got %d, "
                   "%d, %d)",
                   cfg->mesh.dp, cfg->mesh.tp, cfg->mesh.pp);
  return TL_OK;
}

/* Starting weights on the host: checkpoint, llm.c file, or the RNG. */
static tl_status load_start(tl_trainer* t) {
  size_t bytes = sizeof(float) * (size_t)t->model.n_params;
  float* host = malloc(bytes * 3);
  if (!host) return TL_ERRF(TL_ERR_NOMEM, "out of memory for %zu bytes of weights", bytes * 3);
  float *m = host + t->model.n_params, *v = m + t->model.n_params;
  memset(m, 0, bytes * 2);
  tl_status st = TL_OK;
  int64_t position = 0;
  if (t->cfg.checkpoint.resume[0]) {
    struct tl_train_state s;
    st = tl_checkpoint_read(t->cfg.checkpoint.resume, &t->model, &s, host, m, v);
    t->step = s.step;
    position = s.data_position;
    if (st == TL_OK)
      TL_LOG_INFO("resuming from %s at step %lld", t->cfg.checkpoint.resume, (long long)s.step);
  } else if (t->cfg.model.init_from[0]) {
    st = tl_llmc_model_read(t->cfg.model.init_from, &t->model, host);
    if (st == TL_OK) TL_LOG_INFO("weights from %s", t->cfg.model.init_from);
  } else {
    tl_model_init_params(&t->model, 0, t->model.n_params, host);
  }
  tl_device dev = t->be->device, cpu = tl_cpu();
  if (st == TL_OK) st = tl_memcpy(dev, t->params->data, cpu, host, bytes);
  if (st == TL_OK) st = tl_memcpy(dev, t->adam_m->data, cpu, m, bytes);
  if (st == TL_OK) st = tl_memcpy(dev, t->adam_v->data, cpu, v, bytes);
  free(host);
  if (st == TL_OK)
    st = tl_loader_init(&t->loader, &t->train_file, t->cfg.train.batch_size, t->cfg.train.seq_len,
                        position);
  return st;
}

tl_status tl_trainer_create(const struct tl_config* cfg, tl_trainer** out) {
  *out = NULL;
  TL_CHECK(check_sizes(cfg));
  tl_trainer* t = calloc(1, sizeof *t);
  if (!t) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
  t->cfg = *cfg;
  tl_status st = TL_OK;
  const struct tl_train_config* tc = &cfg->train;
  t->micro = tc->batch_size / cfg->schedule.micro_batches;
  TL_CHECK_GOTO(tl_model_init(&cfg->model, &t->model), st, fail);
  tl_device dev = cfg->device.type == TL_DEVICE_CUDA ? tl_cuda(0) : tl_cpu();
  TL_CHECK_GOTO(tl_backend_create(dev, &t->be), st, fail);
  if (!cfg->data.train[0]) {
    st = TL_ERRF(TL_ERR_CONFIG, "data.train is required: the path of a token file");
    goto fail;
  }
  TL_CHECK_GOTO(tl_tokens_open(cfg->data.train, t->model.vocab, &t->train_file), st, fail);
  if (cfg->data.val[0])
    TL_CHECK_GOTO(tl_tokens_open(cfg->data.val, t->model.vocab, &t->val_file), st, fail);
  size_t bytes = sizeof(float) * (size_t)t->model.n_params;
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->params), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->grads), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->adam_m), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &t->adam_v), st, fail);
  TL_CHECK_GOTO(tl_buffer_create(dev, sizeof(float), &t->scalar), st, fail);
  TL_CHECK_GOTO(tl_model_build(&t->model, t->micro, tc->seq_len, true, &t->graph, &t->io), st,
                fail);
  TL_CHECK_GOTO(tl_exec_create(t->graph, t->be, t->params, t->grads, &t->exec), st, fail);
  size_t n = (size_t)t->micro * (size_t)tc->seq_len;
  t->inputs = malloc(sizeof(int32_t) * n);
  t->targets = malloc(sizeof(int32_t) * n);
  t->losses = malloc(sizeof(float) * n);
  if (!t->inputs || !t->targets || !t->losses) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a batch");
    goto fail;
  }
  TL_CHECK_GOTO(load_start(t), st, fail);
  *out = t;
  return TL_OK;
fail:
  tl_trainer_destroy(t);
  return st;
}

void tl_trainer_destroy(tl_trainer* t) {
  if (!t) return;
  tl_exec_destroy(t->exec);
  tl_exec_destroy(t->infer_exec);
  tl_graph_destroy(t->graph);
  tl_graph_destroy(t->infer_graph);
  tl_buffer_destroy(t->params);
  tl_buffer_destroy(t->grads);
  tl_buffer_destroy(t->adam_m);
  tl_buffer_destroy(t->adam_v);
  tl_buffer_destroy(t->scalar);
  tl_tokens_close(&t->train_file);
  tl_tokens_close(&t->val_file);
  tl_backend_destroy(t->be);
  free(t->inputs);
  free(t->targets);
  free(t->losses);
  free(t);
}

/* Forward (and backward when train) of one micro-batch; adds its losses to *sum. */
static tl_status run_micro(tl_trainer* t, const tl_loader* l, int seq0, int train, double* sum) {
  int n = t->micro * t->cfg.train.seq_len;
  tl_loader_get(l, seq0, t->micro, t->inputs, t->targets);
  TL_CHECK(tl_exec_set_input(t->exec, t->io.tokens, t->inputs, sizeof(int32_t) * (size_t)n));
  TL_CHECK(tl_exec_set_input(t->exec, t->io.targets, t->targets, sizeof(int32_t) * (size_t)n));
  TL_CHECK(tl_exec_forward(t->exec, 0, t->graph->n_forward));
  if (train) {
    float scale = 1.0f / ((float)t->cfg.train.batch_size * (float)t->cfg.train.seq_len);
    TL_CHECK(tl_exec_backward(t->exec, 0, t->graph->n_forward, scale));
  }
  TL_CHECK(tl_exec_get(t->exec, t->io.losses, t->losses, sizeof(float) * (size_t)n));
  for (int i = 0; i < n; i++) *sum += t->losses[i];
  return TL_OK;
}

static tl_status read_scalar(tl_trainer* t, float* out) {
  TL_CHECK(t->be->ops->synchronize(t->be->ctx));
  return tl_memcpy(tl_cpu(), out, t->be->device, t->scalar->data, sizeof(float));
}

tl_status tl_trainer_step(tl_trainer* t, struct tl_step_stats* out) {
  const struct tl_train_config* tc = &t->cfg.train;
  const struct tl_kernel_ops* ops = t->be->ops;
  void* ctx = t->be->ctx;
  tl_timer timer;
  tl_timer_start(&timer);
  int64_t n = t->model.n_params;
  /* 1. gradients of the mean loss over the global batch */
  TL_CHECK(tl_memzero(t->be->device, t->grads->data, t->grads->bytes));
  double sum = 0.0;
  for (int mb = 0; mb < t->cfg.schedule.micro_batches; mb++)
    TL_CHECK(run_micro(t, &t->loader, mb * t->micro, 1, &sum));
  /* 2. global norm, clipping */
  float sumsq = 0.0f;
  TL_CHECK(ops->sumsq(ctx, t->scalar->data, t->grads->data, n));
  TL_CHECK(read_scalar(t, &sumsq));
  float norm = sqrtf(sumsq);
  if (!isfinite(norm))
    return TL_ERRF(TL_ERR_INTERNAL, "step %lld: the gradient norm is %f (the loss diverged)",
                   (long long)t->step + 1, norm);
  if (tc->grad_clip > 0.0f && norm > tc->grad_clip)
    TL_CHECK(
        ops->scale_forward(ctx, t->grads->data, t->grads->data, tc->grad_clip / (norm + 1e-6f), n));
  /* 3. AdamW per tensor: decay on weight matrices only */
  float lr = tl_lr_at(tc, t->step);
  for (int k = 0; k < t->model.n_tensors; k++) {
    const struct tl_param_tensor* p = &t->model.tensors[k];
    float* base = (float*)t->params->data + p->offset;
    TL_CHECK(ops->adamw(ctx, base, (float*)t->grads->data + p->offset,
                        (float*)t->adam_m->data + p->offset, (float*)t->adam_v->data + p->offset,
                        p->numel, lr, tc->beta1, tc->beta2, tc->eps,
                        p->decay ? tc->weight_decay : 0.0f, (int)(t->step + 1)));
  }
  TL_CHECK(ops->synchronize(ctx));
  tl_loader_advance(&t->loader);
  t->step++;
  out->step = t->step;
  out->loss = sum / ((double)tc->batch_size * tc->seq_len);
  out->lr = lr;
  out->grad_norm = norm;
  out->seconds = tl_timer_elapsed_s(&timer);
  return TL_OK;
}

tl_status tl_trainer_eval(tl_trainer* t, double* loss) {
  if (!t->val_file.tokens)
    return TL_ERRF(TL_ERR_CONFIG, "validation needs data.val: the path of a token file");
  tl_loader l;
  TL_CHECK(tl_loader_init(&l, &t->val_file, t->cfg.train.batch_size, t->cfg.train.seq_len, 0));
  double sum = 0.0;
  int batches = t->cfg.train.val_batches > 0 ? t->cfg.train.val_batches : 1;
  for (int b = 0; b < batches; b++) {
    for (int mb = 0; mb < t->cfg.schedule.micro_batches; mb++)
      TL_CHECK(run_micro(t, &l, mb * t->micro, 0, &sum));
    tl_loader_advance(&l);
  }
  *loss = sum / ((double)batches * t->cfg.train.batch_size * t->cfg.train.seq_len);
  return TL_OK;
}

tl_status tl_trainer_sample(tl_trainer* t, const int32_t* prompt, int n_prompt, int n, int top_k,
                            uint64_t seed, int32_t* out) {
  int T = t->cfg.train.seq_len, vp = t->model.padded_vocab, v = t->model.vocab;
  if (n_prompt < 1) return TL_ERRF(TL_ERR_INVALID, "sampling needs a prompt of at least one token");
  if (!t->infer_exec) {
    TL_CHECK(tl_model_build(&t->model, 1, T, false, &t->infer_graph, &t->infer_io));
    TL_CHECK(tl_exec_create(t->infer_graph, t->be, t->params, NULL, &t->infer_exec));
  }
  int total = n_prompt + n;
  int32_t* seq = malloc(sizeof(int32_t) * (size_t)total);
  float* logits = malloc(sizeof(float) * (size_t)T * vp);
  int32_t* window = malloc(sizeof(int32_t) * (size_t)T);
  tl_status st =
      (seq && logits && window) ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory sampling");
  if (st == TL_OK) memcpy(seq, prompt, sizeof(int32_t) * (size_t)n_prompt);
  for (int len = n_prompt; st == TL_OK && len < total; len++) {
    /* the last T tokens, left-aligned; positions past the end are ignored (causal) */
    int start = len > T ? len - T : 0, used = len - start;
    for (int i = 0; i < T; i++) window[i] = i < used ? seq[start + i] : 0;
    st = tl_exec_set_input(t->infer_exec, t->infer_io.tokens, window, sizeof(int32_t) * (size_t)T);
    if (st == TL_OK) st = tl_exec_forward(t->infer_exec, 0, t->infer_graph->n_forward);
    if (st == TL_OK)
      st = tl_exec_get(t->infer_exec, t->infer_io.logits, logits, sizeof(float) * (size_t)T * vp);
    if (st != TL_OK) break;
    const float* row = logits + (size_t)(used - 1) * vp;
    /* top-k: the k largest logits, then a draw from their softmax */
    int k = top_k < 1 ? 1 : (top_k > v ? v : top_k);
    int best[64] = {0};
    if (k > 64) k = 64;
    for (int j = 0; j < k; j++) best[j] = -1;
    for (int c = 0; c < v; c++) {
      int pos = k;
      while (pos > 0 && (best[pos - 1] < 0 || row[c] > row[best[pos - 1]])) pos--;
      if (pos < k) {
        memmove(best + pos + 1, best + pos, sizeof(int) * (size_t)(k - pos - 1));
        best[pos] = c;
      }
    }
    int pick = best[0];
    if (k > 1) {
      double w[64], sum = 0;
      for (int j = 0; j < k; j++) sum += (w[j] = exp((double)row[best[j]] - row[best[0]]));
      float u;
      tl_rng_uniform(seed, 0x5a4d, (uint64_t)len, 1, 0.0f, 1.0f, &u);
      double acc = 0, target = u * sum;
      for (int j = 0; j < k; j++)
        if ((acc += w[j]) >= target) {
          pick = best[j];
          break;
        }
    }
    seq[len] = pick;
  }
  if (st == TL_OK) memcpy(out, seq + n_prompt, sizeof(int32_t) * (size_t)n);
  free(seq);
  free(logits);
  free(window);
  return st;
}

static tl_status host_state(tl_trainer* t, float** host) {
  size_t bytes = sizeof(float) * (size_t)t->model.n_params;
  *host = malloc(bytes * 3);
  if (!*host) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
  tl_device dev = t->be->device, cpu = tl_cpu();
  TL_CHECK(t->be->ops->synchronize(t->be->ctx));
  tl_status st = tl_memcpy(cpu, *host, dev, t->params->data, bytes);
  if (st == TL_OK) st = tl_memcpy(cpu, *host + t->model.n_params, dev, t->adam_m->data, bytes);
  if (st == TL_OK) st = tl_memcpy(cpu, *host + 2 * t->model.n_params, dev, t->adam_v->data, bytes);
  if (st != TL_OK) free(*host), *host = NULL;
  return st;
}

tl_status tl_trainer_save(tl_trainer* t, const char* path) {
  float* host = NULL;
  TL_CHECK(host_state(t, &host));
  struct tl_train_state s = {t->step, t->loader.position};
  int64_t n = t->model.n_params;
  tl_status st = tl_checkpoint_write(path, &t->model, &s, host, host + n, host + 2 * n);
  free(host);
  return st;
}

tl_status tl_trainer_export(tl_trainer* t, const char* path) {
  float* host = NULL;
  TL_CHECK(host_state(t, &host));
  tl_status st = tl_llmc_model_write(path, &t->model, host);
  free(host);
  return st;
}

tl_status tl_trainer_params(tl_trainer* t, float* out) {
  TL_CHECK(t->be->ops->synchronize(t->be->ctx));
  return tl_memcpy(tl_cpu(), out, t->be->device, t->params->data,
                   sizeof(float) * (size_t)t->model.n_params);
}

int64_t tl_trainer_steps_done(const tl_trainer* t) {
  return t->step;
}
const tl_model* tl_trainer_model(const tl_trainer* t) {
  return &t->model;
}

int32_t tl_trainer_first_token(const tl_trainer* t) {
  const tl_token_file* f = t->val_file.tokens ? &t->val_file : &t->train_file;
  return f->n_tokens > 0 ? f->tokens[0] : 0;
}

double tl_trainer_step_flops(const tl_trainer* t) {
  return tl_graph_flops(t->graph, 0, t->graph->n_nodes) * t->cfg.schedule.micro_batches;
}

int64_t tl_trainer_peak_bytes(const tl_trainer* t) {
  return tl_alloc_stats_get(t->be->device).peak_bytes;
}

void tl_trainer_profile(tl_trainer* t, int on) {
  tl_exec_profile(t->exec, on);
}
double tl_trainer_op_seconds(const tl_trainer* t, int op) {
  return tl_exec_op_seconds(t->exec, op);
}
