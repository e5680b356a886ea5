/* hf.h — Hugging Face model directories in and out: config.json for the
 * architecture, safetensors files (one, or shards listed by
 * model.safetensors.index.json) for the weights.
 *
 * A Llama is transformers' LlamaForCausalLM, a GPT its GPT2LMHeadModel.
 * trellis's tensors are stacked over layers and its vocabulary padded; a
 * Hugging Face tensor is one layer's slice of one of them (the real
 * vocabulary rows only), GPT-2's Conv1D weights transposed (they are stored
 * (in, out)). Reading is checked as strictly as token files are: every
 * tensor the model needs must be there once, of its shape and a dtype
 * trellis reads (F32, BF16, F16), in a whole file, and nothing else may be
 * — each refusal names the file and the tensor. */
#ifndef TL_LAUNCHER_HF_H
#define TL_LAUNCHER_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/status.h"
#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether `path` names a directory (a Hugging Face model's, for
 * model.init_from; a file is an llm.c model file). */
bool tl_hf_is_dir(const char* path);

/* Loads the training config at `path` (tl_config_load) and, when its
 * model.init_from names a Hugging Face directory, takes the architecture
 * from that directory's config.json: model.kind and every field of the
 * model the config does not set come from it (transformers 4's rope_theta
 * and rope_scaling, or 5's rope_parameters); a field the config sets must
 * agree, or both are named. What trellis does not compute (another
 * model_type, activation, rope type, biases, head size) is refused by
 * name. The result is validated as a config is. */
tl_status tl_hf_config_load(const char* path, struct tl_config* cfg);

/* One Hugging Face tensor of a model: a layer's slice of trellis tensor
 * `tensor` (layer -1: the whole tensor), `numel` elements from element
 * `full` of the flat parameter vector (the vocabulary's real rows only).
 * Its shape is (rows, cols) — or (rows) when n_dims is 1 — and when
 * `transposed` trellis holds it as (cols, rows). */
struct tl_hf_tensor {
  char name[96];
  int tensor, layer;
  int n_dims;
  int64_t rows, cols;
  bool transposed;
  int64_t full, numel;
};

/* The Hugging Face tensors of model m (gpt or llama), in the flat vector's
 * order, into out (may be NULL); returns how many there are, or -1 for a
 * model kind with no Hugging Face form (the MLP). */
int tl_hf_tensors(const tl_model* m, struct tl_hf_tensor* out);

/* Checks (without reading the weights) that directory `dir` holds exactly
 * model m's tensors, or reads them into params (m->n_params floats, the
 * vocabulary's padded rows zero). */
tl_status tl_hf_model_check(const char* dir, const tl_model* m);
tl_status tl_hf_model_read(const char* dir, const tl_model* m, float* params);

/* Export: where each tensor goes. Files in order (one "model.safetensors",
 * or "model-0000k-of-0000n.safetensors" when the model is more than
 * max_file_bytes), each with its header; tensor i in file file_of[i] at
 * byte at[i]. The plan is the same on every rank. */
struct tl_hf_file {
  char name[64];
  char* header; /* header_len bytes: the length word and the JSON */
  int64_t header_len, size;
};
typedef struct tl_hf_export {
  int n_tensors, n_files;
  struct tl_hf_tensor* tensors;
  int* file_of;
  int64_t* at;
  struct tl_hf_file* files;
} tl_hf_export;

tl_status tl_hf_export_plan(const tl_model* m, int64_t max_file_bytes, tl_hf_export* out);
void tl_hf_export_free(tl_hf_export* x);

/* Writes elements [full, full + n) of the flat parameter vector, held at
 * src, where the plan puts them (fds: the plan's files, open for writing;
 * the vocabulary's padded rows are not written). */
tl_status tl_hf_export_write(const tl_hf_export* x, const int* fds, int64_t full, int64_t n,
                             const float* src);

/* dir/config.json for model m (transformers' LlamaConfig or GPT2Config),
 * and with several files dir/model.safetensors.index.json; written to
 * temporary names and renamed. */
tl_status tl_hf_write_config(const char* dir, const tl_model* m);
tl_status tl_hf_write_index(const char* dir, const tl_hf_export* x);

#ifdef __cplusplus
}
#endif

#endif
