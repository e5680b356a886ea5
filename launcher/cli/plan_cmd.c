/* plan_cmd.c — `trellis plan`: which data x tensor x pipeline split to use
 * for a model on a cluster. Reads the options, prices every split with the
 * planner's search (planner/search.h), has plan_report.c print them ranked
 * by predicted step time, what bounds the winner and what was rejected and
 * why (and, where none fits, the plans on fewer devices or more nodes);
 * --out writes the winner
 * as a training config that `trellis train` runs unchanged.
 *
 * `trellis train` runs data x tensor x pipeline meshes with every ZeRO
 * stage and recomputation mode; a plan it could not run would be marked
 * not runnable, a CPU cluster's search (this machine) would leave it out,
 * and --out always writes the best runnable plan. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/config.h"
#include "core/device.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "launcher/cli/cli.h"
#include "launcher/cli/plan_report.h"
#include "launcher/cli/plan_svg.h"
#include "launcher/job/spawn.h"
#include "launcher/train/hf.h"
#include "planner/cluster.h"
#include "planner/cost.h"
#include "planner/recommend.h"
#include "planner/search.h"
#include "tp/tp.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: trellis plan --model CONFIG.json --cluster CLUSTER.json [--batch B] [--seq S]\n"
          "                    [--top K] [--json] [--out PLAN.json] [--svg FILE] [--nodes N]\n"
          "                    [--dtype bf16|fp32]\n"
          "                    [--fix dp=..,tp=..,pp=..,cp=..,micro_batch=..,micro_batches=..,\n"
          "                           zero=..,recompute=none|selective|full,sp=0|1,\n"
          "                           schedule=gpipe|1f1b|interleaved|zero_bubble,\n"
          "                           virtual_stages=..,bucket_mb=..,grad_reduce=bf16|fp32,\n"
          "                           overlap=0|1,attention=fused|spec]\n"
          "                    [--allow-tp-across-nodes]\n"
          "\n"
          "Ranks every data x tensor x pipeline x context split of the cluster's devices\n"
          "(micro-batch size and count, GPipe, 1F1B, interleaved 1F1B of 2 to 8 chunks a\n"
          "rank (\"int:v\"), zero-bubble (\"zb\"), ZeRO 0-3, recomputation (none,\n"
          "selective, full), sequence parallelism with tp > 1; context parallelism cp of 2\n"
          "to 64, powers of two whose 2 cp chunks divide the sequence, its ring priced on\n"
          "the cp group's link beside the attention) by predicted step time.\n"
          "--model: a training config, GPT or MLP; its model section is planned and the\n"
          "rest (data, optimizer, checkpoints) is carried into --out. --batch and --seq\n"
          "default to its train.batch_size and train.seq_len.\n"
          "--cluster: a cluster spec (examples/clusters/).\n"
          "--top K: rows shown (default 10). --json: {\"plans\": [...], \"rejected\": {...}},\n"
          "and where none fits \"why_none_fits\", \"fewer_devices\" and \"more_nodes\".\n"
          "--svg FILE: the winner's pipeline schedule and mesh as a picture.\n"
          "--calibrate OUT.json [--ranks N] [--device cpu|cuda] [--hosts ..]: measure this\n"
          "machine (or nodes) into a cluster spec as a job of N ranks: the matmul's rate\n"
          "over 64 shapes (the GEMM table), attention by head dimension and sequence\n"
          "length, element-wise rates, AdamW's memory traffic, all-reduce bandwidth and\n"
          "latency, all-gather, reduce-scatter and send bandwidth.\n"
          "cpu (default): the CPU backend, N default the online cores; cuda: one GPU a\n"
          "rank, N default this node's GPUs, bf16 matmuls as bf16 training runs them,\n"
          "NCCL's collectives, the GPU's memory and the process's reserve beyond its\n"
          "tensors. --hosts H1,H2 | --hostfile FILE (with --ranks, as many on each node):\n"
          "a spec of those nodes, the links inside a node and between nodes each measured.\n"
          "--out: the best plan `trellis train` runs, as a\n"
          "complete config (atomic write).\n"
          "--nodes N: plan for N nodes of the spec's kind (fewer or more than it lists).\n"
          "--fix: keep those choices;\n"
          "bucket_mb and grad_reduce default to the config's parallel.bucket_mb and\n"
          "parallel.grad_reduce (bucket_mb=0: one all-reduce after the backward, as\n"
          "runs without overlap did; --out writes it as one bucket a stage). overlap=0\n"
          "prices every data-parallel collective exposed (ZeRO-3's gathers too), as a\n"
          "published run that overlapped nothing; trellis train always overlaps, so not\n"
          "with --out. attention=fused prices attention as a fused (flash) kernel runs it,\n"
          "at half the matrix products' rate, in place of the spec's (the unfused kernels'\n"
          "of the runs the GPU specs were fitted on): a published run's; not with --out\n"
          "(trellis's CUDA attention is a fallback kernel) nor on a CPU cluster.\n"
          "--dtype: training precision, written to --out as train.precision (default bf16\n"
          "where the cluster has a bf16 peak; fp32 on CPU clusters, which run bf16 at\n"
          "their fp32 peak).\n"
          "When no split of all the devices fits, it says why (the rule, the most devices\n"
          "the rules allow, or the memory the least hungry plan needs) and, where the\n"
          "mesh rules or --fix are the cause, plans fewer devices; where none of those fits\n"
          "either, names the fewest nodes of the spec's kind above them on which a plan\n"
          "fits, with its plans (exit 1, nothing written: --nodes N plans them).\n"
          "hwTFLOP/s counts the FLOPs a device executes (recomputation included); MFU the\n"
          "model's FLOPs (without) over the peak.\n"
          "Exit status: 0 a plan was found (on fewer devices where no split of them all\n"
          "fits), 1 none fits or bad input, 2 bad usage.\n");
}

static int parse_int(const char* s, int lo, int* out) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (!s[0] || *end || v < lo || v > INT_MAX) return 0;
  *out = (int)v;
  return 1;
}

/* "dp=4,tp=1,schedule=1f1b" -> options (attention=fused: *fused); 0 and a
 * message on a bad item. */
