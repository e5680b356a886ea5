/* config_check.c — the config's validation: every field's range, then the
 * rules that tie fields together (the mesh must divide the model and the
 * batch), then, once the job exists, the world size.
 *
 * It runs on the struct, not on JSON, so the same checks guard what a file
 * says (tl_config_parse) and what a program is about to write
 * (tl_config_save: a saved config always loads back). A rule reading a field
 * that was already reported is skipped: one mistake, one message. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/config.h"
#include "core/config_impl.h"

#define N_FIELDS 64

static int index_of(size_t offset) {
  for (int i = 0; i < tl__config_n_fields; i++)
    if (tl__config_fields[i].offset == offset) return i;
  return -1;
}

static bool in_range(const struct tl__config_field* f, double x) {
  if (isnan(x)) return false;
  if (f->lo_open ? !(x > f->lo) : !(x >= f->lo)) return false;
  if (f->no_hi) return isfinite(x);
  return f->hi_open ? x < f->hi : x <= f->hi;
}

/* Range check of one field; false when it is out of range (and reported). */
static bool check_field(const struct tl__config_field* f, const struct tl_config* cfg,
                        struct tl__problems* p) {
  const char* at = (const char*)cfg + f->offset;
  char expect[192];
  tl__field_expect(f, expect, sizeof expect);
  switch (f->type) {
    case TL__FIELD_INT: {
      int x = *(const int*)at;
      if (in_range(f, x)) return true;
      tl__problem(p, "%s.%s = %d: expected %s", f->section, f->key, x, expect);
      return false;
    }
    case TL__FIELD_U64: {
      uint64_t x = *(const uint64_t*)at;
      if (x <= (uint64_t)INT64_MAX) return true;
      tl__problem(p, "%s.%s = %llu: expected %s", f->section, f->key, (unsigned long long)x,
                  expect);
      return false;
    }
    case TL__FIELD_FLOAT:
    case TL__FIELD_DOUBLE: {
      double x = f->type == TL__FIELD_FLOAT ? *(const float*)at : *(const double*)at;
      if (in_range(f, x)) return true;
      tl__problem(p, "%s.%s = %g: expected %s", f->section, f->key, x, expect);
      return false;
    }
    case TL__FIELD_BOOL:
      return true;
    case TL__FIELD_STRING:
      if (memchr(at, '\0', TL_PATH_MAX)) return true;
      tl__problem(p, "%s.%s: not NUL-terminated within %d bytes: expected %s", f->section, f->key,
                  TL_PATH_MAX, expect);
      return false;
    case TL__FIELD_ENUM: {
      int x = *(const int*)at, n = 0;
      while (f->names[n]) n++;
      if (x >= 0 && x < n) return true;
      tl__problem(p, "%s.%s = %d (as a number): expected %s", f->section, f->key, x, expect);
      return false;
    }
    case TL__FIELD_ORDER: {
      const tl_axis* o = (const tl_axis*)at;
      int seen = 0;
      for (int i = 0; i < TL_N_AXES; i++)
        if ((int)o[i] >= 0 && (int)o[i] < TL_N_AXES) seen |= 1 << o[i];
      if (seen == (1 << TL_N_AXES) - 1) return true;
      tl__problem(p, "%s.%s = [%d, %d, %d, %d] (as numbers): expected %s", f->section, f->key, o[0],
                  o[1], o[2], o[3], expect);
      return false;
    }
    case TL__FIELD_STAGES: {
      const struct tl_schedule_config* sc = &cfg->schedule;
      if (sc->n_stage_layers < 0 || sc->n_stage_layers > TL_MAX_STAGES) {
        tl__problem(p, "schedule.n_stage_layers = %d: expected %s", sc->n_stage_layers, expect);
        return false;
      }
      bool ok = true;
      for (int i = 0; i < sc->n_stage_layers; i++)
        if (sc->stage_layers[i] < 1) {
          tl__problem(p, "schedule.stage_layers[%d] = %d: expected an integer >= 1", i,
                      sc->stage_layers[i]);
          ok = false;
        }
      return ok;
    }
    case TL__FIELD_ROPE_SCALING: {
      const struct tl_rope_scaling* r = (const struct tl_rope_scaling*)at;
      if (r->factor == 0 && r->low_freq_factor == 0 && r->high_freq_factor == 0 &&
          r->original_max_position_embeddings == 0)
        return true; /* null: no scaling */
      bool ok = true;
      if (!(r->factor >= 1 && isfinite(r->factor))) {
        tl__problem(p, "%s.%s.factor = %g: expected a number >= 1", f->section, f->key, r->factor);
        ok = false;
      }
      if (!(r->low_freq_factor > 0 && isfinite(r->low_freq_factor))) {
        tl__problem(p, "%s.%s.low_freq_factor = %g: expected a number > 0", f->section, f->key,
                    r->low_freq_factor);
        ok = false;
      } else if (!(r->high_freq_factor > r->low_freq_factor && isfinite(r->high_freq_factor))) {
        tl__problem(p, "%s.%s.high_freq_factor = %g: expected a number > low_freq_factor = %g",
                    f->section, f->key, r->high_freq_factor, r->low_freq_factor);
        ok = false;
      }
      if (r->original_max_position_embeddings < 1) {
        tl__problem(p, "%s.%s.original_max_position_embeddings = %d: expected an integer >= 1",
                    f->section, f->key, r->original_max_position_embeddings);
        ok = false;
      }
      return ok;
    }
    case TL__FIELD_SIZES: {
      const struct tl_model_config* m = &cfg->model;
      if (m->n_mlp_layers < 1 || m->n_mlp_layers > TL_MLP_MAX_LAYERS) {
        tl__problem(p, "model.n_mlp_layers = %d: expected %s", m->n_mlp_layers, expect);
        return false;
      }
      bool ok = true;
      for (int i = 0; i <= m->n_mlp_layers; i++)
        if (m->mlp_sizes[i] < 1) {
          tl__problem(p, "model.mlp_sizes[%d] = %d: expected an integer >= 1", i, m->mlp_sizes[i]);
          ok = false;
        }
      return ok;
    }
  }
  return true;
}

