/* recommend.c — writing a plan's choices over a base config, and reading
 * them back out of one to price the run it describes. */
#include "planner/recommend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tl_plan_from_config(const struct tl_config* cfg, tl_plan* p, tl_dtype* dtype) {
  memset(p, 0, sizeof *p);
  p->dp = cfg->mesh.dp;
  p->tp = cfg->mesh.tp;
  p->pp = cfg->mesh.pp;
  p->schedule = cfg->schedule.kind;
  p->n_micro = cfg->schedule.micro_batches;
  p->micro_batch = cfg->train.batch_size / (p->dp * p->n_micro);
  p->virtual_stages =
      cfg->schedule.kind == TL_SCHEDULE_INTERLEAVED ? cfg->schedule.virtual_stages : 1;
  p->zero = cfg->parallel.zero;
  p->recompute = cfg->parallel.recompute;
  p->sequence_parallel = p->tp > 1 && cfg->parallel.sequence_parallel;
  p->dp_bucket_mb = cfg->parallel.bucket_mb;
  p->grad_reduce = cfg->parallel.grad_reduce == TL_PRECISION_BF16 ? TL_BF16 : TL_F32;
  p->cp = cfg->mesh.cp;
  memcpy(p->order, cfg->mesh.order, sizeof p->order);
  *dtype = cfg->train.precision == TL_PRECISION_BF16 ? TL_BF16 : TL_F32;
}

tl_status tl_plan_price_config(const struct tl_config* cfg, const tl_cluster* cluster,
                               tl_plan* out) {
  tl_dtype dtype;
  tl_plan p;
  tl_plan_from_config(cfg, &p, &dtype);
  tl_cluster c = *cluster;
  /* what the trainer runs that the cost model does not price: refused,
   * named, rather than priced as something else */
  if (cfg->model.kind == TL_MODEL_MLP && cfg->parallel.recompute != TL_RECOMPUTE_NONE)
    return TL_ERRF(TL_ERR_CONFIG,
                   "parallel.recompute = \"%s\": the cost model prices an MLP without "
                   "recomputation (as trellis plan plans it)",
                   cfg->parallel.recompute == TL_RECOMPUTE_FULL ? "full" : "selective");
  if (cfg->model.kind == TL_MODEL_MLP && (cfg->schedule.kind == TL_SCHEDULE_INTERLEAVED ||
                                          cfg->schedule.kind == TL_SCHEDULE_ZERO_BUBBLE))
    return TL_ERRF(TL_ERR_CONFIG,
                   "schedule.kind = \"%s\": the cost model prices an MLP under gpipe and 1f1b "
                   "(as trellis plan plans it)",
                   tl_schedule_kind_name(cfg->schedule.kind));
  if (cfg->parallel.deterministic && p.dp > 1)
    return TL_ERRF(TL_ERR_CONFIG,
                   "parallel.deterministic = true: its exact gradient sum (an 8-byte accumulator "
                   "a parameter, one integer all-reduce after the backward) is not what the cost "
                   "model prices (fp32 or bf16 buckets during the backward)");
  const char* dev = cfg->device.type == TL_DEVICE_CUDA ? "cuda" : "cpu";
  if (c.device != cfg->device.type)
    return TL_ERRF(TL_ERR_CONFIG,
                   "cluster %s is a %s cluster; the config trains on %s (device.type)", c.name,
                   c.device == TL_DEVICE_CUDA ? "cuda" : "cpu", dev);
  /* a CPU computes bf16 runs in fp32, at its fp32 peak (as trellis plan) */
  if (c.device == TL_DEVICE_CPU && c.peak_bf16 <= 0) c.peak_bf16 = c.peak_fp32;
  if (tl_cluster_peak(&c, dtype) <= 0)
    return TL_ERRF(TL_ERR_CONFIG, "cluster %s has no %s peak (peak_flops) for train.precision",
                   c.name, dtype == TL_BF16 ? "bf16" : "fp32");
  const int ranks = (int)tl_plan_devices(&p), dpn = c.devices_per_node;
  char cp[32] = "";
  if (tl_plan_cp(&p) > 1) snprintf(cp, sizeof cp, " x cp %d", tl_plan_cp(&p));
  if (ranks > tl_cluster_devices(&c))
    return TL_ERRF(TL_ERR_CONFIG,
                   "the mesh's %d ranks (dp %d x tp %d x pp %d%s) are more than the %d "
                   "devices of cluster %s",
                   ranks, p.dp, p.tp, p.pp, cp, tl_cluster_devices(&c), c.name);
  if (ranks <= dpn) {
    c.nodes = 1, c.devices_per_node = ranks;
  } else if (ranks % dpn != 0) {
    return TL_ERRF(
        TL_ERR_CONFIG,
        "the mesh's %d ranks (mesh.dp x mesh.tp x mesh.pp x mesh.cp) are not whole nodes of "
        "cluster %s's %d devices",
        ranks, c.name, dpn);
  } else {
    c.nodes = ranks / dpn; /* the groups' links follow mesh.order (p.order) */
  }
  tl_cost_model* cm = malloc(sizeof *cm); /* megabytes: not on the stack */
  if (!cm) return TL_ERRF(TL_ERR_NOMEM, "out of memory for the cost model");
  tl_status st =
      tl_cost_model_build_cp(&cfg->model, cfg->train.seq_len, dtype, p.tp, tl_plan_cp(&p), cm);
  if (st == TL_OK)
    tl_cost_evaluate(cm, &c, dtype,
                     cfg->schedule.n_stage_layers > 0 ? cfg->schedule.stage_layers : NULL, &p);
  free(cm);
  TL_CHECK(st);
  if (!isfinite(p.t_step))
    return TL_ERRF(TL_ERR_CONFIG,
                   "the cost model prices no such run: mesh dp %d x tp %d x pp %d, "
                   "schedule.kind \"%s\" of %d micro-batches",
                   p.dp, p.tp, p.pp, tl_schedule_kind_name(p.schedule), p.n_micro);
  *out = p;
  return TL_OK;
}

