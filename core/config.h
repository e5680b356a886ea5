/* config.h — the training config: one JSON document (the planner writes the
 * same format), parsed into plain structs.
 *
 * Sections: model, mesh, schedule, parallel, train, data, device, checkpoint.
 * Every field has a default (tl_config_defaults) so that a config names only
 * what it changes. Parsing reports every problem at once, each with its JSON
 * path, the bad value and what is allowed; unknown keys get a "did you mean".
 *
 * Sizes: train.batch_size is the GLOBAL batch in sequences, the same for
 * every mesh (the one law); each data-parallel replica takes batch_size / dp
 * of it, split further into schedule.micro_batches micro-batches, which is
 * also how a single device accumulates gradients. */
#ifndef TL_CORE_CONFIG_H
#define TL_CORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_PATH_MAX 1024
#define TL_MLP_MAX_LAYERS 16
#define TL_MAX_STAGES 64
#define TL_MAX_VIRTUAL_STAGES 16 /* schedule.virtual_stages: model chunks per pipeline stage */

typedef enum { TL_MODEL_GPT = 0, TL_MODEL_MLP, TL_MODEL_LLAMA } tl_model_kind;
/* the mesh's axes: data, tensor, pipeline and context (sequence) parallel */
typedef enum { TL_AXIS_DP = 0, TL_AXIS_TP, TL_AXIS_PP, TL_AXIS_CP } tl_axis;
#define TL_N_AXES 4
typedef enum {
  TL_SCHEDULE_GPIPE = 0,
  TL_SCHEDULE_1F1B,
  TL_SCHEDULE_INTERLEAVED,
  TL_SCHEDULE_ZERO_BUBBLE
} tl_schedule_kind;
typedef enum { TL_LR_COSINE = 0, TL_LR_CONSTANT } tl_lr_schedule;
/* activation recomputation (graph/model.h's tl_model_recompute): none;
 * selective, the attention core of each block (Korthikanti et al. 2022);
 * full, each block from its input */
typedef enum { TL_RECOMPUTE_NONE = 0, TL_RECOMPUTE_SELECTIVE, TL_RECOMPUTE_FULL } tl_recompute;

/* train.precision: "fp32", or "bf16" mixed precision (activations and
 * their gradients stored in bf16, fp32 master weights, gradients and AdamW
 * moments, fp32 arithmetic: graph/graph.h's tl_graph_set_precision) */
typedef enum { TL_PRECISION_FP32 = 0, TL_PRECISION_BF16 } tl_precision;

/* model.rope_scaling: Llama 3.1's frequency scaling (transformers' rope_type
 * "llama3"); factor 0 = none (JSON null, the default) */
struct tl_rope_scaling {
  float factor;
  float low_freq_factor, high_freq_factor;
  int original_max_position_embeddings;
};

struct tl_model_config {
  tl_model_kind kind; /* "gpt" | "mlp" | "llama"; default gpt */
  /* gpt and llama */
  int n_layers;          /* default 4 */
  int n_heads;           /* default 4 */
  int n_embd;            /* channels; default 128 */
  int vocab_size;        /* default 256 (byte-level) */
  int padded_vocab_size; /* 0 = vocab_size rounded up to a multiple of 128 (llm.c) */
  int max_seq_len;       /* gpt: positions in wpe; llama: the longest sequence; default 64 */
  /* llama */
  int n_kv_heads;   /* key/value heads (grouped-query attention); 0 = n_heads */
  int ffn_hidden;   /* the SwiGLU MLP's width; 0 = tl_config_ffn_hidden's rule */
  float rope_theta; /* RoPE's base; default 10000 */
  struct tl_rope_scaling rope_scaling;
  float norm_eps;      /* RMSNorm's epsilon; default 1e-5 */
  bool tie_embeddings; /* the LM head is the token embedding; default false */
  /* mlp: sizes[0] inputs, sizes[n_mlp_layers] outputs (classes) */
  int n_mlp_layers;
  int mlp_sizes[TL_MLP_MAX_LAYERS + 1];
  /* initial weights */
  uint64_t seed;               /* Philox key; default 1337 */
  char init_from[TL_PATH_MAX]; /* "" = from the RNG, else an llm.c model file */
};

struct tl_mesh_config {
  int dp, tp, pp, cp;       /* default 1 each */
  tl_axis order[TL_N_AXES]; /* innermost first; default {tp, cp, dp, pp} */
};

struct tl_schedule_config {
  tl_schedule_kind kind; /* "gpipe" | "1f1b" | "interleaved" | "zero_bubble"; default 1f1b */
  int micro_batches;     /* per replica per step; default 1 */
  int virtual_stages;    /* interleaved only; default 1 */
  /* layers per pipeline stage; n_stage_layers = 0 (default): balance FLOPs */
  int n_stage_layers;
  int stage_layers[TL_MAX_STAGES];
};

