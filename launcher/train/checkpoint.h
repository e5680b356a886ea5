/* checkpoint.h — model and training-state files.
 *
 * llm.c model files (GPT-2 only): 256 int32 (magic 20240326, version 3 for
 * fp32 or 5 for bf16, max_seq_len, vocab_size, num_layers, num_heads,
 * channels, padded_vocab_size), then the parameters in llm.c's order, so GPT-2
 * weights exported by llm.c load unchanged.
 *
 * trellis checkpoints: 256 int32 (magic 20261129, version 2, the model's
 * sizes, parameter count, step, data position and tensor count), a
 * checksum table (for each tensor of the model, in llm.c's order, the XXH3
 * 64-bit hash of its parameters, first and second AdamW moments), then
 * parameters and both AdamW moments in fp32: everything a run needs to
 * continue bit-identically. A read verifies every tensor and names the
 * first that does not match; version 1 files (no table) load unverified.
 *
 * Every write is atomic (temporary file, then rename); every read checks the
 * file against the configured model and names what differs. */
#ifndef TL_LAUNCHER_CHECKPOINT_H
#define TL_LAUNCHER_CHECKPOINT_H

#include <stdint.h>

#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_LLMC_MODEL_MAGIC 20240326
#define TL_CHECKPOINT_MAGIC 20261129

tl_status tl_llmc_model_read(const char* path, const tl_model* m, float* params);
/* Header and size only: what tl_llmc_model_read would refuse, without reading. */
tl_status tl_llmc_model_check(const char* path, const tl_model* m);
tl_status tl_llmc_model_write(const char* path, const tl_model* m, const float* params);
/* The 1024-byte header (256 int32) of an fp32 llm.c model file of m. */
void tl_llmc_header(const tl_model* m, int32_t* h);

struct tl_train_state {
  int64_t step;          /* optimizer steps taken */
  int64_t data_position; /* the training loader's position */
};

tl_status tl_checkpoint_write(const char* path, const tl_model* m, const struct tl_train_state* s,
                              const float* params, const float* adam_m, const float* adam_v);
tl_status tl_checkpoint_read(const char* path, const tl_model* m, struct tl_train_state* s,
                             float* params, float* adam_m, float* adam_v);
/* Header and size only: what tl_checkpoint_read would refuse, without reading. */
tl_status tl_checkpoint_check(const char* path, const tl_model* m);

/* Checkpoints in a checkpoint.dir are named step_NNNNNN.ckpt (a file, or a
 * sharded checkpoint's directory: either appears only when complete).
 * The newest — the highest step — into path (cap bytes) and *step; path
 * "" and *step -1 when the directory holds none (or does not exist). */
tl_status tl_checkpoint_latest(const char* dir, char* path, size_t cap, int64_t* step);
/* Removes all but the newest `keep` of them (files and directories);
 * *removed counts what went. */
tl_status tl_checkpoint_prune(const char* dir, int keep, int* removed);

/* The 1024-byte header (256 int32) of a checkpoint of model m, for the
 * sharded format's parts (sharded.h): the model's sizes; int64 fields at
 * the header's int32 index `at` (TL_CKPT_H_*). */
#define TL_CKPT_H_PARAMS 32
#define TL_CKPT_H_STEP 34
#define TL_CKPT_H_POSITION 36
#define TL_CKPT_H_SLICES 38
#define TL_CKPT_H_ELEMENTS 40
/* 42: a file's tensor count; 27-31 and 44-47 a Llama's sizes (checkpoint.c) */
void tl_checkpoint_header(const tl_model* m, int version, int32_t* h);
void tl_checkpoint_header_set(int32_t* h, int at, int64_t v);
int64_t tl_checkpoint_header_get(const int32_t* h, int at);
/* Magic, version and the model's sizes against m, naming what differs. */
tl_status tl_checkpoint_header_check(const char* path, const int32_t* h, const tl_model* m,
                                     int version);

#ifdef __cplusplus
}
#endif

#endif
