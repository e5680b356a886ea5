/* trainer_state.c — the whole model in and out of a trainer's shards: the
 * starting weights cut to this rank's stage and tensor-parallel shard, and
 * the shards gathered back (parameters and AdamW moments) for checkpoints,
 * llm.c model files, sampling and --verify. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/env.h"
#include "core/log.h"
#include "launcher/train/checkpoint.h"
#include "launcher/train/hf.h"
#include "launcher/train/sharded.h"
#include "launcher/train/trainer_impl.h"
#include "tp/tp.h"

/* Host copies of the starting state for the whole model: checkpoint, llm.c
 * file or Hugging Face directory, or NULL for the RNG. */
static tl_status read_start(tl_trainer* t, float** host, int64_t* position) {
  *host = NULL;
  *position = 0;
  const char* resume = t->cfg.checkpoint.resume;
  const char* from = t->cfg.model.init_from;
  if (!resume[0] && !from[0]) return TL_OK;
  if (resume[0] && tl_sharded_is(resume)) return TL_OK; /* read slice by slice: place_sharded */
  int64_t n = t->model.n_params;
  *host = malloc(sizeof(float) * (size_t)n * 3);
  if (!*host) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading %lld parameters", (long long)n);
  tl_status st;
  if (resume[0]) {
    struct tl_train_state s;
    st = tl_checkpoint_read(resume, &t->model, &s, *host, *host + n, *host + 2 * n);
    t->step = s.step;
    *position = s.data_position;
    if (st == TL_OK) TL_LOG_INFO("resuming from %s at step %lld", resume, (long long)s.step);
  } else {
    memset(*host + n, 0, sizeof(float) * (size_t)n * 2);
    const bool hf = tl_hf_is_dir(from);
    st = hf ? tl_hf_model_read(from, &t->model, *host) : tl_llmc_model_read(from, &t->model, *host);
    if (st == TL_OK) TL_LOG_INFO("weights from %s%s", from, hf ? " (Hugging Face)" : "");
  }
  if (st != TL_OK) free(*host), *host = NULL;
  return st;
}

/* Places whole-model vectors (parameters and both moments, n_params
 * apart) into this rank's stage buffers; NULL: parameters from the RNG,
 * moments zero. */
static tl_status place_full(tl_trainer* t, const float* full) {
  int64_t n = t->lay->n, total = t->model.n_params, shard_n = t->shard.n_local;
  float* local = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1) * 3);
  /* the whole vectors, cut to this rank's tensor-parallel shard */
  float* cut = full && t->tp_size > 1 ? malloc(sizeof(float) * (size_t)shard_n * 3) : NULL;
  const float* shard = cut ? cut : full;
  tl_status st = local && (cut || !full || t->tp_size == 1)
                     ? TL_OK
                     : TL_ERRF(TL_ERR_NOMEM, "out of memory for the stage's weights");
  if (st == TL_OK) {
    if (cut)
      for (int k = 0; k < 3; k++) tl_tp_from_full(&t->shard, full + k * total, cut + k * shard_n);
    memset(local + n, 0, sizeof(float) * (size_t)n * 2);
    for (int i = 0; i < t->lay->n_segments; i++) {
      const tl_dp_segment* s = &t->lay->segments[i];
      const int64_t at = t->graph->values[s->value].offset; /* in the shard's vector */
      float* dst = local + s->offset;
      if (shard) {
        for (int k = 0; k < 3; k++)
          memcpy(dst + k * n, shard + k * shard_n + at, sizeof(float) * (size_t)s->n);
      } else {
        tl_tp_init_params(&t->shard, &t->model, at, at + s->n, dst);
      }
    }
    size_t bytes = sizeof(float) * (size_t)n;
    tl_device dev = t->be->device, cpu = tl_cpu();
    /* the parameters: the whole stage's, or the fp32 master shard of them
     * (ZeRO-3, ZeRO 1-2 in bf16), whose working copy is made from it */
    st = t->master ? tl_dp_buckets_to_shard(t->buckets, local,
                                            tl_dp_buckets_shard_params(t->buckets)->data)
                   : tl_memcpy(dev, t->params->data, cpu, local, bytes);
    /* the moments: the whole stage's, or this rank's ZeRO shard of them */
    for (int k = 0; k < 2 && st == TL_OK; k++) {
      float* m = tl_optim_moment(t->optim, k)->data;
      st = t->zero > 0 ? tl_dp_buckets_to_shard(t->buckets, local + (k + 1) * n, m)
                       : tl_memcpy(dev, m, cpu, local + (k + 1) * n, bytes);
    }
  }
  free(local);
  free(cut);
  return st;
}

