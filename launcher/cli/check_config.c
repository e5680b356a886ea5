/* check_config.c — `trellis check CONFIG.json`: validate a config without
 * running it, and print where every rank goes.
 *
 * The rank map is for a person deciding whether a mesh is the one they
 * meant: each rank (0-based, as MPI numbers them) with its device number
 * (1-based, as the design's pictures number devices), its coordinates, what
 * it runs on and the members of its three groups; then the same facts per
 * pipeline stage and per group, in device numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/mesh.h"
#include "graph/model.h"
#include "launcher/cli/cli.h"
#include "launcher/train/hf.h"
#include "launcher/train/inputs.h"
#include "pp/stage.h"
#include "tp/tp.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis check CONFIG.json [--ranks-per-node N]\n"
          "\n"
          "Validates a training config (every problem at once) and prints its rank map:\n"
          "each rank's mesh coordinates, device and groups. --ranks-per-node N places\n"
          "ranks N to a node (as mpiexec fills nodes) to show each rank's node and GPU;\n"
          "by default all ranks are on one node. Exit status: 0 valid, 1 invalid, 2 usage.\n");
}

/* "{0, 2}" or "devices 1, 3" style lists of a rank's group along `axis`. */
static void group_list(const tl_mesh* m, int rank, tl_axis axis, int base, char* buf, size_t size) {
  int members[64];
  int n = m->size[axis];
  size_t len = 0;
  buf[0] = '\0';
  if (n > 64) { /* too many to list: they are evenly spaced */
    int first = tl_mesh_group_id(m, rank, axis) + base;
    snprintf(buf, size, "%d,%d,...,%d (%d)", first, first + m->stride[axis],
             first + (n - 1) * m->stride[axis], n);
    return;
  }
  tl_mesh_group_ranks(m, rank, axis, members);
  for (int i = 0; i < n && len < size; i++)
    len += (size_t)snprintf(buf + len, size - len, "%s%d", i ? "," : "", members[i] + base);
}

static void placement(const struct tl_config* cfg, int rank, int per_node, char* buf, size_t size) {
  int node = rank / per_node, local = rank % per_node;
  if (cfg->device.type == TL_DEVICE_CUDA)
    snprintf(buf, size, "node %d cuda:%d", node, local);
  else
    snprintf(buf, size, "node %d cpu", node);
}