struct tl_parallel_config {
  int zero;               /* 0..3; default 0 */
  double bucket_mb;       /* DP all-reduce bucket size; default 25 */
  tl_recompute recompute; /* "none" | "selective" | "full"; default none */
  bool sequence_parallel; /* default false */
  /* the data-parallel gradient reduction's dtype: "fp32" (default) or
   * "bf16" (rounded, summed in bf16, widened back: dp/buckets.h) */
  tl_precision grad_reduce;
  /* every mesh-dependent sum in one canonical order (exact fixed-point
   * gradient sums): bit-identical parameters across data x pipeline meshes
   * with the same micro-batch size; default false */
  bool deterministic;
  /* seconds a rank may wait in one collective or transfer before the job
   * ends naming what is stuck (core/watchdog.h); 0 = never; default 1800 */
  double timeout_s;
};

struct tl_train_config {
  int steps;                  /* default 100 */
  int batch_size;             /* global, in sequences; default 4 */
  int seq_len;                /* T; default 64; <= model.max_seq_len */
  float lr;                   /* peak; default 1e-3 */
  float min_lr;               /* cosine floor; default 0 */
  int warmup_steps;           /* default 0 */
  tl_lr_schedule lr_schedule; /* "cosine" | "constant"; default cosine */
  float beta1, beta2, eps;    /* default 0.9, 0.95, 1e-8 */
  float weight_decay;         /* on 2-D weights only; default 0.0 */
  float grad_clip;            /* global norm; 0 = off; default 1.0 */
  int val_every;              /* steps; 0 = never; default 0 */
  int val_batches;            /* batches per validation; default 4 */
  int sample_tokens;          /* generated at the end; 0 = none; default 64 */
  int sample_top_k;           /* 1 = greedy; default 1 */
  /* a step whose loss or gradient norm is not finite: skipped (no update)
   * instead of stopping the run; default false */
  bool skip_nonfinite;
  tl_precision precision; /* "fp32" | "bf16"; default fp32 */
};

struct tl_data_config {
  char train[TL_PATH_MAX]; /* llm.c token file; required for training */
  char val[TL_PATH_MAX];   /* optional */
  /* "" = samples print as token ids (as bytes when the vocabulary is 256),
   * else a Hugging Face tokenizer.json or llm.c's GPT-2 tokenizer file,
   * which decodes them to text */
  char tokenizer[TL_PATH_MAX];
};

struct tl_device_config {
  tl_device_type type; /* "cpu" | "cuda"; default cpu (CUDA: one GPU per local rank) */
  int threads;         /* CPU threads per rank; 0 = automatic */
};

/* "auto" (sharded with parallel.zero 3, else one file), "file", "sharded" */
typedef enum {
  TL_CHECKPOINT_AUTO = 0,
  TL_CHECKPOINT_FILE,
  TL_CHECKPOINT_SHARDED
} tl_checkpoint_format;

struct tl_checkpoint_config {
  char dir[TL_PATH_MAX]; /* "" = no checkpoints */
  int every;             /* steps; 0 = only at the end (when dir is set) */
  /* "" = start fresh, else a trellis checkpoint (file or directory), or
   * "latest": the newest in dir (none yet: start fresh) */
  char resume[TL_PATH_MAX];
  tl_checkpoint_format format;
  int keep; /* the newest checkpoints kept in dir; 0 = all */
};

struct tl_config {
  struct tl_model_config model;
  struct tl_mesh_config mesh;
  struct tl_schedule_config schedule;
  struct tl_parallel_config parallel;
  struct tl_train_config train;
  struct tl_data_config data;
  struct tl_device_config device;
  struct tl_checkpoint_config checkpoint;
};

void tl_config_defaults(struct tl_config* cfg);

/* "gpipe", "1f1b", "interleaved", "zero_bubble": the config's names. */
const char* tl_schedule_kind_name(tl_schedule_kind k);

/* Parses and validates a JSON file (or text); every problem is reported in
 * tl_last_error(), one per line. *out holds defaults + the file on success. */
tl_status tl_config_load(const char* path, struct tl_config* out);
tl_status tl_config_parse(const char* json_text, const char* source_name, struct tl_config* out);

/* Validates a config built or changed in code as a loaded one is (every
 * field's range, the rules between fields): TL_ERR_CONFIG with every
 * problem, one per line, as from `source`. */
tl_status tl_config_validate(const struct tl_config* cfg, const char* source);

/* The ranks a mesh has: dp * tp * pp * cp. */
static inline long long tl_config_ranks(const struct tl_mesh_config* m) {
  return (long long)m->dp * m->tp * m->pp * m->cp;
}

/* Checks that need the job: dp * tp * pp * cp == world_size. */
tl_status tl_config_check_world(const struct tl_config* cfg, int world_size);

/* Writes cfg as JSON (every field), atomically (temporary file + rename). */
tl_status tl_config_save(const struct tl_config* cfg, const char* path);

/* The padded vocabulary (llm.c's rounding when padded_vocab_size is 0). */
int tl_config_padded_vocab(const struct tl_model_config* m);

/* A Llama's key/value heads (n_kv_heads, or n_heads when it is 0) and its
 * MLP width (ffn_hidden, or when it is 0 Meta's rule: 2/3 of 4 n_embd,
 * rounded up to a multiple of 256). */
int tl_config_kv_heads(const struct tl_model_config* m);
int tl_config_ffn_hidden(const struct tl_model_config* m);

#ifdef __cplusplus
}
#endif

#endif