tl_status tl__trainer_params_placed(tl_trainer* t) {
  if (!t->master) return TL_OK;
  /* ZeRO-3: the slots dropped, the late parameters gathered; ZeRO 1-2: the
   * whole bf16 working copy rounded and gathered from the master shards */
  return t->zero == 3 ? tl_dp_buckets_begin_step(t->buckets)
                      : tl_dp_buckets_gather_params(t->buckets, NULL);
}

/* The stage's parameters (and moments) from the start state or the RNG. */
tl_status tl__trainer_load_start(tl_trainer* t) {
  float* full = NULL;
  int64_t position = 0;
  const char* resume = t->cfg.checkpoint.resume;
  tl_status st;
  if (resume[0] && tl_sharded_is(resume)) {
    st = tl__trainer_place_sharded(t, resume, &position);
  } else {
    st = read_start(t, &full, &position);
    if (st == TL_OK) st = place_full(t, full);
    free(full);
  }
  if (st == TL_OK)
    st = tl_loader_init(&t->loader, &t->train_file, t->cfg.train.batch_size, t->cfg.train.seq_len,
                        position);
  /* a damaged or missing file fails every rank alike: the lowest failing
   * rank reports it, the others stop quietly (TL_ERR_PEER) */
  if (tl__trainer_in_job(t)) {
    const int32_t n = tl_group_size(t->comm.world);
    int32_t lowest = st == TL_OK ? 0 : n - t->world_rank; /* the largest is the lowest rank */
    TL_CHECK(tl_group_all_reduce(t->comm.world, &lowest, &lowest, 1, TL_I32, TL_REDUCE_MAX, NULL));
    const int32_t first = n - lowest;
    if (lowest > 0 && first != t->world_rank) {
      if (st != TL_OK) tl_clear_error();
      return TL_ERRF(TL_ERR_PEER, "rank %d could not load the starting state", first);
    }
  }
  /* the working parameters from the master shards: collective over the
   * dp group, so only once every rank has its shard (a rank whose part of
   * a checkpoint failed must not leave its peers in the gather) */
  return st == TL_OK ? tl__trainer_params_placed(t) : st;
}

tl_status tl_trainer_set_state(tl_trainer* t, const float* full) {
  tl_status st = place_full(t, full);
  int32_t bad = st != TL_OK;
  if (tl__trainer_in_job(t)) /* every rank placed its part before the collective below */
    TL_CHECK(tl_group_all_reduce(t->comm.world, &bad, &bad, 1, TL_I32, TL_REDUCE_MAX, NULL));
  if (st != TL_OK) return st;
  if (bad) return TL_ERRF(TL_ERR_PEER, "another rank could not set the state");
  return tl__trainer_params_placed(t);
}

/* ---- whole-model views -------------------------------------------------- */

/* Stage 0 of this pipeline assembles the shard's flat vector(s) of the
 * stage buffers src[0..k_max) (shard_n elements apart) from every stage. */
static tl_status gather_stages(tl_trainer* t, tl_buffer* const* src, float* shard, int k_max) {
  int64_t n = t->lay->n, shard_n = t->shard.n_local;
  float* local = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1) * (size_t)k_max);
  if (!local) return TL_ERRF(TL_ERR_NOMEM, "out of memory gathering parameters");
  tl_status st = t->be->ops->synchronize(t->be->ctx);
  for (int k = 0; k < k_max && st == TL_OK; k++)
    st = tl_memcpy(tl_cpu(), local + k * n, t->be->device, src[k]->data, sizeof(float) * (size_t)n);
  for (int s = 0; s < t->pp_size && st == TL_OK; s++) {
    const tl_dp_layout* stage = &t->layouts[s];
    int64_t sn = stage->n;
    float* buf = local;
    if (s != t->pp_rank && t->pp_rank != 0) continue;
    if (s != 0 && t->pp_rank == s) { /* a later stage sends to stage 0 */
      st = tl_group_send(t->comm.host_pp, local, (size_t)(sn * k_max), TL_F32, 0, 30000, NULL);
      continue;
    }
    if (s != 0) { /* stage 0 receives stage s */
      buf = malloc(sizeof(float) * (size_t)sn * (size_t)k_max);
      if (!buf) {
        st = TL_ERRF(TL_ERR_NOMEM, "out of memory gathering parameters");
        break;
      }
      st = tl_group_recv(t->comm.host_pp, buf, (size_t)(sn * k_max), TL_F32, s, 30000, NULL);
    }
    for (int i = 0; i < stage->n_segments && st == TL_OK; i++) {
      const tl_dp_segment* seg = &stage->segments[i];
      const int64_t at = t->graph->values[seg->value].offset;
      for (int k = 0; k < k_max; k++)
        memcpy(shard + k * shard_n + at, buf + k * sn + seg->offset,
               sizeof(float) * (size_t)seg->n);
    }
    if (buf != local) free(buf);
  }
  free(local);
  return st;
}