static void print_summary(const char* path, const struct tl_config* cfg, int per_node) {
  const struct tl_model_config* m = &cfg->model;
  printf("%s: valid\n\n", path);
  if (m->kind == TL_MODEL_GPT) {
    printf(
        "model     gpt: %d layers, %d heads, %d channels, vocabulary %d (padded %d), %d "
        "positions\n",
        m->n_layers, m->n_heads, m->n_embd, m->vocab_size, tl_config_padded_vocab(m),
        m->max_seq_len);
  } else if (m->kind == TL_MODEL_LLAMA) {
    printf(
        "model     llama: %d layers, %d heads over %d key/value heads, %d channels, MLP %d, "
        "vocabulary %d (padded %d), %s head, rope theta %g%s, up to %d positions\n",
        m->n_layers, m->n_heads, tl_config_kv_heads(m), m->n_embd, tl_config_ffn_hidden(m),
        m->vocab_size, tl_config_padded_vocab(m), m->tie_embeddings ? "tied" : "untied",
        m->rope_theta, m->rope_scaling.factor > 0 ? " (Llama 3.1 scaling)" : "", m->max_seq_len);
  } else {
    printf("model     mlp: %d layers, sizes", m->n_mlp_layers);
    for (int i = 0; i <= m->n_mlp_layers; i++) printf("%s%d", i ? " -> " : " ", m->mlp_sizes[i]);
    printf("\n");
  }
  const struct tl_mesh_config* me = &cfg->mesh;
  const bool cp = me->cp > 1; /* the context axis shows where it splits sequences */
  printf("mesh      dp %d x tp %d x pp %d", me->dp, me->tp, me->pp);
  if (cp) printf(" x cp %d", me->cp);
  printf(" = %lld ranks; order", tl_config_ranks(me));
  for (int i = 0, n = 0; i < TL_N_AXES; i++)
    if (cp || me->order[i] != TL_AXIS_CP)
      printf("%s %s", n++ ? "," : "", tl_axis_name(me->order[i]));
  printf(" (innermost first)\n");
  if (cp)
    printf(
        "context   each sequence in %d chunks of %d tokens; cp rank i holds chunks i and %d - i; "
        "attention passes key/value blocks around the cp ring\n",
        2 * me->cp, cfg->train.seq_len / (2 * me->cp), 2 * me->cp - 1);
  int per_replica = cfg->train.batch_size / me->dp;
  printf(
      "batch     %d %s per step = %d replica%s x %d, in %d micro-batch%s of %d "
      "(%s schedule",
      cfg->train.batch_size, "sequences", me->dp, me->dp == 1 ? "" : "s", per_replica,
      cfg->schedule.micro_batches, cfg->schedule.micro_batches == 1 ? "" : "es",
      per_replica / cfg->schedule.micro_batches, tl_schedule_kind_name(cfg->schedule.kind));
  if (cfg->schedule.kind == TL_SCHEDULE_INTERLEAVED)
    printf(", %d chunks a stage: %d virtual stages", cfg->schedule.virtual_stages,
           cfg->schedule.virtual_stages * cfg->mesh.pp);
  printf(")\n");
  printf("device    %s, one per rank; ", cfg->device.type == TL_DEVICE_CUDA ? "cuda" : "cpu");
  if (cfg->device.threads > 0)
    printf("%d CPU thread%s per rank\n", cfg->device.threads, cfg->device.threads == 1 ? "" : "s");
  else
    printf("CPU threads per rank automatic\n");
  if (cfg->train.precision == TL_PRECISION_BF16)
    printf(
        "precision bf16: activations and their gradients stored in bf16; weights, gradients, "
        "moments and logits in fp32; sums in fp32\n");
  else
    printf("precision fp32\n");
  if (cfg->mesh.dp * cfg->mesh.cp > 1)
    printf("reduce    gradients over %s in %s\n", cfg->mesh.cp > 1 ? "dp x cp" : "dp",
           cfg->parallel.grad_reduce == TL_PRECISION_BF16 ? "bf16 (half the bytes)" : "fp32");
  printf("nodes     %d rank%s per node (%s)\n", per_node, per_node == 1 ? "" : "s",
         per_node >= tl_config_ranks(me) ? "all on one node" : "--ranks-per-node");
}

static void print_rank_map(const struct tl_config* cfg, const tl_mesh* mesh, int per_node) {
  printf(
      "\nrank map: ranks count from 0 (as MPI numbers them), devices from 1 "
      "(device N is rank N-1);\ngroups list their members' ranks.\n\n");
  const int n_axes = mesh->size[TL_AXIS_CP] > 1 ? TL_N_AXES : 3; /* cp shown where it splits */
  printf("%5s %7s %4s %4s %4s", "rank", "device", "dp", "tp", "pp");
  if (n_axes > 3) printf(" %4s", "cp");
  printf("  %-16s  %-14s %-14s %-14s", "runs on", "dp group", "tp group", "pp group");
  if (n_axes > 3) printf(" cp group");
  printf("\n");
  for (int r = 0; r < mesh->n_ranks; r++) {
    int c[TL_N_AXES];
    tl_mesh_coords(mesh, r, c);
    char where[48], g[TL_N_AXES][256];
    placement(cfg, r, per_node, where, sizeof where);
    for (int a = 0; a < n_axes; a++) group_list(mesh, r, (tl_axis)a, 0, g[a], sizeof g[a]);
    printf("%5d %7d %4d %4d %4d", r, r + 1, c[TL_AXIS_DP], c[TL_AXIS_TP], c[TL_AXIS_PP]);
    if (n_axes > 3) printf(" %4d", c[TL_AXIS_CP]);
    printf("  %-16s ", where);
    for (int a = 0; a < n_axes; a++) {
      int pad = 12 - (int)strlen(g[a]);
      printf(" {%s}%*s", g[a], a < n_axes - 1 && pad > 0 ? pad : 0, "");
    }
    printf("\n");
  }
}

