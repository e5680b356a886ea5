/* trainer_shards.c — what each rank holds alone, in and out: sharded
 * checkpoints (sharded.h) written and read slice by slice, and the llm.c
 * model file and the Hugging Face directory (hf.h) every rank writes its
 * slices of. No rank assembles the whole model. */
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
#include "launcher/train/hf.h"
#include "launcher/train/sharded.h"
#include "launcher/train/trainer_impl.h"
#include "tp/tp.h"

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
      p[i] =
          (struct tl_dp_piece){i, l->segments[i].offset, l->segments[i].n, l->segments[i].offset};
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
  buf[0] = t->master ? tl_dp_buckets_shard_params(t->buckets) : t->params;
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
  return t->master ? p->at : p->offset;
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
  if (t->world_rank == root) snprintf((char*)words, sizeof words, "%s", tl_last_error_message());
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

tl_status tl__trainer_save_sharded(tl_trainer* t, const char* path) {
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
    int64_t *ns = malloc(sizeof(int64_t) * (size_t)size),
            *el = malloc(sizeof(int64_t) * (size_t)size);
    int parts = 0;
    if (!ranks || !ns || !el) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a checkpoint");
    for (int r = 0; st == TL_OK && r < size; r++)
      if (all[2 * r + 1] > 0)
        ranks[parts] = r, ns[parts] = all[2 * r], el[parts++] = all[2 * r + 1];
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
tl_status tl__trainer_place_sharded(tl_trainer* t, const char* path, int64_t* position) {
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
  tl_buffer* dev[3] = {t->master ? tl_dp_buckets_shard_params(t->buckets) : t->params,
                       tl_optim_moment(t->optim, 0), tl_optim_moment(t->optim, 1)};
  for (int k = 0; k < 3 && st == TL_OK; k++) {
    bool shard = k == 0 ? t->master : t->zero > 0;
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
    TL_LOG_INFO(
        "resuming from %s at step %lld (sharded: this rank read what it holds, through "
        "at most %.2f MB of host memory)",
        path, (long long)s.step, t->io_host_bytes / 1e6);
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
tl_status tl__trainer_export_parts(tl_trainer* t, const char* path) {
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
    if (st == TL_OK)
      st = each_full_run(t, &t->lay->segments[p->segment], p->offset, p->n, write_run, &c);
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

/* ---- a Hugging Face directory -------------------------------------------- */

struct hf_ctx {
  const tl_hf_export* x;
  const int* fds;
  const float* src;
};

static tl_status write_hf_run(void* user, int64_t full, int64_t n, int64_t done) {
  struct hf_ctx* c = user;
  return tl_hf_export_write(c->x, c->fds, full, n, c->src + done);
}

/* Whether `name` is a weight file an export writes (any shard count). */
static bool weight_file(const char* name) {
  int a, b;
  char end[32];
  return strcmp(name, "model.safetensors") == 0 ||
         strcmp(name, "model.safetensors.index.json") == 0 ||
         (sscanf(name, "model-%5d-of-%5d%31s", &a, &b, end) == 3 &&
          strcmp(end, ".safetensors") == 0);
}

/* A Hugging Face directory (hf.h), each rank writing the parameters it
 * holds alone where the plan puts them, as the llm.c export does: rank 0
 * creates every weight file under a temporary name at its full size with
 * its header, every rank writes its runs, then rank 0 writes config.json
 * (and the index), renames the files and removes weight files of an
 * earlier export that this one does not have. Other files in the
 * directory (a tokenizer, say) are left. */
tl_status tl_trainer_export_hf(tl_trainer* t, const char* dir, int64_t max_file_bytes) {
  tl_hf_export x;
  TL_CHECK(tl_hf_export_plan(&t->model, max_file_bytes, &x));
  char path[TL_PATH_MAX + 96];
  tl_status st = TL_OK;
  if (t->world_rank == 0) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
      st = TL_ERRF(TL_ERR_IO, "cannot create the model directory '%s': %s", dir, strerror(errno));
    for (int f = 0; f < x.n_files && st == TL_OK; f++) {
      snprintf(path, sizeof path, "%s/%s.tmp", dir, x.files[f].name);
      int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 ||
          write(fd, x.files[f].header, (size_t)x.files[f].header_len) !=
              (ssize_t)x.files[f].header_len ||
          ftruncate(fd, (off_t)x.files[f].size) != 0)
        st = TL_ERRF(TL_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
      if (fd >= 0) close(fd);
    }
  }
  st = agree(t, st, "to create the model files");
  if (st != TL_OK) {
    tl_hf_export_free(&x);
    return st;
  }
  int* fds = malloc(sizeof(int) * (size_t)x.n_files);
  struct tl_dp_piece* pieces = NULL;
  int n_pieces = 0;
  tl_buffer* src[3];
  sources(t, src);
  st = fds ? my_pieces(t, &pieces, &n_pieces) : TL_ERRF(TL_ERR_NOMEM, "out of memory");
  for (int f = 0; fds && f < x.n_files; f++) fds[f] = -1;
  for (int f = 0; st == TL_OK && n_pieces > 0 && f < x.n_files; f++) {
    snprintf(path, sizeof path, "%s/%s.tmp", dir, x.files[f].name);
    fds[f] = open(path, O_WRONLY);
    if (fds[f] < 0) st = TL_ERRF(TL_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
  }
  if (st == TL_OK) st = t->be->ops->synchronize(t->be->ctx);
  int64_t most = 0;
  for (int i = 0; i < n_pieces; i++) most = pieces[i].n > most ? pieces[i].n : most;
  float* host = most ? malloc(sizeof(float) * (size_t)most) : NULL;
  if (st == TL_OK && most && !host) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a model file");
  for (int i = 0; i < n_pieces && st == TL_OK; i++) {
    const struct tl_dp_piece* p = &pieces[i];
    struct hf_ctx c = {&x, fds, host};
    st = to_host(t, host, src[0], param_index(t, p), p->n);
    if (st == TL_OK)
      st = each_full_run(t, &t->lay->segments[p->segment], p->offset, p->n, write_hf_run, &c);
  }
  for (int f = 0; fds && f < x.n_files; f++) {
    if (fds[f] >= 0 && fsync(fds[f]) != 0 && st == TL_OK)
      st = TL_ERRF(TL_ERR_IO, "cannot write '%s/%s': %s", dir, x.files[f].name, strerror(errno));
    if (fds[f] >= 0) close(fds[f]);
  }
  t->io_host_bytes = (int64_t)sizeof(float) * most;
  free(host);
  free(pieces);
  free(fds);
  st = agree(t, st, "to write its part of the model files");
  if (t->world_rank == 0) {
    if (st == TL_OK) st = tl_hf_write_config(dir, &t->model);
    /* weight files of an earlier export that this one does not write */
    DIR* d = st == TL_OK ? opendir(dir) : NULL;
    for (struct dirent* e; d && (e = readdir(d));) {
      if (!weight_file(e->d_name)) continue;
      bool ours = x.n_files > 1 && strcmp(e->d_name, "model.safetensors.index.json") == 0;
      for (int f = 0; f < x.n_files; f++) ours |= strcmp(e->d_name, x.files[f].name) == 0;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (!ours) unlink(path);
    }
    if (d) closedir(d);
    if (st == TL_OK && x.n_files > 1) st = tl_hf_write_index(dir, &x);
    for (int f = 0; f < x.n_files; f++) {
      char final[TL_PATH_MAX + 96];
      snprintf(path, sizeof path, "%s/%s.tmp", dir, x.files[f].name);
      snprintf(final, sizeof final, "%s/%s", dir, x.files[f].name);
      if (st == TL_OK && rename(path, final) != 0)
        st = TL_ERRF(TL_ERR_IO, "cannot rename '%s' to '%s': %s", path, final, strerror(errno));
      if (st != TL_OK) unlink(path);
    }
  }
  tl_hf_export_free(&x);
  return agree(t, st, "to commit the model directory");
}