/* The stage buffers src[0..k_max) as whole-model vectors on world rank 0. */
static tl_status gather(tl_trainer* t, tl_buffer* const* src, int k_max, float* out) {
  if (t->dp_rank != 0) return TL_OK; /* replicas are identical: replica 0 speaks */
  int64_t shard_n = t->shard.n_local, total = t->model.n_params;
  float* shard = malloc(sizeof(float) * (size_t)(shard_n > 0 ? shard_n : 1) * (size_t)k_max);
  if (!shard) return TL_ERRF(TL_ERR_NOMEM, "out of memory gathering parameters");
  tl_status st = gather_stages(t, src, shard, k_max);
  if (st == TL_OK && t->pp_rank == 0) {
    if (t->tp_rank != 0) { /* to tensor-parallel rank 0, which places every shard */
      st = tl_group_send(t->comm.host_tp, shard, (size_t)(shard_n * k_max), TL_F32, 0, 30001, NULL);
    } else {
      for (int r = 0; r < t->tp_size && st == TL_OK; r++) {
        /* rank r's layout: the same decisions over the full graph */
        tl_tp_shard other = {0};
        const tl_tp_shard* m = &t->shard;
        float* buf = shard;
        if (r != 0) {
          st = tl_tp_shard_layout(t->full, t->tp_size, r, t->shard.sp, &other);
          m = &other;
          buf = st == TL_OK ? malloc(sizeof(float) * (size_t)(m->n_local > 0 ? m->n_local : 1) *
                                     (size_t)k_max)
                            : NULL;
          if (st == TL_OK && !buf) st = TL_ERRF(TL_ERR_NOMEM, "out of memory gathering parameters");
          if (st == TL_OK)
            st = tl_group_recv(t->comm.host_tp, buf, (size_t)(m->n_local * k_max), TL_F32, r, 30001,
                               NULL);
        }
        for (int k = 0; k < k_max && st == TL_OK && out; k++)
          tl_tp_to_full(m, buf + k * m->n_local, out + k * total);
        if (buf != shard) free(buf);
        tl_tp_shard_free(&other);
      }
    }
  }
  free(shard);
  return st;
}

/* A whole-stage copy (device) of a vector the ZeRO shards of the dp group
 * hold: every dp rank calls it (collective over the group). */
static tl_status unshard(tl_trainer* t, const float* src, bool src_is_shard, tl_buffer** out) {
  TL_CHECK(tl_buffer_create(t->be->device, sizeof(float) * (size_t)(t->lay->n > 0 ? t->lay->n : 1),
                            out));
  tl_status st = tl_dp_buckets_unshard(t->buckets, src, src_is_shard, (*out)->data);
  if (st != TL_OK) tl_buffer_destroy(*out), *out = NULL;
  return st;
}

tl_status tl_trainer_gather(tl_trainer* t, float* out, int moments) {
  tl_buffer* src[3] = {t->params, tl_optim_moment(t->optim, 0), tl_optim_moment(t->optim, 1)};
  if (t->master) src[0] = tl_dp_buckets_shard_params(t->buckets);
  tl_buffer* whole[3] = {NULL, NULL, NULL};
  tl_status st = TL_OK;
  /* what the dp group holds as shards: the moments (ZeRO >= 1), the
   * parameters (their fp32 master: ZeRO-3, ZeRO 1-2 in bf16) */
  for (int k = 0; k < (moments ? 3 : 1) && st == TL_OK; k++) {
    if (k == 0 ? !t->master : t->zero == 0) continue;
    st = unshard(t, src[k]->data, true, &whole[k]);
    if (st == TL_OK) src[k] = whole[k];
  }
  if (st == TL_OK) st = gather(t, src, moments ? 3 : 1, out);
  for (int k = 0; k < 3; k++) tl_buffer_destroy(whole[k]);
  return st;
}