/* Layers [first, last] (from 1) of each stage, as the trainer cuts them:
 * balanced by FLOPs, embedding on the first stage, head on the last. */
static int stage_layers(const struct tl_config* cfg, int pp, int* first, int* last, double* share) {
  tl_model m;
  tl_graph* g = NULL;
  struct tl_model_io io;
  tl_tp_shard sh = {0};
  int micro = cfg->train.batch_size / cfg->mesh.dp / cfg->schedule.micro_batches;
  tl_pp_stage* st = calloc((size_t)pp, sizeof *st);
  /* the graph tensor-parallel rank 0 trains, cut as the trainer cuts it */
  int ok =
      st && tl_model_init(&cfg->model, &m) == TL_OK &&
      tl_tp_build(&m, micro > 0 ? micro : 1, cfg->train.seq_len / cfg->mesh.cp, cfg->mesh.tp, 0,
                  cfg->parallel.sequence_parallel, cfg->mesh.cp, 0, cfg->parallel.recompute,
                  cfg->schedule.kind == TL_SCHEDULE_ZERO_BUBBLE, &g, &io, &sh, NULL) == TL_OK &&
      tl_pp_partition(g, &io, pp, cfg->schedule.n_stage_layers ? cfg->schedule.stage_layers : NULL,
                      st) == TL_OK;
  double total = 0;
  for (int s = 0; ok && s < pp; s++) total += st[s].flops;
  for (int s = 0; ok && s < pp; s++) {
    first[s] = st[s].layer_begin + 1;
    last[s] = st[s].layer_end;
    share[s] = total > 0 ? st[s].flops / total : 0;
  }
  free(st);
  tl_graph_destroy(g);
  tl_tp_shard_free(&sh);
  return ok;
}

/* "wpe, attprojb, fcprojb": the tensors (per-layer views without their
 * ".N") of the parameters rank 0 alone holds. */
static void first_only(const tl_graph* full, const tl_tp_shard* sh, char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int k = 0; k < sh->n_params; k++) {
    if (sh->params[k].kind != TL_TP_FIRST || sh->params[k].numel == 0) continue;
    char name[TL_NAME_MAX];
    snprintf(name, sizeof name, "%s", full->values[sh->params[k].full_value].name);
    char* dot = strchr(name, '.');
    if (dot) *dot = '\0';
    char key[TL_NAME_MAX + 4];
    snprintf(key, sizeof key, ", %s,", name);
    char have[1024];
    snprintf(have, sizeof have, ", %s,", buf);
    if (strstr(have, key) || len >= size) continue;
    len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", name);
  }
}