static int parse_fix(char* spec, struct tl_search_options* o, bool* fused) {
  for (char* item = strtok(spec, ","); item; item = strtok(NULL, ",")) {
    char* eq = strchr(item, '=');
    if (!eq) {
      fprintf(stderr, "trellis plan: --fix item '%s': expected NAME=VALUE\n", item);
      return 0;
    }
    *eq = '\0';
    const char *k = item, *v = eq + 1;
    int* dst = NULL;
    int lo = 1;
    if (strcmp(k, "dp") == 0) dst = &o->fix_dp;
    if (strcmp(k, "tp") == 0) dst = &o->fix_tp;
    if (strcmp(k, "pp") == 0) dst = &o->fix_pp;
    if (strcmp(k, "cp") == 0) dst = &o->fix_cp;
    if (strcmp(k, "micro_batch") == 0) dst = &o->fix_micro_batch;
    if (strcmp(k, "micro_batches") == 0) dst = &o->fix_n_micro;
    if (strcmp(k, "zero") == 0) dst = &o->fix_zero, lo = 0;
    if (strcmp(k, "sp") == 0) dst = &o->fix_sp, lo = 0;
    if (strcmp(k, "virtual_stages") == 0 || strcmp(k, "v") == 0) dst = &o->fix_virtual_stages;
    if (strcmp(k, "recompute") == 0) {
      int rc = -1;
      for (int i = 0; i < 3; i++)
        if (strcmp(v, tl_plan_recompute_name((tl_recompute)i)) == 0) rc = i;
      if (rc < 0) {
        fprintf(stderr, "trellis plan: --fix recompute=%s: expected none, selective or full\n", v);
        return 0;
      }
      o->fix_recompute = rc;
      continue;
    }
    if (strcmp(k, "bucket_mb") == 0) {
      char* end = NULL;
      double mb = strtod(v, &end);
      if (!*v || *end || !(mb >= 0) || mb > 1e6) {
        fprintf(stderr,
                "trellis plan: --fix bucket_mb=%s: expected MiB >= 0 (0: one all-reduce after "
                "the backward)\n",
                v);
        return 0;
      }
      o->dp_bucket_mb = mb;
      continue;
    }
    if (strcmp(k, "overlap") == 0) {
      if (strcmp(v, "0") && strcmp(v, "1")) {
        fprintf(stderr, "trellis plan: --fix overlap=%s: expected 0 or 1\n", v);
        return 0;
      }
      o->no_overlap = strcmp(v, "0") == 0;
      continue;
    }
    if (strcmp(k, "attention") == 0) {
      if (strcmp(v, "fused") && strcmp(v, "spec")) {
        fprintf(stderr,
                "trellis plan: --fix attention=%s: expected fused (a flash-attention kernel's "
                "rate) or spec (the cluster spec's)\n",
                v);
        return 0;
      }
      *fused = strcmp(v, "fused") == 0;
      continue;
    }
    if (strcmp(k, "grad_reduce") == 0) {
      if (strcmp(v, "bf16") && strcmp(v, "fp32")) {
        fprintf(stderr, "trellis plan: --fix grad_reduce=%s: expected bf16 or fp32\n", v);
        return 0;
      }
      o->grad_reduce = strcmp(v, "bf16") == 0 ? TL_BF16 : TL_F32;
      continue;
    }
    if (strcmp(k, "schedule") == 0) {
      if (strcmp(v, "gpipe") == 0)
        o->fix_schedule = TL_SCHEDULE_GPIPE;
      else if (strcmp(v, "1f1b") == 0)
        o->fix_schedule = TL_SCHEDULE_1F1B;
      else if (strcmp(v, "zero_bubble") == 0 || strcmp(v, "zb") == 0)
        o->fix_schedule = TL_SCHEDULE_ZERO_BUBBLE;
      else if (strcmp(v, "interleaved") == 0)
        o->fix_schedule = TL_SCHEDULE_INTERLEAVED;
      else {
        fprintf(stderr,
                "trellis plan: --fix schedule=%s: expected gpipe, 1f1b, interleaved or "
                "zero_bubble\n",
                v);
        return 0;
      }
      continue;
    }
    if (!dst) {
      fprintf(stderr,
              "trellis plan: --fix %s: unknown; expected dp, tp, pp, micro_batch, "
              "micro_batches, zero, recompute, sp, schedule, virtual_stages, bucket_mb, "
              "grad_reduce, overlap or attention\n",
              k);
      return 0;
    }
    if (!parse_int(v, lo, dst) || (dst == &o->fix_zero && *dst > 3) ||
        (dst == &o->fix_sp && *dst > 1)) {
      fprintf(stderr, "trellis plan: --fix %s=%s: expected %s\n", k, v,
              dst == &o->fix_zero ? "0, 1, 2 or 3"
              : dst == &o->fix_sp ? "0 or 1"
                                  : "an integer >= 1");
      return 0;
    }
  }
  return 1;
}