tl_status tl_trainer_gather_grads(tl_trainer* t, float* out) {
  tl_buffer* src[1] = {t->grads};
  tl_buffer* whole = NULL;
  if (t->zero > 0) { /* each rank holds the reduced gradients of its chunks only */
    bool shard = t->zero >= 2;
    TL_CHECK(unshard(t, shard ? tl_dp_buckets_shard_grads(t->buckets) : (float*)t->grads->data,
                     shard, &whole));
    src[0] = whole;
  }
  tl_status st = gather(t, src, 1, out);
  tl_buffer_destroy(whole);
  return st;
}

bool tl_trainer_saves_sharded(const tl_trainer* t) {
  tl_checkpoint_format f = t->cfg.checkpoint.format;
  return f == TL_CHECKPOINT_SHARDED || (f == TL_CHECKPOINT_AUTO && t->zero == 3);
}

tl_status tl_trainer_save(tl_trainer* t, const char* path) {
  if (tl_trainer_saves_sharded(t)) return tl__trainer_save_sharded(t, path);
  int64_t n = t->model.n_params;
  float* full = t->world_rank == 0 ? malloc(sizeof(float) * (size_t)n * 3) : NULL;
  if (t->world_rank == 0 && !full) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
  tl_status st = tl_trainer_gather(t, full, 1);
  if (st == TL_OK && t->world_rank == 0) {
    struct tl_train_state s = {t->step, t->loader.position};
    st = tl_checkpoint_write(path, &t->model, &s, full, full + n, full + 2 * n);
  }
  free(full);
  t->io_host_bytes = t->world_rank == 0 ? 3 * (int64_t)sizeof(float) * n : 0;
  return st;
}

tl_status tl_trainer_export(tl_trainer* t, const char* path) {
  const size_t n = strlen(path);
  if (n < 4 || strcmp(path + n - 4, ".bin") != 0)
    return tl_trainer_export_hf(t, path, (int64_t)tl_env()->export_shard_mb * 1000000);
  if (t->model.cfg.kind != TL_MODEL_GPT)
    return TL_ERRF(TL_ERR_CONFIG,
                   "llm.c model files hold GPT-2 models; model.kind is not gpt (a path not "
                   "ending in .bin is written as a Hugging Face directory)");
  return tl__trainer_export_parts(t, path);
}

/* ---- every copy the same ------------------------------------------------ */

/* 64 bits of a float vector's bits (XXH3), and of a bf16 vector's. */
static uint64_t hash_floats(const float* x, int64_t n) {
  return XXH3_64bits(x, sizeof(float) * (size_t)(n > 0 ? n : 0));
}

static uint64_t hash_bf16(const uint16_t* x, int64_t n) {
  return XXH3_64bits(x, sizeof(uint16_t) * (size_t)(n > 0 ? n : 0));
}

/* Whether this rank's hash agrees with every other member's of a host
 * group (each member sends its hash, 0 where it holds none of the kind;
 * members holding some must agree). */
static tl_status group_agrees(tl_group* g, uint64_t mine, int* agree, int* other) {
  *agree = 1;
  if (!g || tl_group_size(g) == 1) return TL_OK;
  int n = tl_group_size(g);
  uint64_t* all = malloc(sizeof(uint64_t) * (size_t)n);
  if (!all) return TL_ERRF(TL_ERR_NOMEM, "out of memory comparing copies");
  /* a uint64 travels as two int32s: the bits arrive as they left */
  tl_status st = tl_group_all_gather(g, &mine, all, 2 * (size_t)n, TL_I32, NULL);
  for (int r = 0; st == TL_OK && r < n && *agree; r++)
    if (mine && all[r] && all[r] != mine) *agree = 0, *other = r;
  free(all);
  return st;
}

