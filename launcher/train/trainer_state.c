/* trainer_state.c — the whole model in and out of a trainer's shards: the
 * starting weights cut to this rank's stage and tensor-parallel shard, and
 * the shards gathered back (parameters and AdamW moments) for checkpoints,
 * llm.c model files, sampling and --verify. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "launcher/train/checkpoint.h"
#include "launcher/train/sharded.h"
#include "launcher/train/trainer_impl.h"
#include "tp/tp.h"

/* Host copies of the starting state for the whole model: checkpoint, llm.c
 * file, or NULL for the RNG. */
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
    st = tl_llmc_model_read(from, &t->model, *host);
    if (st == TL_OK) TL_LOG_INFO("weights from %s", from);
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
    /* the parameters: the whole stage's, or ZeRO-3's shard of them (the
     * units are gathered from it when the next step or evaluation runs) */
    st = t->zero == 3
             ? tl_dp_buckets_to_shard(t->buckets, local, tl_dp_buckets_shard_params(t->buckets)->data)
             : tl_memcpy(dev, t->params->data, cpu, local, bytes);
    if (st == TL_OK && t->zero == 3) st = tl_dp_buckets_begin_step(t->buckets);
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

static tl_status place_sharded(tl_trainer* t, const char* path, int64_t* position);

/* The stage's parameters (and moments) from the start state or the RNG. */
tl_status tl__trainer_load_start(tl_trainer* t) {
  float* full = NULL;
  int64_t position = 0;
  const char* resume = t->cfg.checkpoint.resume;
  tl_status st;
  if (resume[0] && tl_sharded_is(resume)) {
    st = place_sharded(t, resume, &position);
  } else {
    TL_CHECK(read_start(t, &full, &position));
    st = place_full(t, full);
    free(full);
  }
  if (st == TL_OK)
    st = tl_loader_init(&t->loader, &t->train_file, t->cfg.train.batch_size, t->cfg.train.seq_len,
                        position);
  return st;
}