/* The search over more nodes, when no split of the cluster's devices
 * fits (nor of fewer): the MORE_COUNTS fewest node counts a mesh fills up
 * to 64 times the cluster's devices (at least 4096), and what it found. */
#define MORE_COUNTS 128
static int64_t more_devices_max(const tl_cluster* c) {
  const int64_t d = 64 * (int64_t)tl_cluster_devices(c);
  return d < 4096 ? 4096 : d;
}

/* Device counts with a plan that the search over fewer devices looks for. */
#define FEWER_COUNTS 16

/* The cost models of the context-parallel degrees the search prices:
 * powers of two from 2 to TL_PLAN_MAX_CP whose 2 cp chunks divide the
 * sequence (fix: that degree alone; none for an MLP, which has no
 * sequence), each on the heap (megabytes). */
#define TL_PLAN_MAX_CP 64
struct cp_models {
  tl_cost_model* m[16];
  int n;
};

static void free_cp_models(struct cp_models* x) {
  for (int i = 0; i < x->n; i++) free(x->m[i]);
  x->n = 0;
}

static tl_status build_cp_models(const struct tl_model_config* mc, int seq, tl_dtype dtype,
                                 int max_tp, int fix, struct cp_models* out) {
  out->n = 0;
  if (mc->kind == TL_MODEL_MLP || fix == 1) return TL_OK;
  int want[16], n = 0;
  if (fix > 1)
    want[n++] = fix;
  else
    for (int cp = 2; cp <= TL_PLAN_MAX_CP; cp *= 2)
      if (seq % (2 * cp) == 0) want[n++] = cp;
  for (int i = 0; i < n; i++) {
    tl_cost_model* m = malloc(sizeof *m);
    if (!m) {
      free_cp_models(out);
      return TL_ERRF(TL_ERR_NOMEM, "out of memory for the cost model of cp %d", want[i]);
    }
    out->m[out->n++] = m;
    tl_status st = tl_cost_model_build_cp(mc, seq, dtype, max_tp, want[i], m);
    if (st != TL_OK) {
      free_cp_models(out);
      return fix > 1 ? TL_ERRF(st, "--fix cp=%d: %s", fix, tl_last_error()) : st;
    }
  }
  return TL_OK;
}