tl_status tl_trainer_copies_agree(tl_trainer* t, int* agree, char* what, size_t cap) {
  int64_t n = t->lay->n;
  float* local = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  if (!local) return TL_ERRF(TL_ERR_NOMEM, "out of memory comparing copies");
  tl_status st = t->be->ops->synchronize(t->be->ctx);
  tl_buffer* stage = NULL; /* the stage's fp32 parameters from the dp group's master shards */
  if (st == TL_OK && t->master)
    st = unshard(t, tl_dp_buckets_shard_params(t->buckets)->data, true, &stage);
  if (st == TL_OK)
    st = tl_memcpy(tl_cpu(), local, t->be->device, stage ? stage->data : t->params->data,
                   sizeof(float) * (size_t)n);
  tl_buffer_destroy(stage);
  /* the hashes of what this rank shares with others: everything with its
   * data-parallel replicas, the tied embedding with the other end of its
   * pipeline, the parameters every tensor-parallel rank holds whole with
   * the rest of its tp group (each a sum over its segments, so that the
   * segments' order does not matter) */
  uint64_t all = hash_floats(local, n), tied = 0, whole = 0;
  /* bf16 ZeRO 1-2: the master's unsharded copy agrees by construction;
   * the whole working copy each replica gathered is what its ops read */
  if (st == TL_OK && t->master && t->zero < 3) {
    uint16_t* work = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
    st = work ? tl_memcpy(tl_cpu(), work, t->be->device, t->params->data,
                          sizeof(uint16_t) * (size_t)n)
              : TL_ERRF(TL_ERR_NOMEM, "out of memory comparing copies");
    if (st == TL_OK) all ^= hash_bf16(work, n) * 31ull;
    free(work);
  }
  for (int i = 0; i < t->lay->n_segments; i++) {
    const tl_dp_segment* s = &t->lay->segments[i];
    const struct tl_tp_param* p = tl_tp_param_of(&t->shard, s->value);
    uint64_t h = hash_floats(local + s->offset, s->n) ^ (uint64_t)(p ? p->full_offset : 0) * 31ull;
    if (tl__trainer_shares(t, s->value)) tied += h | 1;
    if (p && p->kind == TL_TP_WHOLE) whole += h | 1;
  }
  free(local);
  int ok[3] = {1, 1, 1}, other[3] = {0, 0, 0};
  if (st == TL_OK) st = group_agrees(t->comm.host_dp, all, &ok[0], &other[0]);
  if (st == TL_OK) st = group_agrees(t->comm.host_pp, tied, &ok[1], &other[1]);
  if (st == TL_OK) st = group_agrees(t->comm.host_tp, whole, &ok[2], &other[2]);
  if (st != TL_OK) return st;
  /* the job's verdict, and the first disagreeing rank's words */
  char mine[256] = "";
  if (!ok[0] && t->cp_size > 1)
    snprintf(mine, sizeof mine,
             "ranks %d and %d of the data group (dp x cp) of pipeline stage %d (tp rank %d) hold "
             "different parameters",
             tl_group_rank(t->comm.host_dp), other[0], t->pp_rank, t->tp_rank);
  else if (!ok[0])
    snprintf(mine, sizeof mine,
             "data-parallel replicas %d and %d of pipeline stage %d (tp rank %d) hold different "
             "parameters",
             t->dp_rank, other[0], t->pp_rank, t->tp_rank);
  else if (!ok[1])
    snprintf(mine, sizeof mine,
             "the tied token embedding differs between pipeline stages %d and %d (dp rank %d, "
             "tp rank %d)",
             t->pp_rank, other[1], t->dp_rank, t->tp_rank);
  else if (!ok[2])
    snprintf(mine, sizeof mine,
             "tensor-parallel ranks %d and %d hold different copies of a parameter both hold "
             "whole (stage %d, dp rank %d)",
             t->tp_rank, other[2], t->pp_rank, t->dp_rank);
  int32_t bad = mine[0] ? t->world_rank : INT32_MAX;
  if (t->comm.world && tl_group_size(t->comm.world) > 1) {
    int size = tl_group_size(t->comm.world);
    int32_t* bads = malloc(sizeof(int32_t) * (size_t)size);
    if (!bads) return TL_ERRF(TL_ERR_NOMEM, "out of memory comparing copies");
    st = tl_group_all_gather(t->comm.world, &bad, bads, (size_t)size, TL_I32, NULL);
    for (int r = 0; st == TL_OK && r < size; r++)
      if (bads[r] < bad) bad = bads[r];
    free(bads);
    if (st == TL_OK && bad != INT32_MAX)
      st =
          tl_group_broadcast(t->comm.world, mine, sizeof mine / sizeof(int32_t), TL_I32, bad, NULL);
    if (st != TL_OK) return st;
  }
  *agree = bad == INT32_MAX;
  if (what && cap) snprintf(what, cap, "%s", *agree ? "" : mine);
  return TL_OK;
}
