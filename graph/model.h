/* model.h — the models trellis trains: their parameter layout, their
 * initialisation, and the graphs that compute them.
 *
 * gpt: GPT-2 — token + position embedding, pre-LayerNorm blocks of causal
 *   self-attention and a 4x GELU MLP, a final LayerNorm, and the LM head tied
 *   to the token embedding. Parameters in llm.c's order and shapes (each
 *   per-layer tensor stacked over layers), so llm.c model files load as is.
 * mlp: a token embedding followed by a chain of linear layers with GELU
 *   between them, predicting the next token from the current one; the
 *   design's "operator 1, operator 2" example.
 *
 * The graphs are the whole logical model, the same for every mesh: the
 * modules above rewrite, cut and replicate them.
 *
 * Initialisation is keyed per parameter tensor: element i of tensor k is
 * drawn from Philox(seed, k, i) with i its index in the whole tensor, so any
 * slice (a shard) can be drawn alone and equals the whole's. */
#ifndef TL_GRAPH_MODEL_H
#define TL_GRAPH_MODEL_H

#include <stdbool.h>

#include "core/config.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_MODEL_MAX_TENSORS 40

typedef enum { TL_INIT_NORMAL = 0, TL_INIT_ZEROS, TL_INIT_ONES } tl_init_kind;

struct tl_param_tensor {
  char name[16];
  int n_dims;
  int64_t shape[4];
  int64_t offset; /* elements into the flat parameter vector */
  int64_t numel;
  bool decay; /* a weight matrix: weight decay applies */
  tl_init_kind init;
  float init_std;
  int64_t init_rows; /* NORMAL: rows [0, init_rows) of dim 0 drawn, the rest zero (wte padding) */
};

typedef struct tl_model {
  struct tl_model_config cfg;
  int vocab;        /* real vocabulary V */
  int padded_vocab; /* Vp: rows of wte and columns of the logits */
  int n_tensors;
  struct tl_param_tensor tensors[TL_MODEL_MAX_TENSORS];
  int64_t n_params; /* elements of the flat vector */
} tl_model;

/* Lays out the parameters of the configured model (checks the sizes). */
tl_status tl_model_init(const struct tl_model_config* cfg, tl_model* out);

/* Writes elements [begin, end) of the flat parameter vector (host memory,
 * `out` holds end - begin floats) from the RNG; any range draws what the
 * whole vector holds there. */
void tl_model_init_params(const tl_model* m, int64_t begin, int64_t end, float* out);

/* The tensor holding element `offset` of the flat vector, or -1. */
int tl_model_tensor_at(const tl_model* m, int64_t offset);

#define TL_MODEL_MAX_LAYERS 256

/* The values of a built graph that a caller feeds or reads, and where its
 * layers start: forward nodes [0, layer_begin[0]) embed the tokens, layer l
 * is [layer_begin[l], layer_begin[l+1]), and [layer_begin[n_layers],
 * n_forward) is the head and the loss. Pipeline stages cut between layers. */
struct tl_model_io {
  int tokens;  /* input, i32 (B, T) */
  int targets; /* input, i32 (B*T); -1 without loss */
  int logits;  /* (B, T, Vp) */
  int losses;  /* per position (B*T); -1 without loss */
  int n_layers;
  int layer_begin[TL_MODEL_MAX_LAYERS + 1];
};

/* Builds the graph for a batch of b sequences of t tokens. With a loss the
 * graph is differentiated (tl_graph_backward) and ready to train; without,
 * it computes logits only (evaluation, sampling). */
tl_status tl_model_build(const tl_model* m, int b, int t, bool with_loss, tl_graph** out,
                         struct tl_model_io* io);

/* The same, forward only (with the loss set but not differentiated): what a
 * pass rewrites before autodiff. */
tl_status tl_model_build_forward(const tl_model* m, int b, int t, bool with_loss, tl_graph** out,
                                 struct tl_model_io* io);

/* Activation recomputation on a differentiated graph of `io`'s layers
 * (tl_graph_recompute): SELECTIVE recomputes each block's attention (the
 * T x T probabilities are not kept: Korthikanti et al. 2022's selective
 * recomputation), FULL each layer from its input (only the layers' inputs
 * are kept through the forward). NONE changes nothing. TL_ERR_CONFIG for
 * SELECTIVE on a graph without attention (the MLP). */
tl_status tl_model_recompute(tl_graph* g, const struct tl_model_io* io, tl_recompute mode);

/* Whether element i of the flat parameter vector has a gradient that is
 * exactly zero in exact arithmetic: the GPT's attention key biases (adding
 * q.b_k shifts every score of a softmax row alike). Computed gradients there
 * are rounding noise, which AdamW scales up to full-size steps, so two runs
 * that sum in different orders move these elements differently. Comparisons
 * of parameters between meshes leave them out (and say so). */
bool tl_model_param_is_key_bias(const tl_model* m, int64_t i);

/* How far parameter vector `a` is from `ref`: for each tensor, the largest
 * absolute difference over the tensor's largest |ref| (so the measure is
 * relative to the tensor's scale, as reassociation errors are); the worst
 * tensor is reported. The attention key biases are measured apart (see
 * tl_model_param_is_key_bias). */
struct tl_param_diff {
  double worst;          /* over every tensor, key biases left out */
  int worst_tensor;      /* index into m->tensors */
  int64_t worst_element; /* in the flat vector */
  double key_bias_worst; /* absolute */
  int64_t n_key_bias;
};
void tl_model_compare(const tl_model* m, const float* a, const float* ref,
                      struct tl_param_diff* out);

/* Parameter tensor index by name ("qkvw"), or -1. */
int tl_model_tensor(const tl_model* m, const char* name);

#ifdef __cplusplus
}
#endif

#endif