/* The winner's schedule and mesh as a picture (atomic write). */
static int write_svg(const tl_plan* p, const struct tl_config* cfg, const tl_cluster* c,
                     const char* path) {
  char title[256];
  snprintf(title, sizeof title,
           "trellis plan: %s on %s: dp %d, tp %d, pp %d, cp %d, %d micro-batches of %d",
           cfg->model.kind == TL_MODEL_GPT     ? "gpt"
           : cfg->model.kind == TL_MODEL_LLAMA ? "llama"
                                               : "mlp",
           c->name, p->dp, p->tp, p->pp, tl_plan_cp(p), p->n_micro, p->micro_batch);
  tl_atomic_file af;
  tl_status st = tl_atomic_file_open(&af, path);
  if (st == TL_OK) {
    st = tl_plan_svg(p, title, af.f);
    if (st == TL_OK)
      st = tl_atomic_file_commit(&af);
    else
      tl_atomic_file_abort(&af);
  }
  if (st != TL_OK) {
    fprintf(stderr, "trellis plan: --svg: %s\n", tl_cli_error());
    return 1;
  }
  fprintf(stderr, "trellis plan: drew the winner's schedule and mesh in %s\n", path);
  return 0;
}

int tl_cli_plan(int argc, char** argv) {
  const char *model_path = NULL, *cluster_path = NULL, *out_path = NULL, *dtype_name = NULL;
  const char *svg_path = NULL, *calibrate_path = NULL, *device_name = NULL;
  int ranks = 0, hosts = 0;
  int batch = 0, seq = 0, top = 10, nodes = 0, as_json = 0, allow_tp = 0;
  char fix[512] = "";
  for (int i = 0; i < argc; i++) {
    const char* a = argv[i];
    int has = i + 1 < argc;
    int skip = tl_launch_option_args(argc - i, argv + i); /* --hosts, --hostfile */
    if (skip > 0) {
      hosts = 1;
      i += skip - 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--json") == 0) {
      as_json = 1;
    } else if (strcmp(a, "--allow-tp-across-nodes") == 0) {
      allow_tp = 1;
    } else if (has && strcmp(a, "--model") == 0) {
      model_path = argv[++i];
    } else if (has && strcmp(a, "--cluster") == 0) {
      cluster_path = argv[++i];
    } else if (has && strcmp(a, "--out") == 0) {
      out_path = argv[++i];
    } else if (has && strcmp(a, "--svg") == 0) {
      svg_path = argv[++i];
    } else if (has && strcmp(a, "--calibrate") == 0) {
      calibrate_path = argv[++i];
    } else if (has && strcmp(a, "--ranks") == 0) {
      if (!parse_int(argv[++i], 1, &ranks)) {
        fprintf(stderr, "trellis plan: --ranks %s: expected an integer >= 1\n", argv[i]);
        return 2;
      }
    } else if (has && strcmp(a, "--device") == 0) {
      device_name = argv[++i];
    } else if (has && strcmp(a, "--dtype") == 0) {
      dtype_name = argv[++i];
    } else if (has && strcmp(a, "--fix") == 0) {
      snprintf(fix, sizeof fix, "%s", argv[++i]);
    } else if (has && (strcmp(a, "--batch") == 0 || strcmp(a, "--seq") == 0 ||
                       strcmp(a, "--top") == 0 || strcmp(a, "--nodes") == 0)) {
      int* dst = a[2] == 'b' ? &batch : a[2] == 's' ? &seq : a[2] == 't' ? &top : &nodes;
      if (!parse_int(argv[++i], 1, dst)) {
        fprintf(stderr, "trellis plan: %s %s: expected an integer >= 1\n", a, argv[i]);
        return 2;
      }
    } else {
      fprintf(stderr, "trellis plan: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  /* what the command writes at its end, checked before it measures or
   * searches */
  if ((calibrate_path && tl_cli_writable("trellis plan", "--calibrate", calibrate_path)) ||
      (out_path && tl_cli_writable("trellis plan", "--out", out_path)) ||
      (svg_path && tl_cli_writable("trellis plan", "--svg", svg_path)))
    return 2;
  if (device_name && !calibrate_path) {
    fprintf(stderr, "trellis plan: --device is --calibrate's (what to measure)\n");
    return 2;
  }
  if (hosts && !calibrate_path) {
    fprintf(stderr, "trellis plan: --hosts and --hostfile are --calibrate's (where to measure)\n");
    return 2;
  }
  if (hosts && !ranks) {
    fprintf(stderr,
            "trellis plan --calibrate: --hosts and --hostfile need --ranks N (the job's ranks, "
            "as many on every node)\n");
    return 2;
  }
  if (calibrate_path) {
    tl_device_type device = TL_DEVICE_CPU;
    if (device_name && strcmp(device_name, "cuda") == 0) {
      device = TL_DEVICE_CUDA;
    } else if (device_name && strcmp(device_name, "cpu") != 0) {
      fprintf(stderr, "trellis plan: --device %s: expected cpu or cuda\n", device_name);
      return 2;
    }
    if (device == TL_DEVICE_CUDA && !hosts) {
      /* with --hosts the GPUs are the hosts' (this may be a login node) */
      const char* why = NULL;
      int gpus = tl_cuda_device_count(&why);
      if (gpus == 0) {
        fprintf(stderr, "trellis plan --calibrate --device cuda: %s\n", why);
        return 1;
      }
      if (!ranks) ranks = gpus;
      char who[64];
      /* one node unless a launcher (or a Slurm allocation, whose srun
       * spans its nodes) places the ranks */
      if (ranks > gpus && !tl_launch_detected(who, sizeof who) && !getenv("SLURM_JOB_ID")) {
        fprintf(stderr,
                "trellis plan --calibrate --device cuda: --ranks %d: this machine has %d GPU%s, "
                "one a rank (more nodes: --hosts or --hostfile)\n",
                ranks, gpus, gpus == 1 ? "" : "s");
        return 2;
      }
    } else {
      long cores = tl_cpu_cores();
      if (!ranks) ranks = cores > 1 ? (int)cores : 2;
    }
    return tl_cli_plan_calibrate(argc + 2, argv - 2, calibrate_path, ranks, device);
  }
  if (!model_path || !cluster_path) {
    fprintf(stderr, "trellis plan: --model and --cluster are required\n");
    usage(stderr);
    return 2;
  }
  struct tl_config cfg;
  if (tl_hf_config_load(model_path, &cfg) != TL_OK) {
    fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
    return 1;
  }
  tl_cluster c;
  if (tl_cluster_load(cluster_path, &c) != TL_OK) {
    fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
    return 1;
  }
  const int spec_nodes = c.nodes;
  if (nodes) c.nodes = nodes;
  if (!batch) batch = cfg.train.batch_size;
  if (!seq) seq = cfg.train.seq_len;
  tl_dtype dtype = c.peak_bf16 > 0 ? TL_BF16 : TL_F32;
  if (dtype_name) {
    if (strcmp(dtype_name, "bf16") == 0)
      dtype = TL_BF16;
    else if (strcmp(dtype_name, "fp32") == 0)
      dtype = TL_F32;
    else {
      fprintf(stderr, "trellis plan: --dtype %s: expected bf16 or fp32\n", dtype_name);
      return 2;
    }
  }
  /* a CPU computes bf16 runs in fp32 (on fp32 copies): at its fp32 peak,
   * and in fp32 unless asked */
  if (c.device == TL_DEVICE_CPU) {
    if (!dtype_name) dtype = TL_F32;
    if (c.peak_bf16 <= 0) c.peak_bf16 = c.peak_fp32;
  }
  struct tl_search_options o;
  tl_search_options_defaults(&o, batch, dtype);
  o.allow_tp_across_nodes = allow_tp;
  /* where trellis itself trains (CPU ranks), plan only what its trainer runs */
  o.trainer_only = c.device == TL_DEVICE_CPU;
  o.dp_bucket_mb = cfg.parallel.bucket_mb;
  o.grad_reduce = cfg.parallel.grad_reduce == TL_PRECISION_BF16 ? TL_BF16 : TL_F32;
  bool fused = false;
  if (fix[0] && !parse_fix(fix, &o, &fused)) return 2;
  if (fused && out_path) {
    fprintf(stderr,
            "trellis plan: --fix attention=fused with --out: it prices another runtime's fused "
            "attention kernel (a published run's), and trellis train's CUDA attention is a "
            "fallback kernel, so the config would not run what was priced; drop --out or "
            "attention=fused\n");
    return 2;
  }
  if (fused && c.device == TL_DEVICE_CPU) {
    fprintf(stderr,
            "trellis plan: --fix attention=fused on the CPU cluster %s: its attention rate is "
            "trellis's own kernel's, measured (--calibrate); fused prices a GPU run's\n",
            c.name);
    return 2;
  }
  if (fused) tl_cluster_use_fused_attention(&c);
  if (o.no_overlap && out_path) {
    fprintf(stderr,
            "trellis plan: --fix overlap=0 with --out: it prices a run whose data-parallel "
            "communication overlapped nothing (a published run's), and trellis train always "
            "overlaps it, so the config would not run what was priced; drop --out or "
            "overlap=0\n");
    return 2;
  }
  if (o.grad_reduce == TL_BF16 && cfg.parallel.deterministic) {
    fprintf(stderr,
            "trellis plan: --fix grad_reduce=bf16 with the config's parallel.deterministic = true: "
            "the deterministic mode sums exact fixed-point gradients; expected fp32\n");
    return 2;
  }
  if (cfg.model.kind == TL_MODEL_MLP &&
      (o.fix_sp == 1 || o.fix_recompute > 0 || o.fix_schedule == TL_SCHEDULE_ZERO_BUBBLE ||
       o.fix_schedule == TL_SCHEDULE_INTERLEAVED || o.fix_virtual_stages > 1 || o.fix_cp > 1)) {
    fprintf(stderr, "trellis plan: --fix %s: an MLP is planned without it (GPT and Llama only)\n",
            o.fix_cp > 1                                ? "cp"
            : o.fix_sp == 1                             ? "sp=1"
            : o.fix_recompute > 0                       ? "recompute"
            : o.fix_schedule == TL_SCHEDULE_ZERO_BUBBLE ? "schedule=zero_bubble"
            : o.fix_schedule == TL_SCHEDULE_INTERLEAVED ? "schedule=interleaved"
                                                        : "virtual_stages");
    return 2;
  }

  tl_timer timer;
  tl_timer_start(&timer);
  tl_cost_model cm;
  tl_search_result r;
  /* graphs for the tensor-parallel degrees the search may price: within a
   * node unless tp may cross nodes; and for each context-parallel degree */
  const int max_tp = allow_tp ? 0 : c.devices_per_node;
  struct cp_models cpm;
  if (tl_cost_model_build_tp(&cfg.model, seq, dtype, max_tp, &cm) != TL_OK ||
      build_cp_models(&cfg.model, seq, dtype, max_tp, o.fix_cp, &cpm) != TL_OK) {
    fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
    return 1;
  }
  o.cp_models = (const tl_cost_model* const*)cpm.m;
  o.n_cp_models = cpm.n;
  if (tl_search_run(&cm, &c, &o, &r) != TL_OK) {
    fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
    free_cp_models(&cpm);
    return 1;
  }
  /* none fits: why; and where the mesh rules or the fixed choices leave
   * the cluster's devices no split, the plans on fewer of them (where
   * memory is what fails, fewer devices only need more of it) */
  char why[1024] = "";
  tl_search_result fewer;
  memset(&fewer, 0, sizeof fewer);
  const bool searched_fewer = tl_search_mesh_bound(&r);
  if (r.n_plans == 0) tl_search_explain(&cm, &c, &o, &r, why, sizeof why);
  if (searched_fewer && tl_search_fewer(&cm, &c, &o, FEWER_COUNTS, &fewer) != TL_OK) {
    fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
    tl_search_free(&r);
    return 1;
  }
  /* no split of these devices fits, nor of fewer, and memory is among the
   * reasons (some plan was priced and refused): more devices hold more of
   * a model, so the fewest nodes of this kind above them on which a plan
   * fits (a figure to ask a cluster for; nothing is written for nodes not
   * planned). A whole fixed mesh uses its devices and no more. */
  struct tl_plan_more more;
  memset(&more, 0, sizeof more);
  more.spec_nodes = spec_nodes;
  const bool memory_failed = r.rejected[TL_REJECT_MEMORY] > 0 || fewer.n_evaluated > 0;
  const bool searched_more =
      r.n_plans == 0 && fewer.n_plans == 0 && memory_failed &&
      !(o.fix_dp >= 1 && o.fix_tp >= 1 && o.fix_pp >= 1 && (o.fix_cp >= 1 || cpm.n == 0));
  if (searched_more && tl_search_more_nodes(&cm, &c, &o, more_devices_max(&c), MORE_COUNTS,
                                            &more.nodes, &more.searched_to, &more.r) != TL_OK) {
    fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
    tl_search_free(&r);
    tl_search_free(&fewer);
    return 1;
  }
  /* said where a plan was priced there, or no count was left to search */
  const bool show_more =
      searched_more && (more.nodes > 0 || more.r.n_evaluated > 0 || more.searched_to == 0);
  double secs = tl_timer_elapsed_s(&timer);
  if (as_json) {
    if (!tl_plan_print_json(&r, searched_fewer ? &fewer : NULL, show_more ? &more : NULL, why, top,
                            &c, secs)) {
      fprintf(stderr, "trellis plan: cannot encode the plans as JSON\n");
      tl_search_free(&r);
      tl_search_free(&fewer);
      tl_search_free(&more.r);
      return 1;
    }
  } else {
    tl_plan_print_table(&r, top, &c, &cm, batch, dtype, secs);
    if (why[0]) printf("\nno split of all %d devices fits: %s.\n", tl_cluster_devices(&c), why);
    if (searched_fewer) tl_plan_print_fewer(&fewer, top, &c, FEWER_COUNTS);
    if (show_more) tl_plan_print_more(&more, top, &c);
  }
  fflush(stdout); /* what follows on stderr after it, not inside it */
  const tl_search_result* chosen = r.n_plans ? &r : fewer.n_plans ? &fewer : NULL;
  int status = 0;
  if (r.n_plans == 0 && more.nodes)
    fprintf(stderr,
            "trellis plan: no plan fits all %d devices of %s; the fewest nodes above them with a "
            "plan that fits: %d (%s)\n",
            tl_cluster_devices(&c), c.name, more.nodes,
            as_json ? "\"more_nodes\"" : "listed above");
  else if (r.n_plans == 0)
    fprintf(stderr, "trellis plan: no plan fits all %d devices of %s%s\n", tl_cluster_devices(&c),
            c.name,
            chosen    ? "; the best on fewer devices are listed"
            : as_json ? ""
                      : " (why: above)");
  if (r.n_plans == 0 && as_json && why[0]) fprintf(stderr, "trellis plan: %s\n", why);
  if (!chosen) {
    status = 1;
  } else if (out_path) {
    const tl_plan* best = NULL;
    for (int i = 0; i < chosen->n_plans && !best; i++)
      if (chosen->plans[i].runnable) best = &chosen->plans[i];
    struct tl_config plan_cfg;
    if (!best) {
      fprintf(stderr,
              "trellis plan: no plan that fits is one `trellis train` runs today; nothing "
              "written to %s\n",
              out_path);
      status = 1;
    } else if (tl_plan_to_config(best, &cfg, seq, &c, dtype, &plan_cfg) != TL_OK ||
               tl_config_save(&plan_cfg, out_path) != TL_OK) {
      fprintf(stderr, "trellis plan: %s\n", tl_cli_error());
      status = 1;
    } else {
      fprintf(as_json ? stderr : stdout, "%swrote %s: plan %d (dp %d, tp %d, pp %d, cp %d%s)%s\n",
              as_json ? "trellis plan: " : "\n", out_path, (int)(best - chosen->plans) + 1,
              best->dp, best->tp, best->pp, tl_plan_cp(best),
              chosen == &fewer ? ", on fewer devices" : "",
              best == chosen->plans ? "" : ", the best that `trellis train` runs today");
      /* the layout priced replaces the given config's: said, not silent */
      if (memcmp(plan_cfg.mesh.order, cfg.mesh.order, sizeof cfg.mesh.order) != 0) {
        const tl_axis* o = cfg.mesh.order;
        fprintf(as_json ? stderr : stdout,
                "%smesh.order: written as the layout priced, [\"tp\", \"cp\", \"dp\", \"pp\"] "
                "(tensor parallel innermost), not the config's [\"%s\", \"%s\", \"%s\", "
                "\"%s\"]\n",
                as_json ? "trellis plan: " : "", tl_axis_name(o[0]), tl_axis_name(o[1]),
                tl_axis_name(o[2]), tl_axis_name(o[3]));
      }
      if (!as_json)
        printf("(`trellis train %s --cluster %s` sets its steps beside this price)\n", out_path,
               cluster_path);
    }
  }
  if (chosen && svg_path && write_svg(&chosen->plans[0], &cfg, &c, svg_path) != 0) status = 1;
  tl_search_free(&r);
  tl_search_free(&fewer);
  tl_search_free(&more.r);
  free_cp_models(&cpm);
  return status;
}
