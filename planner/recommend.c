/* recommend.c — writing a plan's choices over a base config. */
#include "planner/recommend.h"

#include <string.h>

tl_status tl_plan_to_config(const tl_plan* p, const struct tl_config* base, int seq,
                            const tl_cluster* c, tl_dtype dtype, struct tl_config* out) {
  struct tl_config cfg = *base;
  if (seq > cfg.model.max_seq_len)
    return TL_ERRF(TL_ERR_CONFIG, "sequence length %d exceeds model.max_seq_len = %d", seq,
                   cfg.model.max_seq_len);
  cfg.mesh.dp = p->dp;
  cfg.mesh.tp = p->tp;
  cfg.mesh.pp = p->pp;
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