tl_status tl_plan_to_config(const tl_plan* p, const struct tl_config* base, int seq,
                            const tl_cluster* c, tl_dtype dtype, struct tl_config* out) {
  struct tl_config cfg = *base;
  if (seq > cfg.model.max_seq_len)
    return TL_ERRF(TL_ERR_CONFIG, "sequence length %d exceeds model.max_seq_len = %d", seq,
                   cfg.model.max_seq_len);
  cfg.mesh.dp = p->dp;
  cfg.mesh.tp = p->tp;
  cfg.mesh.pp = p->pp;
  /* the layout priced, not the base's */
  tl_cost_plan_order(p, cfg.mesh.order);
  cfg.mesh.cp = tl_plan_cp(p);
  cfg.schedule.kind = p->schedule;
  cfg.schedule.micro_batches = p->n_micro;
  cfg.schedule.virtual_stages = tl_plan_chunks(p);
  cfg.schedule.n_stage_layers = 0; /* the trainer balances FLOPs */
  memset(cfg.schedule.stage_layers, 0, sizeof cfg.schedule.stage_layers);
  cfg.parallel.zero = p->zero;
  cfg.parallel.recompute = p->recompute;
  if (p->tp > 1) cfg.parallel.sequence_parallel = p->sequence_parallel; /* as priced */
  cfg.train.batch_size = p->dp * p->micro_batch * p->n_micro;
  cfg.train.seq_len = seq;
  cfg.device.type = c->device;
  cfg.train.precision = dtype == TL_BF16 ? TL_PRECISION_BF16 : TL_PRECISION_FP32;
  cfg.parallel.grad_reduce = p->grad_reduce == TL_BF16 ? TL_PRECISION_BF16 : TL_PRECISION_FP32;
  /* as priced: 0 is the all-reduce after the backward, which one bucket
   * larger than any stage is (it starts when the last gradient is final) */
  cfg.parallel.bucket_mb = p->dp_bucket_mb > 0 ? p->dp_bucket_mb : TL_PLAN_ONE_BUCKET_MB;
  *out = cfg;
  return TL_OK;
}