/* What each tensor-parallel rank holds (tp/tp.h's pass over the model). */
static void print_shards(const struct tl_config* cfg, const tl_mesh* mesh) {
  int tp = mesh->size[TL_AXIS_TP];
  if (tp == 1) return;
  const struct tl_model_config* mc = &cfg->model;
  const bool gpt = mc->kind != TL_MODEL_MLP, sp = cfg->parallel.sequence_parallel;
  printf(
      "\ntensor-parallel shards (tp = %d%s):\n", tp,
      gpt && sp ? "; sequence-parallel: the norms and residuals hold 1/tp of the token rows" : "");
  tl_model m;
  tl_graph* full = NULL;
  struct tl_model_io io;
  if (tl_model_init(mc, &m) != TL_OK ||
      tl_model_build_forward(&m, 1, cfg->train.seq_len, true, &full, &io) != TL_OK) {
    printf("  (the model could not be built here: %s)\n", tl_cli_error());
    return;
  }
  const int wte = tl_graph_find(full, "wte");
  for (int r = 0; r < tp; r++) {
    tl_tp_shard sh;
    if (tl_tp_shard_layout(full, tp, r, sp, &sh) != TL_OK) {
      printf("  (the model does not split: %s)\n", tl_cli_error());
      break;
    }
    printf("  tp rank %d: ", r);
    if (gpt) {
      int h = mc->n_heads / tp;
      printf("heads %d-%d of %d, ", r * h + 1, (r + 1) * h, mc->n_heads);
    }
    if (mc->kind == TL_MODEL_LLAMA && tl_config_kv_heads(mc) != mc->n_heads) {
      int h = tl_config_kv_heads(mc) / tp;
      printf("key/value heads %d-%d of %d, ", r * h + 1, (r + 1) * h, tl_config_kv_heads(mc));
    }
    for (int k = 0; k < sh.n_params; k++) {
      const struct tl_tp_param* p = &sh.params[k];
      if (p->full_value != wte || p->kind != TL_TP_SPLIT || p->dim != 0) continue;
      int64_t v = p->shape[0];
      printf("vocabulary rows %lld-%lld of %lld, ", (long long)(r * v),
             (long long)((r + 1) * v - 1), (long long)p->full_shape[0]);
    }
    char also[256];
    first_only(full, &sh, also, sizeof also);
    printf("%.3gM of %.3gM parameters%s%s%s, on devices", sh.n_local / 1e6, sh.n_full / 1e6,
           also[0] ? " (with " : "", also, also[0] ? ", added once)" : "");
    int n = 0;
    for (int k = 0; k < mesh->n_ranks; k++) {
      int c[TL_N_AXES];
      tl_mesh_coords(mesh, k, c);
      if (c[TL_AXIS_TP] == r) printf("%s %d", n++ ? "," : "", k + 1);
    }
    printf("\n");
    if (r == tp - 1)
      printf("  %d of %d linear layers split (column-parallel, then row-parallel); the loss %s\n",
             sh.n_linear_split, sh.n_linear,
             sh.loss_split ? "vocabulary-parallel" : "whole on every rank");
    tl_tp_shard_free(&sh);
  }
  tl_graph_destroy(full);
}