static int gcd(int a, int b) {
  while (b) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

void tl__config_validate(const struct tl_config* cfg, const bool* bad_in, struct tl__problems* p) {
  bool bad[N_FIELDS] = {false};
  TL_ASSERT(tl__config_n_fields <= N_FIELDS);
  /* 1. every field on its own */
  for (int i = 0; i < tl__config_n_fields; i++) {
    if (bad_in && bad_in[i]) {
      bad[i] = true;
      continue;
    }
    bad[i] = !check_field(&tl__config_fields[i], cfg, p);
  }

  /* 2. the rules between fields, each only when the fields it reads are sound */
#define OK(sec, name) (!bad[index_of(offsetof(struct tl_config, sec.name))])
  const struct tl_model_config* m = &cfg->model;
  const struct tl_mesh_config* mesh = &cfg->mesh;
  const struct tl_schedule_config* s = &cfg->schedule;
  const struct tl_train_config* t = &cfg->train;
  const bool gpt = OK(model, kind) && m->kind == TL_MODEL_GPT;
  const bool mlp = OK(model, kind) && m->kind == TL_MODEL_MLP;
  const bool llama = OK(model, kind) && m->kind == TL_MODEL_LLAMA;
  const bool transformer = gpt || llama; /* the fields and rules they share */

  if (OK(mesh, dp) && OK(mesh, tp) && OK(mesh, pp) && OK(mesh, cp)) {
    long long n = tl_config_ranks(mesh);
    if (n > (1 << 20))
      tl__problem(p,
                  "mesh: dp * tp * pp * cp = %d * %d * %d * %d = %lld ranks: expected at most %d",
                  mesh->dp, mesh->tp, mesh->pp, mesh->cp, n, 1 << 20);
  }

  /* The model must split the way the mesh asks. */
  int layers = -1;
  const char* layers_name = "";
  if (transformer && OK(model, n_layers)) layers = m->n_layers, layers_name = "model.n_layers";
  if (mlp && OK(model, mlp_sizes))
    layers = m->n_mlp_layers, layers_name = "the MLP's layers (length of model.mlp_sizes - 1)";
  if (mlp && OK(model, mlp_sizes) && OK(model, vocab_size) &&
      m->mlp_sizes[m->n_mlp_layers] != m->vocab_size)
    tl__problem(p,
                "model.mlp_sizes[%d] = %d: must equal model.vocab_size = %d (the MLP predicts the "
                "next token)",
                m->n_mlp_layers, m->mlp_sizes[m->n_mlp_layers], m->vocab_size);
  if (OK(schedule, stage_layers) && s->n_stage_layers > 0) {
    int sum = 0;
    for (int i = 0; i < s->n_stage_layers; i++) sum += s->stage_layers[i];
    const bool inter =
        OK(schedule, kind) && OK(schedule, virtual_stages) && s->kind == TL_SCHEDULE_INTERLEAVED;
    if (inter && OK(mesh, pp) && s->n_stage_layers != mesh->pp * s->virtual_stages)
      tl__problem(p,
                  "schedule.stage_layers has %d entries: expected one per virtual stage, mesh.pp "
                  "* schedule.virtual_stages = %d * %d (chunk c of stage s is entry c * pp + s)",
                  s->n_stage_layers, mesh->pp, s->virtual_stages);
    else if (!inter && OK(mesh, pp) && s->n_stage_layers != mesh->pp)
      tl__problem(p, "schedule.stage_layers has %d entries: expected one per stage, mesh.pp = %d",
                  s->n_stage_layers, mesh->pp);
    else if (layers > 0 && sum != layers)
      tl__problem(p, "schedule.stage_layers adds up to %d layers: expected %s = %d", sum,
                  layers_name, layers);
  }
  if (layers > 0 && OK(mesh, pp) && mesh->pp > layers)
    tl__problem(p, "mesh.pp = %d: must be <= %s = %d (each pipeline stage needs a layer)", mesh->pp,
                layers_name, layers);

  if (transformer) {
    if (OK(model, n_embd) && OK(model, n_heads) && m->n_embd % m->n_heads != 0)
      tl__problem(p, "model.n_embd = %d: must be divisible by model.n_heads = %d (head size)",
                  m->n_embd, m->n_heads);
    if (OK(mesh, tp) && OK(model, n_heads) && m->n_heads % mesh->tp != 0)
      tl__problem(p,
                  "mesh.tp = %d: must divide model.n_heads = %d (each tensor-parallel rank holds "
                  "n_heads / tp heads)",
                  mesh->tp, m->n_heads);
    if (gpt && OK(mesh, tp) && OK(model, n_embd) && m->n_embd % mesh->tp != 0)
      tl__problem(p, "mesh.tp = %d: must divide model.n_embd = %d", mesh->tp, m->n_embd);
    if (OK(model, padded_vocab_size) && OK(model, vocab_size) && m->padded_vocab_size != 0 &&
        m->padded_vocab_size < m->vocab_size)
      tl__problem(p,
                  "model.padded_vocab_size = %d: expected 0 (automatic) or at least "
                  "model.vocab_size = %d",
                  m->padded_vocab_size, m->vocab_size);
    else if (OK(model, padded_vocab_size) && OK(model, vocab_size) && OK(mesh, tp)) {
      int vp = tl_config_padded_vocab(m);
      if (vp % mesh->tp != 0) {
        int step = 128 / gcd(128, mesh->tp) * mesh->tp;
        long long fix = ((long long)m->vocab_size + step - 1) / step * step;
        tl__problem(p,
                    "mesh.tp = %d: must divide the padded vocabulary %d (split across "
                    "tensor-parallel ranks); set model.padded_vocab_size to %lld",
                    mesh->tp, vp, fix);
      }
    }
    if (OK(train, seq_len) && OK(model, max_seq_len) && t->seq_len > m->max_seq_len)
      tl__problem(p, "train.seq_len = %d: must be <= model.max_seq_len = %d", t->seq_len,
                  m->max_seq_len);
    const int cp = OK(mesh, cp) ? mesh->cp : 1;
    if (cp > 1 && OK(train, seq_len) && t->seq_len % (2 * cp) != 0)
      tl__problem(p,
                  "mesh.cp = %d: context parallelism cuts each sequence in 2 x cp = %d chunks "
                  "(rank i holds chunks i and %d - i); train.seq_len = %d must be divisible by %d",
                  cp, 2 * cp, 2 * cp - 1, t->seq_len, 2 * cp);
    else if (OK(parallel, sequence_parallel) && cfg->parallel.sequence_parallel && OK(mesh, tp) &&
             OK(train, seq_len) && t->seq_len / cp % mesh->tp != 0)
      tl__problem(p,
                  "parallel.sequence_parallel = true: train.seq_len%s = %d must be divisible by "
                  "mesh.tp = %d",
                  cp > 1 ? " / mesh.cp" : "", t->seq_len / cp, mesh->tp);
    if (OK(train, sample_top_k) && OK(model, vocab_size) && t->sample_top_k > m->vocab_size)
      tl__problem(p, "train.sample_top_k = %d: must be <= model.vocab_size = %d", t->sample_top_k,
                  m->vocab_size);
  }
  if (llama) {
    const int kv = tl_config_kv_heads(m);
    if (OK(model, n_embd) && OK(model, n_heads) && m->n_embd % m->n_heads == 0 &&
        (m->n_embd / m->n_heads) % 2 != 0)
      tl__problem(p,
                  "model.n_embd = %d with model.n_heads = %d: heads of %d channels; rotary "
                  "embeddings pair channels, so the head size must be even",
                  m->n_embd, m->n_heads, m->n_embd / m->n_heads);
    if (OK(model, n_kv_heads) && OK(model, n_heads) && m->n_heads % kv != 0)
      tl__problem(p,
                  "model.n_kv_heads = %d: must divide model.n_heads = %d (query heads share "
                  "key/value heads in equal groups)",
                  m->n_kv_heads, m->n_heads);
    else if (OK(model, n_kv_heads) && OK(model, n_heads) && OK(mesh, tp) && kv % mesh->tp != 0)
      tl__problem(p,
                  "mesh.tp = %d: must divide model.n_kv_heads = %d (each tensor-parallel rank "
                  "holds n_kv_heads / tp key/value heads; they are not replicated across ranks)",
                  mesh->tp, kv);
    if (OK(model, ffn_hidden) && OK(model, n_embd) && OK(mesh, tp) &&
        tl_config_ffn_hidden(m) % mesh->tp != 0)
      tl__problem(p,
                  "mesh.tp = %d: must divide the MLP width %d (model.ffn_hidden%s; its gate and up "
                  "projections are split across tensor-parallel ranks)",
                  mesh->tp, tl_config_ffn_hidden(m),
                  m->ffn_hidden ? ""
                                : " = 0: 8/3 n_embd "
                                  "rounded up to 256");
  }
  if (mlp) {
    /* layers pair up column- then row-parallel (tp/tp.h): layer 2k splits
     * its outputs mlp_sizes[2k+1], layer 2k+1 the same as its inputs, and
     * with an odd count the last layer splits the vocabulary; the pairs'
     * outputs stay whole */
    if (OK(model, mlp_sizes) && OK(mesh, tp)) {
      int n = m->n_mlp_layers;
      for (int i = 1; i <= n; i += 2)
        if (m->mlp_sizes[i] % mesh->tp != 0)
          tl__problem(p,
                      i < n ? "mesh.tp = %d: must divide the hidden size model.mlp_sizes[%d] = %d "
                              "(the outputs of layer %d are split across tensor-parallel ranks)"
                            : "mesh.tp = %d: must divide the output size model.mlp_sizes[%d] = %d "
                              "(with an odd number of layers the last one is split by outputs)",
                      mesh->tp, i, m->mlp_sizes[i], i - 1);
    }
    if (OK(parallel, sequence_parallel) && cfg->parallel.sequence_parallel)
      tl__problem(p,
                  "parallel.sequence_parallel = true: only applies to model.kind \"gpt\" or "
                  "\"llama\" (this model is an \"mlp\")");
  }

  /* The global batch must split into replicas and micro-batches. */
  if (OK(train, batch_size) && OK(mesh, dp)) {
    if (t->batch_size % mesh->dp != 0) {
      tl__problem(p,
                  "train.batch_size = %d: must be divisible by mesh.dp = %d (each data-parallel "
                  "replica takes batch_size / dp sequences)",
                  t->batch_size, mesh->dp);
    } else if (OK(schedule, micro_batches)) {
      int per_replica = t->batch_size / mesh->dp;
      if (per_replica % s->micro_batches != 0)
        tl__problem(p,
                    "schedule.micro_batches = %d: must divide each replica's batch "
                    "train.batch_size / mesh.dp = %d / %d = %d",
                    s->micro_batches, t->batch_size, mesh->dp, per_replica);
    }
  }

  /* Schedules. */
  if (OK(schedule, kind) && OK(schedule, virtual_stages)) {
    if (s->kind != TL_SCHEDULE_INTERLEAVED && s->virtual_stages != 1)
      tl__problem(p,
                  "schedule.virtual_stages = %d: only schedule.kind \"interleaved\" uses virtual "
                  "stages (expected 1 for \"%s\")",
                  s->virtual_stages, tl_schedule_kind_name(s->kind));
  }
  /* the interleaved schedule: v >= 2 chunks per stage, each of a layer at
   * least, the micro-batches going round in groups of mesh.pp */
  if (OK(schedule, kind) && OK(schedule, virtual_stages) && s->kind == TL_SCHEDULE_INTERLEAVED) {
    const int v = s->virtual_stages;
    if (v < 2 || v > TL_MAX_VIRTUAL_STAGES)
      tl__problem(p,
                  "schedule.virtual_stages = %d with schedule.kind \"interleaved\": expected 2 "
                  "to %d model chunks per pipeline stage (1 is schedule.kind \"1f1b\")",
                  v, TL_MAX_VIRTUAL_STAGES);
    else if (OK(mesh, pp) && mesh->pp < 2)
      tl__problem(p,
                  "schedule.kind = \"interleaved\" with mesh.pp = %d: interleaving needs a "
                  "pipeline of at least 2 stages",
                  mesh->pp);
    else if (OK(mesh, pp) && mesh->pp * v > TL_MAX_STAGES)
      tl__problem(p,
                  "schedule.virtual_stages = %d with mesh.pp = %d: %d virtual stages, expected at "
                  "most %d",
                  v, mesh->pp, mesh->pp * v, TL_MAX_STAGES);
    else if (OK(mesh, pp) && layers > 0 && mesh->pp * v > layers)
      tl__problem(p,
                  "schedule.virtual_stages = %d with mesh.pp = %d: %d model chunks for %s = %d "
                  "(each chunk needs a layer)",
                  v, mesh->pp, mesh->pp * v, layers_name, layers);
    if (OK(mesh, pp) && OK(schedule, micro_batches) && mesh->pp >= 2 &&
        s->micro_batches % mesh->pp != 0)
      tl__problem(p,
                  "schedule.micro_batches = %d with schedule.kind \"interleaved\": expected a "
                  "multiple of mesh.pp = %d (micro-batches go round the pipeline in groups of "
                  "mesh.pp)",
                  s->micro_batches, mesh->pp);
    if (OK(parallel, zero) && cfg->parallel.zero >= 2)
      tl__problem(p,
                  "schedule.kind = \"interleaved\" with parallel.zero = %d: ZeRO-2 and 3 stream "
                  "gradients and gather parameters in one chunk's order, which a stage of "
                  "several chunks does not follow yet; expected parallel.zero 0 or 1",
                  cfg->parallel.zero);
  }
  /* ZeRO-2 streams and ZeRO-3 gathers in the order of a one-pass backward */
  if (OK(schedule, kind) && OK(parallel, zero) && s->kind == TL_SCHEDULE_ZERO_BUBBLE &&
      cfg->parallel.zero >= 2)
    tl__problem(p,
                "schedule.kind = \"zero_bubble\" with parallel.zero = %d: ZeRO-2 and 3 stream "
                "gradients and gather parameters in a one-pass backward's order, which "
                "zero-bubble's separate weight passes do not follow yet; expected parallel.zero "
                "0 or 1, or schedule.kind \"1f1b\"",
                cfg->parallel.zero);

  /* What the runtime does not run yet: refused here, before any rank
   * starts, rather than accepted and ignored (the config never lies). */
  if (OK(parallel, zero) && OK(checkpoint, format) && cfg->parallel.zero == 3 &&
      cfg->checkpoint.format == TL_CHECKPOINT_FILE)
    tl__problem(p,
                "checkpoint.format = \"file\" with parallel.zero = 3: one checkpoint file is "
                "assembled on one rank, which would hold the whole model ZeRO-3 shards; expected "
                "\"sharded\" or \"auto\"");
  if (OK(parallel, zero) && OK(parallel, deterministic) && cfg->parallel.zero > 0 &&
      cfg->parallel.deterministic)
    tl__problem(p,
                "parallel.zero = %d with parallel.deterministic = true: the deterministic mode "
                "sums whole fixed-point gradients over the replicas and does not shard them; "
                "expected parallel.zero = 0",
                cfg->parallel.zero);
  if (OK(parallel, grad_reduce) && OK(parallel, deterministic) &&
      cfg->parallel.grad_reduce == TL_PRECISION_BF16 && cfg->parallel.deterministic)
    tl__problem(p,
                "parallel.grad_reduce = \"bf16\" with parallel.deterministic = true: the "
                "deterministic mode sums exact 64-bit fixed-point gradients over the replicas; "
                "expected parallel.grad_reduce = \"fp32\"");
  if (OK(mesh, cp) && mesh->cp > 1 && mlp)
    tl__problem(p,
                "mesh.cp = %d with model.kind = \"mlp\": context parallelism splits sequences, "
                "which an MLP has none of; expected mesh.cp = 1",
                mesh->cp);
  if (OK(parallel, recompute) && OK(model, kind) && cfg->model.kind == TL_MODEL_MLP &&
      cfg->parallel.recompute == TL_RECOMPUTE_SELECTIVE)
    tl__problem(p,
                "parallel.recompute = \"selective\" with model.kind = \"mlp\": selective "
                "recomputation recomputes attention, which an MLP has none of; expected \"none\" "
                "or \"full\"");
  /* the deterministic mode's canonical order covers the sums over the batch,
   * micro-batches, replicas and stages; tensor parallelism splits sums
   * inside a layer (partial products, vocabulary and sequence shards) that
   * it does not order yet, and its fixed-point kernels exist on the CPU */
  if (OK(parallel, deterministic) && cfg->parallel.deterministic) {
    if (OK(mesh, tp) && mesh->tp > 1)
      tl__problem(p,
                  "parallel.deterministic = true with mesh.tp = %d: the deterministic mode covers "
                  "data and pipeline parallelism (any mesh.dp and mesh.pp); tensor parallelism's "
                  "partial sums are not in its canonical order yet; expected mesh.tp = 1",
                  mesh->tp);
    if (OK(mesh, cp) && mesh->cp > 1)
      tl__problem(p,
                  "parallel.deterministic = true with mesh.cp = %d: the deterministic mode covers "
                  "data and pipeline parallelism; context parallelism's attention merges its "
                  "key/value blocks in ring order, which its canonical order does not cover; "
                  "expected mesh.cp = 1",
                  mesh->cp);
    if (OK(device, type) && cfg->device.type == TL_DEVICE_CUDA)
      tl__problem(p,
                  "parallel.deterministic = true with device.type = \"cuda\": its exact "
                  "fixed-point gradient sums run on the CPU backend only; expected \"cpu\"");
  }
  if (OK(train, val_every) && OK(data, val) && t->val_every > 0 && cfg->data.val[0] == '\0')
    tl__problem(p,
                "train.val_every = %d: needs data.val (the token file to validate on); set it, "
                "or train.val_every to 0",
                t->val_every);

  if (OK(train, lr) && OK(train, min_lr) && t->min_lr > t->lr)
    tl__problem(p, "train.min_lr = %g: must be <= train.lr = %g", t->min_lr, t->lr);
  if (OK(checkpoint, keep) && OK(checkpoint, dir) && cfg->checkpoint.keep > 0 &&
      cfg->checkpoint.dir[0] == '\0')
    tl__problem(p, "checkpoint.keep = %d: needs checkpoint.dir (where the checkpoints are)",
                cfg->checkpoint.keep);
  if (OK(checkpoint, resume) && OK(checkpoint, dir) &&
      strcmp(cfg->checkpoint.resume, "latest") == 0 && cfg->checkpoint.dir[0] == '\0')
    tl__problem(p,
                "checkpoint.resume = \"latest\": needs checkpoint.dir (where to look for the "
                "newest checkpoint)");
  if (OK(checkpoint, every) && OK(checkpoint, dir) && cfg->checkpoint.every > 0 &&
      cfg->checkpoint.dir[0] == '\0')
    tl__problem(p, "checkpoint.every = %d: needs checkpoint.dir (where to write them)",
                cfg->checkpoint.every);
#undef OK
}

tl_status tl_config_check_world(const struct tl_config* cfg, int world_size) {
  const struct tl_mesh_config* m = &cfg->mesh;
  long long n = tl_config_ranks(m);
  if (n == world_size) return TL_OK;
  return TL_ERRF(TL_ERR_CONFIG,
                 "mesh: dp * tp * pp * cp = %d * %d * %d * %d = %lld ranks, but this job has %d "
                 "rank%s: start it with %lld ranks (mpiexec -n %lld) or change the mesh",
                 m->dp, m->tp, m->pp, m->cp, n, world_size, world_size == 1 ? "" : "s", n, n);
}