tl_status tl_trainer_set_state(tl_trainer* t, const float* full) {
  return place_full(t, full);
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
        memcpy(shard + k * shard_n + at, buf + k * sn + seg->offset, sizeof(float) * (size_t)seg->n);
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
            st = tl_group_recv(t->comm.host_tp, buf, (size_t)(m->n_local * k_max), TL_F32, r,
                               30001, NULL);
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
  if (t->zero == 3) src[0] = tl_dp_buckets_shard_params(t->buckets);
  tl_buffer* whole[3] = {NULL, NULL, NULL};
  tl_status st = TL_OK;
  /* what the dp group holds as shards: the moments (ZeRO >= 1), the
   * parameters (ZeRO-3) */
  for (int k = 0; k < (moments ? 3 : 1) && st == TL_OK; k++) {
    if (k == 0 ? t->zero < 3 : t->zero == 0) continue;
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

static tl_status save_sharded(tl_trainer* t, const char* path);

bool tl_trainer_saves_sharded(const tl_trainer* t) {
  tl_checkpoint_format f = t->cfg.checkpoint.format;
  return f == TL_CHECKPOINT_SHARDED || (f == TL_CHECKPOINT_AUTO && t->zero == 3);
}

tl_status tl_trainer_save(tl_trainer* t, const char* path) {
  if (tl_trainer_saves_sharded(t)) return save_sharded(t, path);
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

static tl_status export_parts(tl_trainer* t, const char* path);

tl_status tl_trainer_export(tl_trainer* t, const char* path) {
  if (t->model.cfg.kind != TL_MODEL_GPT)
    return TL_ERRF(TL_ERR_CONFIG, "llm.c model files hold GPT-2 models; model.kind is not gpt");
  return export_parts(t, path);
}

/* ---- what each rank holds alone: sharded checkpoints, exports ----------- */

/* The pieces of the stage's buffers this rank writes: its ZeRO shard, or
 * with ZeRO 0 the whole stage on dp rank 0 (replicas are identical) —
 * less what another rank writes (the tied embedding's second copy, the
 * tensors every tp rank holds whole on ranks other than 0). Every element
 * of the model is in exactly one rank's pieces. */
static tl_status my_pieces(tl_trainer* t, struct tl_dp_piece** out, int* n_out) {
  const tl_dp_layout* l = t->lay;
  bool sharded = t->zero > 0;
  int n = sharded ? tl_dp_buckets_pieces(t->buckets, NULL) : l->n_segments;
  struct tl_dp_piece* p = malloc(sizeof *p * (size_t)(n > 0 ? n : 1));
  if (!p) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
  if (sharded)
    tl_dp_buckets_pieces(t->buckets, p);
  else
    for (int i = 0; i < n; i++)
      p[i] = (struct tl_dp_piece){i, l->segments[i].offset, l->segments[i].n, l->segments[i].offset};
  int k = 0;
  for (int i = 0; i < n; i++)
    if ((sharded || t->dp_rank == 0) &&
        !tl__trainer_counted_elsewhere(t, &l->segments[p[i].segment]))
      p[k++] = p[i];
  *out = p;
  *n_out = k;
  return TL_OK;
}

/* Calls f for each run of the full flat vector that elements [at, at + n)
 * of layout segment `seg` hold (a tensor tp splits lies in runs). */
typedef tl_status (*run_fn)(void* user, int64_t full, int64_t n, int64_t done);
static tl_status each_full_run(const tl_trainer* t, const tl_dp_segment* seg, int64_t at, int64_t n,
                               run_fn f, void* user) {
  const struct tl_tp_param* p = tl_tp_param_of(&t->shard, seg->value);
  if (!p) return TL_ERRF(TL_ERR_INTERNAL, "a stage parameter is no tensor of the model");
  int64_t i0 = at - seg->offset;
  for (int64_t i = i0, run; i < i0 + n; i += run) {
    int64_t full = tl_tp_full_index(&t->shard, p, i, &run);
    if (run > i0 + n - i) run = i0 + n - i;
    TL_CHECK(f(user, full, run, i - i0));
  }
  return TL_OK;
}

/* The device buffers a piece reads: the parameters (whole stage, or
 * ZeRO-3's shard: index by param_index) and the moments (whole stage, or
 * the ZeRO shard: piece.at either way). */
static void sources(tl_trainer* t, tl_buffer* buf[3]) {
  buf[0] = t->zero == 3 ? tl_dp_buckets_shard_params(t->buckets) : t->params;
  buf[1] = tl_optim_moment(t->optim, 0);
  buf[2] = tl_optim_moment(t->optim, 1);
}

/* n floats of device buffer `buf` from element `at`, to host `dst`. */
static tl_status to_host(const tl_trainer* t, float* dst, const tl_buffer* buf, int64_t at,
                         int64_t n) {
  return tl_memcpy(tl_cpu(), dst, t->be->device, (const float*)buf->data + at,
                   sizeof(float) * (size_t)n);
}

static int64_t param_index(const tl_trainer* t, const struct tl_dp_piece* p) {
  return t->zero == 3 ? p->at : p->offset;
}

struct collect {
  struct tl_slice* slices;
  int n, cap;
};

static tl_status add_slice(void* user, int64_t full, int64_t n, int64_t done) {
  struct collect* c = user;
  (void)done;
  if (c->n > 0 && c->slices[c->n - 1].full + c->slices[c->n - 1].n == full) {
    c->slices[c->n - 1].n += n; /* runs that meet are one slice */
    return TL_OK;
  }
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 256;
    struct tl_slice* s = realloc(c->slices, sizeof *s * (size_t)cap);
    if (!s) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
    c->slices = s, c->cap = cap;
  }
  c->slices[c->n++] = (struct tl_slice){full, n};
  return TL_OK;
}

/* Whether any rank's status failed (collective): the first failing rank
 * returns its own error, every other rank TL_ERR_PEER with that rank's
 * message — so that the job's end is reported once, by the rank it began
 * on. */
static tl_status agree(tl_trainer* t, tl_status mine, const char* what) {
  if (!t->comm.world || tl_group_size(t->comm.world) == 1) return mine;
  int size = tl_group_size(t->comm.world);
  int32_t first = mine != TL_OK ? size - t->world_rank : 0; /* the lowest rank wins */
  TL_CHECK(tl_group_all_reduce(t->comm.world, &first, &first, 1, TL_I32, TL_REDUCE_MAX, NULL));
  if (first == 0) return TL_OK;
  int root = size - first;
  int32_t words[256];
  memset(words, 0, sizeof words);
  if (t->world_rank == root) snprintf((char*)words, sizeof words, "%s", tl_last_error());
  TL_CHECK(tl_group_broadcast(t->comm.world, words, 256, TL_I32, root, NULL));
  ((char*)words)[sizeof words - 1] = '\0';
  if (t->world_rank == root) return mine;
  /* TL_ERR_PEER: the failing rank reports it (the CLI stays quiet) */
  return TL_ERRF(TL_ERR_PEER, "rank %d failed %s: %s", root, what, (const char*)words);
}

/* Removes a directory of plain files (a checkpoint's). */
static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  char path[2048];
  for (struct dirent* e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static tl_status save_sharded(tl_trainer* t, const char* path) {
  char tmp[TL_PATH_MAX + 64], old[TL_PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  snprintf(old, sizeof old, "%s.old", path);
  tl_status st = TL_OK;
  if (t->world_rank == 0) {
    remove_dir(tmp);
    if (mkdir(tmp, 0755) != 0)
      st = TL_ERRF(TL_ERR_IO, "cannot create checkpoint directory '%s': %s", tmp, strerror(errno));
  }
  TL_CHECK(agree(t, st, "to create the checkpoint directory"));
  /* 1. this rank's part: its pieces, as slices of the full vector */
  struct tl_dp_piece* pieces = NULL;
  int n_pieces = 0;
  tl_buffer* src[3];
  float* data = NULL;
  struct collect c = {0};
  int64_t elements = 0;
  sources(t, src);
  st = my_pieces(t, &pieces, &n_pieces);
  for (int i = 0; i < n_pieces; i++) elements += pieces[i].n;
  if (st == TL_OK) st = t->be->ops->synchronize(t->be->ctx);
  if (st == TL_OK && n_pieces > 0) {
    data = malloc(sizeof(float) * 3 * (size_t)elements);
    if (!data) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
  }
  /* the data in slice order: each piece's elements follow its runs in
   * order, and runs never go backwards within a piece */
  int64_t at = 0;
  for (int i = 0; i < n_pieces && st == TL_OK; i++) {
    const struct tl_dp_piece* p = &pieces[i];
    st = each_full_run(t, &t->lay->segments[p->segment], p->offset, p->n, add_slice, &c);
    if (st == TL_OK) st = to_host(t, data + at, src[0], param_index(t, p), p->n);
    if (st == TL_OK) st = to_host(t, data + elements + at, src[1], p->at, p->n);
    if (st == TL_OK) st = to_host(t, data + 2 * elements + at, src[2], p->at, p->n);
    at += p->n;
  }
  if (st == TL_OK && n_pieces > 0)
    st = tl_sharded_write_part(tmp, t->world_rank, &t->model, c.slices, c.n, data, data + elements,
                               data + 2 * elements);
  t->io_host_bytes = (int64_t)sizeof(float) * 3 * elements;
  free(data);
  free(pieces);
  free(c.slices);
  st = agree(t, st, "to write its part of the checkpoint");
  if (st != TL_OK) return st;
  /* 2. the index and the rename, on rank 0, from every rank's counts */
  int size = t->comm.world ? tl_group_size(t->comm.world) : 1;
  int64_t mine[2] = {c.n, elements};
  int64_t* all = malloc(sizeof(int64_t) * 2 * (size_t)size);
  if (!all) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
  if (size > 1)
    st = tl_group_all_gather(t->comm.world, mine, all, 2 * (size_t)size, TL_I64, NULL);
  else
    all[0] = mine[0], all[1] = mine[1];
  if (st == TL_OK && t->world_rank == 0) {
    int* ranks = malloc(sizeof(int) * (size_t)size);
    int64_t *ns = malloc(sizeof(int64_t) * (size_t)size), *el = malloc(sizeof(int64_t) * (size_t)size);
    int parts = 0;
    if (!ranks || !ns || !el) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
    for (int r = 0; st == TL_OK && r < size; r++)
      if (all[2 * r + 1] > 0) ranks[parts] = r, ns[parts] = all[2 * r], el[parts++] = all[2 * r + 1];
    struct stat sb;
    bool exists = stat(path, &sb) == 0;
    if (st == TL_OK && exists) {
      remove_dir(old);
      if (S_ISDIR(sb.st_mode) ? rename(path, old) != 0 : unlink(path) != 0)
        st = TL_ERRF(TL_ERR_IO, "cannot replace the checkpoint '%s': %s", path, strerror(errno));
    }
    if (st == TL_OK) {
      struct tl_train_state s = {t->step, t->loader.position};
      st = tl_sharded_commit(tmp, path, &t->model, &s, parts, ranks, ns, el);
    }
    if (st == TL_OK && exists) remove_dir(old);
    free(ranks);
    free(ns);
    free(el);
  }
  free(all);
  return agree(t, st, "to commit the checkpoint");
}

struct place {
  tl_sharded_reader* r;
  int which;
  float* dst;
};

static tl_status read_run(void* user, int64_t full, int64_t n, int64_t done) {
  struct place* p = user;
  return tl_sharded_read(p->r, p->which, full, n, p->dst + done);
}

/* Reads into dst[k] (host, laid out as the destination) what this rank
 * holds of the checkpoint: for each of the parameters and moments either
 * the whole stage (layout order) or its ZeRO shard (piece.at order). */
static tl_status place_sharded(tl_trainer* t, const char* path, int64_t* position) {
  tl_sharded_reader* r = NULL;
  TL_CHECK(tl_sharded_open(path, &t->model, &r));
  struct tl_train_state s = tl_sharded_state(r);
  t->step = s.step;
  *position = s.data_position;
  const tl_dp_layout* l = t->lay;
  int n_pieces = t->buckets ? tl_dp_buckets_pieces(t->buckets, NULL) : 0;
  struct tl_dp_piece* pieces = malloc(sizeof *pieces * (size_t)(n_pieces > 0 ? n_pieces : 1));
  tl_status st = pieces ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory reading a checkpoint");
  if (st == TL_OK && t->buckets) tl_dp_buckets_pieces(t->buckets, pieces);
  t->io_host_bytes = 0;
  tl_buffer* dev[3] = {t->zero == 3 ? tl_dp_buckets_shard_params(t->buckets) : t->params,
                       tl_optim_moment(t->optim, 0), tl_optim_moment(t->optim, 1)};
  for (int k = 0; k < 3 && st == TL_OK; k++) {
    bool shard = k == 0 ? t->zero == 3 : t->zero > 0;
    float* host = malloc(dev[k]->bytes);
    if (!host) {
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading a checkpoint");
      break;
    }
    if ((int64_t)dev[k]->bytes > t->io_host_bytes) t->io_host_bytes = (int64_t)dev[k]->bytes;
    if (shard) {
      for (int i = 0; i < n_pieces && st == TL_OK; i++) {
        struct place p = {r, k, host + pieces[i].at};
        st = each_full_run(t, &l->segments[pieces[i].segment], pieces[i].offset, pieces[i].n,
                           read_run, &p);
      }
    } else {
      for (int i = 0; i < l->n_segments && st == TL_OK; i++) {
        struct place p = {r, k, host + l->segments[i].offset};
        st = each_full_run(t, &l->segments[i], l->segments[i].offset, l->segments[i].n, read_run,
                           &p);
      }
    }
    if (st == TL_OK) st = tl_memcpy(t->be->device, dev[k]->data, tl_cpu(), host, dev[k]->bytes);
    free(host);
  }
  free(pieces);
  tl_sharded_close(r);
  if (st == TL_OK)
    TL_LOG_INFO("resuming from %s at step %lld (sharded: this rank read what it holds, through "
                "at most %.2f MB of host memory)",
                path, (long long)s.step, t->io_host_bytes / 1e6);
  if (st == TL_OK && t->zero == 3) st = tl_dp_buckets_begin_step(t->buckets);
  return st;
}

struct pwrite_ctx {
  int fd;
  const float* src;
  const char* path;
};

static tl_status write_run(void* user, int64_t full, int64_t n, int64_t done) {
  struct pwrite_ctx* c = user;
  const char* p = (const char*)(c->src + done);
  size_t left = sizeof(float) * (size_t)n;
  off_t at = (off_t)(1024 + 4 * full);
  while (left > 0) {
    ssize_t w = pwrite(c->fd, p, left, at);
    if (w <= 0) return TL_ERRF(TL_ERR_IO, "cannot write '%s': %s", c->path, strerror(errno));
    p += w, at += w, left -= (size_t)w;
  }
  return TL_OK;
}

/* The llm.c model file, each rank writing the parameters it holds alone at
 * their place in it: no rank holds the whole model. Rank 0 creates the
 * file under a temporary name at its full size and renames it once every
 * rank's runs are in. */
static tl_status export_parts(tl_trainer* t, const char* path) {
  char tmp[TL_PATH_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  tl_status st = TL_OK;
  if (t->world_rank == 0) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int32_t h[256];
    tl_llmc_header(&t->model, h);
    if (fd < 0 || write(fd, h, sizeof h) != (ssize_t)sizeof h ||
        ftruncate(fd, (off_t)(1024 + 4 * t->model.n_params)) != 0)
      st = TL_ERRF(TL_ERR_IO, "cannot create model file '%s': %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
  }
  TL_CHECK(agree(t, st, "to create the model file"));
  struct tl_dp_piece* pieces = NULL;
  int n_pieces = 0;
  tl_buffer* src[3];
  sources(t, src);
  st = my_pieces(t, &pieces, &n_pieces);
  if (st == TL_OK) st = t->be->ops->synchronize(t->be->ctx);
  /* one piece at a time through a host buffer of the largest piece */
  int64_t most = 0;
  for (int i = 0; i < n_pieces; i++) most = pieces[i].n > most ? pieces[i].n : most;
  float* host = most ? malloc(sizeof(float) * (size_t)most) : NULL;
  if (st == TL_OK && most && !host) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a model file");
  int fd = -1;
  if (st == TL_OK && n_pieces > 0) {
    fd = open(tmp, O_WRONLY);
    if (fd < 0) st = TL_ERRF(TL_ERR_IO, "cannot open model file '%s': %s", tmp, strerror(errno));
  }
  for (int i = 0; i < n_pieces && st == TL_OK; i++) {
    const struct tl_dp_piece* p = &pieces[i];
    struct pwrite_ctx c = {fd, host, tmp};
    st = to_host(t, host, src[0], param_index(t, p), p->n);
    if (st == TL_OK) st = each_full_run(t, &t->lay->segments[p->segment], p->offset, p->n, write_run, &c);
  }
  if (fd >= 0 && fsync(fd) != 0 && st == TL_OK)
    st = TL_ERRF(TL_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
  if (fd >= 0) close(fd);
  t->io_host_bytes = (int64_t)sizeof(float) * most;
  free(host);
  free(pieces);
  st = agree(t, st, "to write its part of the model file");
  if (t->world_rank == 0) {
    if (st == TL_OK && rename(tmp, path) != 0)
      st = TL_ERRF(TL_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (st != TL_OK) unlink(tmp);
  }
  return agree(t, st, "to commit the model file");
}

int64_t tl_trainer_io_host_bytes(const tl_trainer* t) {
  return t->io_host_bytes;
}

/* ---- every copy the same ------------------------------------------------ */

/* 64 bits of a float vector's bits (FNV-1a over 32-bit words, folded). */
static uint64_t hash_floats(const float* x, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  const uint32_t* w = (const uint32_t*)(const void*)x;
  for (int64_t i = 0; i < n; i++) h = (h ^ w[i]) * 1099511628211ull;
  return h;
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
  tl_buffer* stage = NULL; /* ZeRO-3: the stage's parameters from the dp group's shards */
  if (st == TL_OK && t->zero == 3)
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
  for (int i = 0; i < t->lay->n_segments; i++) {
    const tl_dp_segment* s = &t->lay->segments[i];
    const struct tl_tp_param* p = tl_tp_param_of(&t->shard, s->value);
    uint64_t h = hash_floats(local + s->offset, s->n) ^ (uint64_t)(p ? p->full_offset : 0) * 31ull;
    if (tl_pp_stage_shares(t->me, s->value)) tied += h | 1;
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
  if (!ok[0])
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
      st = tl_group_broadcast(t->comm.world, mine, sizeof mine / sizeof(int32_t), TL_I32, bad,
                              NULL);
    if (st != TL_OK) return st;
  }
  *agree = bad == INT32_MAX;
  if (what && cap) snprintf(what, cap, "%s", *agree ? "" : mine);
  return TL_OK;
}