/* Per stage and per group, in device numbers. */
static void print_by_stage_and_group(const struct tl_config* cfg, const tl_mesh* mesh) {
  int layers = cfg->model.kind == TL_MODEL_MLP ? cfg->model.n_mlp_layers : cfg->model.n_layers;
  int pp = mesh->size[TL_AXIS_PP];
  /* interleaved: each stage's chunks, virtual stages c * pp + s */
  const int v = cfg->schedule.kind == TL_SCHEDULE_INTERLEAVED ? cfg->schedule.virtual_stages : 1;
  const int nv = pp * v;
  int* firsts = calloc((size_t)nv, sizeof(int));
  int* lasts = calloc((size_t)nv, sizeof(int));
  double* shares = calloc((size_t)nv, sizeof(double));
  int balanced = firsts && lasts && shares && stage_layers(cfg, nv, firsts, lasts, shares);
  const char* how = !balanced ? "the model could not be built here, shown split evenly"
                    : cfg->schedule.n_stage_layers
                        ? "as schedule.stage_layers sets them"
                        : "cut to balance forward + backward FLOPs, as training cuts them";
  printf("\npipeline stages (layers counted from 1; %s%s):\n", how,
         v > 1 ? "; interleaved: each stage's chunks in the order micro-batches reach them" : "");
  for (int s = 0; s < pp; s++) {
    char lay[256];
    double share = 0;
    size_t at = 0;
    for (int c = 0; c < v && at < sizeof lay; c++) {
      int q = c * pp + s;
      int first = balanced ? firsts[q] : q * layers / nv + 1;
      int last = balanced ? lasts[q] : (q + 1) * layers / nv;
      share += balanced ? shares[q] : 0;
      const char* sep = c ? ", " : v > 1 ? "layers " : "";
      if (first == last)
        at += (size_t)snprintf(lay + at, sizeof lay - at, "%s%s%d", sep, v > 1 ? "" : "layer ",
                               first);
      else
        at += (size_t)snprintf(lay + at, sizeof lay - at, "%s%s%d-%d", sep, v > 1 ? "" : "layers ",
                               first, last);
    }
    printf("  stage %d (operator %d): %-13s", s, s + 1, lay);
    if (balanced && pp > 1) printf(" %3.0f%% of FLOPs", 100 * share);
    printf(" on devices");
    int n = 0;
    for (int r = 0; r < mesh->n_ranks; r++) {
      int c[TL_N_AXES];
      tl_mesh_coords(mesh, r, c);
      if (c[TL_AXIS_PP] == s) printf("%s %d", n++ ? "," : "", r + 1);
    }
    printf("\n");
  }
  print_shards(cfg, mesh);
  static const char* const titles[TL_N_AXES] = {
      "data-parallel groups (gradient all-reduce)", "tensor-parallel groups (layer shards)",
      "pipeline groups (stages passing activations point-to-point)",
      "context-parallel groups (sequence chunks, attention's key/value ring; gradients are summed "
      "over dp x cp)"};
  for (int a = 0; a < (mesh->size[TL_AXIS_CP] > 1 ? TL_N_AXES : 3); a++) {
    printf("%s:", titles[a]);
    if (mesh->size[a] == 1) {
      printf(" none (%s = 1)\n", tl_axis_name((tl_axis)a));
      continue;
    }
    printf("\n");
    for (int r = 0; r < mesh->n_ranks; r++) {
      if (tl_mesh_group_id(mesh, r, (tl_axis)a) != r) continue; /* once per group */
      char dev[256], ranks[256];
      group_list(mesh, r, (tl_axis)a, 1, dev, sizeof dev);
      group_list(mesh, r, (tl_axis)a, 0, ranks, sizeof ranks);
      printf("  devices {%s}  (ranks {%s})\n", dev, ranks);
    }
  }
  free(firsts);
  free(lasts);
  free(shares);
}

int tl_cli_check_config(int argc, char** argv) {
  const char* path = NULL;
  int per_node = 0;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--ranks-per-node") == 0 && i + 1 < argc) {
      char* end = NULL;
      long v = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || v < 1 || v > 1 << 20) {
        fprintf(stderr, "trellis check: --ranks-per-node '%s': expected an integer >= 1\n",
                argv[i]);
        return 2;
      }
      per_node = (int)v;
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      fprintf(stderr, "trellis check: unexpected argument '%s' with a config\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!path) {
    usage(stderr);
    return 2;
  }
  struct tl_config cfg;
  if (tl_hf_config_load(path, &cfg) != TL_OK) {
    fprintf(stderr, "trellis check: %s\n", tl_cli_error());
    return 1;
  }
  tl_mesh mesh;
  if (tl_mesh_from_config(&cfg.mesh, &mesh) != TL_OK) {
    fprintf(stderr, "trellis check: %s\n", tl_cli_error());
    return 1;
  }
  /* the files it names, as training will read them */
  if (tl_inputs_check(&cfg) != TL_OK) {
    fprintf(stderr, "trellis check: %s: %s\n", path, tl_cli_error());
    return 1;
  }
  if (per_node == 0 || per_node > mesh.n_ranks) per_node = mesh.n_ranks;
  print_summary(path, &cfg, per_node);
  print_rank_map(&cfg, &mesh, per_node);
  print_by_stage_and_group(&cfg, &mesh);
  return 0;
}
